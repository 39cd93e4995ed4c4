"""Issue 23, the engine half: what hostile targets and signals must not break.

Each test drives the real engine (``Hub``), the real command line (``fuzzrunner.cli.main``), or
``python -m fuzzrunner`` where a signal must hit the campaign process, on the targets of
hostile_targets.py, loaded as a user's FILE.py:OBJ.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.cli import main
from fuzzrunner.engine import Hub, WorkerSpec
from fuzzrunner.report import load_report

ROOT = Path(__file__).resolve().parents[2]
# One xdist group: under `--dist loadgroup` a module's ungrouped tests spread over both workers, each
# setting up the module's fixtures; grouped, `raises_hub` (a worker) is set up once per CI run.
pytestmark = pytest.mark.xdist_group("hardening_engine")
TARGETS = str(Path(__file__).with_name("hostile_targets.py"))


def spec(name: str) -> str:
    return f"{TARGETS}:{name}"


def fuzz(tmp_path, target, *extra, examples="3", seed="1"):
    return main(["fuzz", "--target", spec(target), "--max-examples", examples, "--seed", seed, "-q",
                 "--corpus", str(tmp_path / "corpus"), "--report", str(tmp_path / "r.json"), *extra])


def report(tmp_path) -> dict:
    [run] = load_report(tmp_path / "r.json")["runs"]
    return run


# -- 1. a BaseException raised by the target is the target's ------------------------------------

@pytest.fixture(scope="module")
def raises_hub():
    """One worker for the three exceptions (a worker start each cost seconds): each must leave it running."""
    with Hub(WorkerSpec(spec("RAISES")), timeout_s=60.0) as hub:
        yield hub


@pytest.mark.parametrize("what", ["KeyboardInterrupt", "GeneratorExit", "TargetsOwnBaseException"])
def test_a_base_exception_raised_in_run_is_a_crash_finding_at_the_targets_line(raises_hub, what):
    hub = raises_hub
    result = hub.run(Case("raises", {}, ({"op": "x", "n": 1, "what": what},)))
    pid = hub.worker.proc.pid
    [v] = result.violations
    assert (v.tool, v.kind, v.kernel) == ("python", "crash", what)
    line = next(i for i, text in enumerate(Path(TARGETS).read_text().splitlines(), 1) if "raise RAISED[what]" in text)
    assert v.location.endswith(f"hostile_targets.py:{line}") and "raised by the target" in v.message
    assert not result.crashed and hub.run(Case("raises", {}, ({"op": "x", "n": 1},))).violations == []
    assert hub.worker.proc.pid == pid  # the same worker goes on


def test_a_campaign_whose_target_raises_keyboard_interrupt_goes_on_and_reports_it(tmp_path):
    assert fuzz(tmp_path, "RAISES", examples="30") == 1
    run = report(tmp_path)
    [f] = run["findings"]
    assert f["violation"]["kernel"] == "KeyboardInterrupt" and f["minimized"]
    assert run["stop_reason"] != "interrupted" and run["generated"] >= 20


def _as_from_a_terminal() -> None:
    """The child's SIGINT as a terminal gives it (default, not blocked): a test process may have it ignored
    or blocked (a pytest-xdist worker after other tests), and a child inherits both, so Python would
    install no KeyboardInterrupt handler and the Ctrl-C below would never arrive."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_sleepy_campaign(tmp_path, *extra, sleep_s="60"):
    """``python -m fuzzrunner fuzz`` on SLEEPY; returns once a case runs in its worker."""
    started = tmp_path / "started"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOSTILE_MARK_FILE=str(started), HOSTILE_SLEEP_S=sleep_s)
    with open(tmp_path / "out.txt", "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fuzzrunner", "fuzz", "--target", spec("SLEEPY"),
                                 "--seed", "1", "-q", "--corpus", str(tmp_path / "corpus"),
                                 "--report", str(tmp_path / "r.json"), *extra],
                                env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_as_from_a_terminal)
    deadline = time.monotonic() + 180
    while not started.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the campaign never ran a case: {(tmp_path / 'out.txt').read_text()}")
        time.sleep(0.1)
    return proc


def test_a_real_ctrl_c_still_stops_the_campaign_with_its_report(tmp_path):
    proc = _start_sleepy_campaign(tmp_path, "--max-examples", "1000")
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()  # reaped here: never a ResourceWarning in a later test
    out = (tmp_path / "out.txt").read_text()
    assert code == 130, out
    run = report(tmp_path)
    assert run["stop_reason"] == "interrupted" and run["findings"] == [], out


def _terminal_job() -> None:
    """As a shell's foreground job: SIGINT as a terminal gives it, in a process group of its own, which a
    Ctrl-C reaches whole (the campaign process and its shard processes)."""
    _as_from_a_terminal()
    os.setpgid(0, 0)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.mark.parametrize("when", ["starting", "searching"])
def test_a_ctrl_c_reaching_every_shard_ends_the_campaign_with_their_results_and_blames_no_target(tmp_path, when):
    """A terminal's Ctrl-C reaches the campaign and its shards at once. The campaign process stops each shard
    once; a shard that also took the SIGINT had the campaign's SIGTERM land in its clean-up and lost its
    result ("a shard failed: KeyboardInterrupt"), and one still importing the target reported the target as
    failing to import. ``starting``: the Ctrl-C comes as the shard processes start; ``searching``: once a
    case runs."""
    started = tmp_path / "started"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOSTILE_MARK_FILE=str(started), HOSTILE_SLEEP_S="60")
    with open(tmp_path / "out.txt", "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fuzzrunner", "fuzz", "--target", spec("SLEEPY"),
                                 "--seed", "1", "-q", "--workers", "2", "--max-examples", "1000", "--corpus",
                                 str(tmp_path / "corpus"), "--report", str(tmp_path / "r.json")],
                                env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_terminal_job)
    try:
        deadline = time.monotonic() + 180
        ready = (lambda: len(_children(proc.pid)) >= 2) if when == "starting" else started.exists
        while not ready():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "out.txt").read_text()
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out = (tmp_path / "out.txt").read_text()
    assert code == 130, out
    assert "a shard failed" not in out and "failed to import" not in out, out
    run = report(tmp_path)
    assert run["stop_reason"] == "interrupted" and run["findings"] == [] and not run["errors"], out


# -- 4. a worker whose memory grows is recycled, with a word ------------------------------------

def test_a_leaking_target_gets_its_worker_recycled_counted_and_warned_once_not_a_finding(tmp_path, monkeypatch,
                                                                                         capsys):
    monkeypatch.setenv("HOSTILE_LEAK_MB", "40")
    assert fuzz(tmp_path, "LEAKY", "--max-worker-rss", "400", examples="12") == 0
    run = report(tmp_path)
    assert run["findings"] == [] and run["worker_restarts"] == 0
    assert run["worker_recycles"] >= 1
    [warning] = [w for w in run["warnings"] if "recycled" in w]
    assert "MB per case" in warning and "400 MB" in warning


def test_the_default_limit_is_a_multiple_of_the_size_after_the_first_case(monkeypatch):
    from fuzzrunner.engine import rss
    sizes = iter([300 << 20, 900 << 20, 1400 << 20])  # after cases 1, 2, 3
    monkeypatch.setattr(rss, "tree_rss", lambda pid: next(sizes))
    watch = rss.RssWatch()
    assert watch.check(1) == "" and watch.check(1) == ""  # 900 MB: under 300 MB + 1 GiB
    why = watch.check(1)
    assert "from 300 MB to 1400 MB over 2 case(s) (550.0 MB per case)" in why


# -- 5. the budget is a hard limit ----------------------------------------------------------------

def test_a_case_running_when_the_budget_ends_is_stopped_and_is_not_a_timeout_finding(tmp_path):
    started = time.monotonic()
    # 30 s: the worker's start-up (seconds on a busy machine) comes out of the budget, and the case must run
    proc = _start_sleepy_campaign(tmp_path, "--max-examples", "1000", "--budget", "30", "--case-timeout", "600",
                                  sleep_s="3600")
    try:
        code = proc.wait(timeout=150)  # a hang guard only: without a hard budget it waits out the 600 s timeout
    finally:
        proc.kill()
        proc.wait()
    out = (tmp_path / "out.txt").read_text()
    run = report(tmp_path)
    # the one case was stopped, not run: the campaign tested nothing, and never passes on that (exit 2)
    assert code == 2, out
    assert run["stop_reason"] == "budget" and run["findings"] == [] and run["budget_cut_cases"] == 1, out
    assert run["generated"] == 0 and any("only 0 valid case(s) ran" in e for e in run["errors"]), run["errors"]
    assert any("budget ran out during a case" in w for w in run["warnings"]), run["warnings"]
    assert time.monotonic() - started < 600


# -- 3. a renamed function is not a fix ----------------------------------------------------------

def test_renaming_the_function_that_does_the_bad_read_keeps_the_finding(tmp_path, capsys):
    import json
    import shutil

    target = tmp_path / "my_runner.py"
    shutil.copy(Path(__file__).with_name("renamable_target.py"), target)
    spec_ = f"{target}:TARGET"
    corpus = tmp_path / "corpus"
    assert main(["fuzz", "--target", spec_, "--max-examples", "20", "--seed", "1", "-q", "--corpus", str(corpus),
                 "--report", str(tmp_path / "before.json")]) == 1
    [before] = load_report(tmp_path / "before.json")["runs"][0]["findings"]
    assert before["violation"]["site"] == "my_runner.py::Runner._apply"
    [stored] = (corpus / "findings" / "renamable").glob("*.json")
    repro = Path(before["repro"])

    target.write_text(target.read_text().replace("_apply", "_apply_lora"))  # the bug is still there
    capsys.readouterr()

    script = subprocess.run([sys.executable, str(repro)], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            capture_output=True, text=True, timeout=300)
    assert script.returncode == 1 and "not reproduced" not in script.stdout, script.stdout + script.stderr
    assert main(["replay", "--target", spec_, str(stored)]) == 1
    out = capsys.readouterr().out
    assert "REPRODUCED" in out and "Runner._apply_lora" in out and "gone" not in out

    assert main(["fuzz", "--target", spec_, "--max-examples", "5", "--seed", "2", "-q", "--corpus", str(corpus),
                 "--report", str(tmp_path / "after.json"), "--previous", str(tmp_path / "before.json")]) == 1
    [run] = load_report(tmp_path / "after.json")["runs"]
    [after] = run["findings"]
    assert after["violation"]["site"] == "my_runner.py::Runner._apply_lora"
    assert after["aliases"] == [before["id"]] and after["trend"] == "still-open" and run["fixed"] == []
    assert after["minimized"] == before["minimized"]
    [refiled] = (corpus / "findings" / "renamable").glob("*.json")  # one file: the old one is gone
    assert json.loads(refiled.read_text())["id"] == after["id"] != before["id"]


# -- 9. a shrink that Hypothesis cut is not called minimized ------------------------------------------

def test_hypothesis_own_shrink_time_limit_does_not_end_a_shrink_that_is_then_called_minimized(tmp_path,
                                                                                                monkeypatch):
    """Hypothesis gives up shrinking after 5 minutes and reports what it has; a slow target's finding
    was called minimized at 2 ops / 8 tokens where 1 op / 3 tokens fails. Simulated: the 5 minutes
    are already over when the shrink starts."""
    from hypothesis.internal.conjecture import engine

    from fuzzrunner.engine import run_campaign
    from fuzzrunner.settings import Settings
    monkeypatch.setattr(engine, "MAX_SHRINKING_SECONDS", 0)
    r = run_campaign(spec("RAISES"), Settings(max_examples=30, seed=1, device="cpu"), corpus_dir=tmp_path)
    [f] = r.findings
    assert f.minimized and f.case.ops[0]["n"] == 500  # the smallest n that raises


def test_a_target_that_cannot_be_imported_in_its_workers_is_said_once_with_its_cause(tmp_path, capsys,
                                                                                     monkeypatch):
    """The target imports in the campaign and its shards, and fails in every worker and zygote (as a
    GPU-only import does on CPU workers). Each shard fails the same way: one error, counted, and the
    floor's error points at it rather than at the target's strategy or the budget."""
    for var in ("FUZZRUNNER_HUB_SOCKET", "FUZZRUNNER_ZYGOTE_SOCKET"):
        monkeypatch.delenv(var, raising=False)
    target = tmp_path / "worker_shy.py"
    target.write_text(f"import os, sys\nsys.path.insert(0, {str(Path(TARGETS).parent)!r})\n"
                      "if os.environ.get('FUZZRUNNER_HUB_SOCKET') or os.environ.get('FUZZRUNNER_ZYGOTE_SOCKET'):\n"
                      "    raise RuntimeError('this target cannot be imported in a worker')\n"
                      "from hostile_targets import SLEEPY as TARGET\n")
    code = main(["fuzz", "--target", f"{target}:TARGET", "--max-examples", "4", "--seed", "1", "-q", "--workers",
                 "2", "--device", "cpu", "--corpus", str(tmp_path / "corpus"), "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr()
    run = report(tmp_path)
    assert code != 0, out
    [failed, floor] = run["errors"]
    assert failed.startswith("2 shards failed: ") and "cannot be imported in a worker" in failed, run["errors"]
    assert "tested (almost) nothing. See the error(s) above." in floor, run["errors"]
