"""Repro scripts: exported from a real finding, run in a fresh process from another directory.

The scripts run in subprocesses on purpose: a repro must stand alone (and a crash repro may
kill its process). They run on the CPU, where the shadow oracle sees the reads.
"""

import os
import stat
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from fuzzrunner import Case, _env, replay
from fuzzrunner.context import Context
from fuzzrunner.corpus import Corpus
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.finding import Finding, primary
from fuzzrunner.repro import export_repro, repro_script
from fuzzrunner.violation import Violation

# One xdist group: under `--dist loadgroup` a module's ungrouped tests spread over both workers, each
# setting up the module's fixtures; grouped, `finding` (a replay in a worker) is set up once per CI run.
pytestmark = [pytest.mark.skipif(_env.device_type() != "cpu",
                                 reason="the finding is made in-process by the CPU shadow oracle"),
              pytest.mark.xdist_group("repro")]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"max_loras": 1, "capture_sizes": [1]}
OPS = [{"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}]
CASE = Case("reference_runner", CONFIG, OPS, ["dummy_run_skips_mapping"])

CRASHY = '''
import os
import signal

from fuzzrunner.target import Target


def run(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if op["op"] == "raise":
                raise RuntimeError("boom in " + op["where"])
            if op["op"] == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)


TARGET = Target("crashy", "raises or dies on demand", cases=lambda faults, max_ops=8: None, run=run)
'''

USER_RUNNER = '''import torch

from fuzzrunner.target import Target


class Runner:
    def __init__(self):
        self.slots = torch.empty(4, dtype=torch.int64)

    def dummy_run(self):
        return int(self.slots.sum())


def run(case, ctx):
    r = Runner()
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            r.dummy_run()


TARGET = Target("user_runner", "reads a never-written buffer", cases=lambda faults, max_ops=8: None, run=run)
'''


@pytest.fixture(scope="module")
def finding() -> Finding:
    violations = replay(CASE)
    main = primary(violations)
    return Finding(main.signature, CASE, main, [v for v in violations if v is not main],
                   first_found_after_examples=7, found_after_s=1.5, minimized=True)


def run_script(path: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FUZZRUNNER_DEVICE": "cpu"}
    return subprocess.run([sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_script_reproduces_the_finding_from_another_directory(tmp_path, finding):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    path = export_repro(finding, out)
    assert path == out / f"repro_{finding.signature.id}.py" and path.stat().st_mode & stat.S_IXUSR
    done = run_script(path, elsewhere)
    assert done.returncode == 1, done.stderr[-2000:]
    assert finding.violation.message in done.stdout and finding.signature.short() in done.stdout
    assert "not reproduced" not in done.stdout


def test_after_the_fix_the_script_says_not_reproduced(tmp_path, finding):
    fixed = replace(finding, case=Case("reference_runner", CONFIG, OPS))  # the fault switched off
    done = run_script(export_repro(fixed, tmp_path / "fixed.py"), Path(os.sep))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "not reproduced"


def test_a_line_shift_is_not_a_fix_and_the_cwd_does_not_matter(tmp_path):
    """The finding is matched by the function holding the bad read, not by its line, and its file is
    named relative to its import root: edit above the bug, run from anywhere, still reproduced."""
    pkg = tmp_path / "myengine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    runner = pkg / "runner.py"
    runner.write_text(USER_RUNNER)
    spec = f"{runner}:TARGET"
    case = Case("user_runner", {}, [{"op": "dummy"}])
    main = primary(replay(case, target=spec))
    assert (main.kind, main.location) == ("uninitialized-read", "myengine/runner.py:11")
    assert main.site == "myengine/runner.py::Runner.dummy_run"
    script = export_repro(Finding(main.signature, case, main, target_spec=spec), tmp_path / "repro.py")
    runner.write_text("# a comment line\n# and another\n" + USER_RUNNER)  # the read moves to line 13
    for cwd in (tmp_path, pkg, Path(os.sep)):
        done = run_script(script, cwd)
        assert done.returncode == 1, (cwd, done.stdout, done.stderr[-2000:])
        assert "myengine/runner.py:13" in done.stdout
    runner.write_text(USER_RUNNER.replace("slots = torch.empty(4, dtype=torch.int64)",
                                          "slots = torch.zeros(4, dtype=torch.int64)"))
    done = run_script(script, tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "not reproduced", done.stderr[-2000:]


@pytest.mark.parametrize("breakage, reason", [
    ("unknown target", "unknown target"),
    ("no fuzzrunner", "No module named 'fuzzrunner'"),
    ("invalid case", "InvalidCase"),
])
def test_a_script_that_cannot_run_exits_2_with_the_reason(tmp_path, finding, breakage, reason):
    if breakage == "invalid case":
        pytest.importorskip("jsonschema", reason="jsonschema is not installed: case files and reports go unchecked here")
    text = repro_script(finding)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FUZZRUNNER_DEVICE": "cpu"}
    if breakage == "unknown target":
        text = text.replace('target="reference_runner"', 'target="no_such_target"')
    elif breakage == "no fuzzrunner":
        env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    else:
        text = text.replace('"num_tokens": 1', '"num_tokens": "one"')
    script = tmp_path / "repro.py"
    script.write_text(text)
    isolated = ["-I", "-S"] if breakage == "no fuzzrunner" else []  # no site-packages: no fuzzrunner
    done = subprocess.run([sys.executable, *isolated, str(script)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr[-2000:])
    assert done.stderr.startswith("could not run: ") and reason in done.stderr


def test_the_script_is_short_plain_and_explains_itself(tmp_path, finding):
    text = export_repro(finding, tmp_path / "repro.py").read_text()
    lines = text.splitlines()
    assert len(lines) <= 42 and text.isascii()  # 40, and the 2 lines of 'could not run' on a tool limitation
    compile(text, "repro.py", "exec")
    assert "hypothesis" not in text.lower()
    assert [line.strip() for line in lines if line.strip().startswith(("import", "from"))] == \
        ["import sys", "from fuzzrunner import Case, replay"]
    sig = finding.signature
    for needle in (sig.short(), sig.id, finding.violation.message, "reference_runner: found after 7 examples (1.5 s)",
                   "PYTHONPATH=<checkout> python repro.py", "exit 1: reproduced; 0: not reproduced; 2: could not run",
                   'faults=["dummy_run_skips_mapping"],',
                   '            {"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},',
                   'violations = replay(case, oracles=["shadow"])',
                   f'v.signature.matches("{sig.id}"'):
        assert needle in text, needle


def _finding(tool, kind, tensor="t") -> Finding:
    v = Violation(tool, kind, "kern", "file.py:1", tensor, "a message\nwith a second line")
    return Finding(v.signature, CASE, v)


@pytest.mark.parametrize("tool, kind, call", [
    ("shadow", "out-of-bounds", 'oracles=["shadow"])'),
    ("numeric", "numeric-mismatch", 'oracles=["numeric"])'),
    ("invariants", "invariant-violation", 'oracles=["invariants"])'),
    ("poison", "poison-divergence", 'oracles=["poison", "shadow"] if os.environ.get("FUZZRUNNER_DEVICE") == "cpu" '
                                    'else ["poison"])'),
    ("python", "crash", "oracles=None)"),
    ("worker", "timeout", "oracles=None, isolated=True)"),
    ("worker", "crash", "oracles=None, isolated=True)"),
    ("initcheck", "uninitialized-read", 'oracles=[], sanitizer="initcheck", device="cuda")'),
    ("racecheck", "sanitizer-error", 'oracles=[], sanitizer="racecheck", device="cuda")'),
    ("compute-sanitizer", "out-of-bounds", 'oracles=[], sanitizer="memcheck", device="cuda")'),
])
def test_the_script_replays_under_the_oracle_that_found_it(tool, kind, call):
    text = repro_script(_finding(tool, kind))
    assert f"violations = replay(case, {call}" in text
    assert "# message: a message\n" in text  # one line of it
    assert ("import os" in text) == (tool == "poison")
    crash = kind in ("crash", "timeout")
    assert ("v.kind in ('crash', 'timeout')" in text) == crash
    compile(text, "repro.py", "exec")


@pytest.mark.parametrize("tool, kind", [("worker", "timeout"), ("worker", "crash"), ("initcheck", "uninitialized-read"),
                                        ("shadow", "out-of-bounds")])
def test_a_script_replaying_in_a_worker_waits_the_timeout_its_finding_was_found_under(tool, kind):
    """Issue 47, item 12: a timeout finding of a 2.5 s campaign made its script wait the default 120 s
    (``replay`` honours the recorded one). A case replayed in this process has no timeout to pass."""
    finding = replace(_finding(tool, kind), case_timeout_s=2.5)
    worker = kind != "out-of-bounds"
    assert ("case_timeout=2.5)" in repro_script(finding)) == worker
    assert "case_timeout" not in repro_script(_finding(tool, kind))  # none recorded (older files): the default


def test_oracle_override_and_stale_read_note(finding):
    assert 'oracles=["numeric", "invariants"])' in repro_script(finding, oracle=["numeric", "invariants"])
    assert "initcheck cannot see a stale read" in repro_script(_finding("shadow", "stale-read"))
    with pytest.raises(InvalidArgument, match="unknown oracle 'shadwo'"):
        repro_script(finding, oracle="shadwo")


def test_crash_repros_give_their_verdict_even_when_the_case_kills_its_process(tmp_path):
    target = tmp_path / "crashy.py"
    target.write_text(CRASHY)
    spec = f"{target}:TARGET"
    raising = Case("crashy", {}, [{"op": "raise", "where": "op zero"}])
    main = primary(replay(raising, target=spec))
    assert main.kind == "crash"
    script = export_repro(Finding(main.signature, raising, main), tmp_path / "raise.py", target=spec)
    done = run_script(script, tmp_path)
    assert done.returncode == 1 and "RuntimeError: boom in op zero" in done.stdout, done.stderr[-2000:]
    # What a worker saw die replays in a worker: the script survives and says "reproduced".
    dying = Case("crashy", {}, [{"op": "segfault"}])
    v = Violation("worker", "crash", "", "SIGSEGV", "", "the worker died (SIGSEGV) in op 0 (segfault)")
    done = run_script(export_repro(Finding(v.signature, dying, v), tmp_path / "die.py", target=spec), tmp_path)
    assert done.returncode == 1 and "SIGSEGV" in done.stdout, (done.stdout, done.stderr[-2000:])


def test_export_from_a_finding_file_and_unwritable_paths(tmp_path, finding):
    saved = Corpus(tmp_path / "corpus").save_finding("reference_runner", finding)
    path = export_repro(saved, tmp_path / "from_file.py")
    assert path.read_text() == repro_script(finding, name="from_file.py")
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(InvalidArgument) as e:
        export_repro(finding, blocker / "repro.py")
    assert str(blocker / "repro.py") in str(e.value) and "\n" not in str(e.value)


def test_the_script_rebuilds_the_case_exactly():
    config = {**{f"knob_{i}": i for i in range(20)}, "odd": 'q"uote \\ tab\t \u00e9 \U0001f600', "big": float("inf"),
              "flags": [True, False, None], "nested": {"a": [1.5, -2]}}
    case = Case("reference_runner", config, OPS * 3, ["dummy_run_skips_mapping"])
    text = repro_script(replace(_finding("shadow", "out-of-bounds"), case=case))
    assert text.isascii() and max(len(line) for line in text.splitlines()[9:]) <= 110
    body = text.split("try:\n", 1)[1].split("    violations = ")[0]
    namespace: dict = {}
    exec(textwrap.dedent(body), namespace)  # builds `case`, runs nothing
    assert namespace["case"] == case


def test_a_device_mode_finding_replays_in_the_device_mode(tmp_path, monkeypatch):
    """A finding of the shadow oracle's device mode says so (its ``context``; a file from before findings
    recorded it, ``details["shadow_mode"]``), and its script sets ``FUZZRUNNER_SHADOW=device`` (unless the user
    set a mode) before it replays."""
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    violations = replay(CASE)
    main = primary(violations)
    monkeypatch.delenv("FUZZRUNNER_SHADOW")
    found = Finding(main.signature, CASE, main, context=Context.of("cpu", shadow="device"))
    old = Finding.from_dict({**found.to_dict(), "context": None,
                             "violation": {**main.to_dict(), "details": {**main.details, "shadow_mode": "device"}}})
    assert found.shadow_mode == old.shadow_mode == "device" and old.context is None
    assert repro_script(old) == repro_script(found)
    path = export_repro(found, tmp_path / "repro.py")
    text = path.read_text()
    assert 'if not os.environ.get("FUZZRUNNER_SHADOW", "").strip():' in text  # unset or empty: the device mode
    assert 'os.environ["FUZZRUNNER_SHADOW"] = "device"' in text
    assert text.index("FUZZRUNNER_SHADOW") < text.index("from fuzzrunner import")
    done = run_script(path, tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "FUZZRUNNER_SHADOW" not in repro_script(_finding("shadow", "stale-read"))  # the CPU oracle's
