"""The command line, as a user meets it: exit codes, reports, repro scripts, one-line errors."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fuzzrunner.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {  # fault -> (allowed kinds, tensor fragment)
    "dummy_run_skips_mapping": ({"uninitialized-read", "stale-read"}, ""),
    "padding_not_mapped": ({"uninitialized-read", "stale-read"}, ""),
    "stale_after_all_no_lora": ({"uninitialized-read", "stale-read"}, "token_lora_mapping"),
    "graph_freezes_active_loras": ({"invariant-violation", "numeric-mismatch"}, ""),
}
REPRO_SCRIPT = {"dummy_run_skips_mapping", "graph_freezes_active_loras"}  # exported and run; the rest replayed
# Each fault is first hit by a seed case (example 1-4); "minimized" needs a generated case that fails too, and
# its shrink is most of the test's time. Seed and count pick a search whose failing case shrinks in few steps:
# padding_not_mapped, seed 2: ~35 shrink steps (seed 1: ~130). graph_freezes_active_loras, seed 1 with 20
# cases: ~150 steps to 3 ops (seed 4 with 60: ~195 to 4 ops; seed 1 with 60 reaches no capture-then-replay).
SEEDS = {"padding_not_mapped": "2"}
# From generated case 37 on (seed 1), the stateful strategy also shows stale_after_all_no_lora as numeric
# mismatches (bgmv ignoring the no-LoRA flag in later steps): more findings, each shrunk, past the ci budget.
EXAMPLES = {"stale_after_all_no_lora": "30", "dummy_run_skips_mapping": "10", "padding_not_mapped": "20",
            "graph_freezes_active_loras": "20"}
MAPPING_BUFFERS = ("embeddings_indices", "token_lora_mapping", "active_lora_ids", "token_indices_sorted_by_lora_ids",
                   "num_tokens_per_lora", "lora_token_start_loc")


def fuzz(tmp_path, *extra, examples="60", seed="1"):
    return main(["fuzz", "--target", "reference_runner", "--max-examples", examples, "--seed", seed,
                 "--profile", "ci", "--corpus", str(tmp_path / "corpus"), "--report", str(tmp_path / "r.json"),
                 *extra])


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_each_fault_is_found_exported_and_reproduced(tmp_path, fault, capsys):
    assert fuzz(tmp_path, "--fault", fault, seed=SEEDS.get(fault, "1"), examples=EXAMPLES.get(fault, "60")) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    findings = report["runs"][0]["findings"]
    kinds, tensor = EXPECTED[fault]
    [finding] = [f for f in findings if f["signature"]["kind"] in kinds and tensor in f["signature"]["tensor"]]
    # Anything else is wrong values a later op computed from the planted bad read (a capture's dummy run
    # reading the stale mapping, then a step's logits): findings are grouped per op, and a finding's
    # values depend on what the unwritten memory held (seen on 2026-12-03 in about 1 run in 4).
    assert all(f["signature"]["kind"] in ("numeric-mismatch", "poison-divergence") for f in findings
               if f is not finding), [f["signature"] for f in findings]
    sig = finding["signature"]
    assert sig["kind"] in kinds and tensor in sig["tensor"]
    if sig["kind"] not in ("numeric-mismatch", "invariant-violation"):
        assert sig["tensor"].split(".")[-1] in MAPPING_BUFFERS
    assert finding["case"]["faults"] == [fault] and finding["minimized"]
    finding_file = next((tmp_path / "corpus" / "expected" / "reference_runner").glob(f"*{finding['id']}*.json"))
    if fault not in REPRO_SCRIPT:  # the other half replays in a worker (each costs a fresh torch import)
        assert main(["replay", str(finding_file)]) == 1
        assert "REPRODUCED" in capsys.readouterr().out
        return
    repro = tmp_path / "repro.py"
    assert main(["export", str(finding_file), "-o", str(repro)]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run([sys.executable, str(repro)], cwd=elsewhere, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert sig["kind"] in run.stdout
    if sig["kind"] == "numeric-mismatch":  # expected and actual values around the worst element
        window = finding["violation"]["details"]["window"]
        assert "around the worst element" in run.stdout and f"{window['actual'][0]:.6g}" in run.stdout


def test_no_fault_no_finding(tmp_path):
    # 30 cases and the seeds; more: test_the_300_example_runs_of_the_issue (-m slow); every oracle: test_silence.py
    assert fuzz(tmp_path, examples="30") == 0
    assert json.loads((tmp_path / "r.json").read_text())["runs"][0]["findings"] == []


@pytest.mark.slow
@pytest.mark.parametrize("fault", [None] + sorted(EXPECTED))
def test_the_300_example_runs_of_the_issue(tmp_path, fault):
    assert fuzz(tmp_path, *(["--fault", fault] if fault else []), examples="300") == (1 if fault else 0)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("fuzzrunner: error: ") and "Traceback" not in err[0]
    return err[0]


def test_bad_inputs_exit_2_with_one_line(tmp_path, capsys):
    assert main(["fuzz", "--target", "refrence_runner"]) == 2
    assert "Did you mean 'reference_runner'" in _one_error_line(capsys)
    assert main(["fuzz", "--target", "reference_runner", "--fault", "dummy_run"]) == 2
    assert "Did you mean 'dummy_run_skips_mapping'" in _one_error_line(capsys)
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema": 1, "target": ')
    assert main(["replay", str(corrupt)]) == 2
    assert "corrupt.json: not valid JSON" in _one_error_line(capsys)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"schema": 1, "target": "reference_runner", "faults": ["dummy_run_skips_mapping"],
                                "config": {"max_loras": 1, "capture_sizes": [1]},
                                "ops": [{"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}]}))
    assert main(["replay", str(good), str(corrupt)]) == 2  # a broken file is never hidden by a reproduced one
    assert "corrupt.json: not valid JSON" in _one_error_line(capsys)
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"schema": 99, "target": "reference_runner", "config": {}, "ops": []}))
    assert main(["replay", str(newer)]) == 2
    assert "schema 99 is newer" in _one_error_line(capsys)
    theirs = tmp_path / "theirs.json"  # a case of the user's own target: no built-in name to guess at
    theirs.write_text(json.dumps({"schema": 1, "target": "my_lora_runner", "config": {}, "ops": []}))
    assert main(["replay", str(theirs)]) == 2
    line = _one_error_line(capsys)
    assert "target 'my_lora_runner', which is not built in" in line and "--target path/to/file.py:OBJ" in line
    assert "Did you mean" not in line
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["fuzz", "--target", "reference_runner", "--max-examples", "1", "--report", str(blocker / "dir" / "r.json")]) == 2
    assert "cannot write" in _one_error_line(capsys)
    with pytest.MonkeyPatch.context() as no_gpu:
        no_gpu.setenv("CUDA_VISIBLE_DEVICES", "")  # a machine without a GPU (the GPU image has one, and the tool)
        assert main(["fuzz", "--target", "reference_runner", "--max-examples", "1", "--sanitizer", "initcheck"]) == 2
    assert "needs a CUDA GPU" in _one_error_line(capsys)
    assert main(["fuzz", "--target", "reference_runner", "--max-examples", "0"]) == 2
    assert "must be at least one" in _one_error_line(capsys)
    assert main(["fuzz", "--target", "nowhere/missing.py:TARGET"]) == 2
    assert "does not exist" in _one_error_line(capsys)
    assert main(["export", str(corrupt)]) == 2
    _one_error_line(capsys)
    assert main(["export", str(corrupt), str(corrupt)]) == 2  # a glob that matched two findings, -o one script
    assert "2 finding files were given and -o 'repro.py' names one script" in _one_error_line(capsys)


def test_listing_commands(capsys):
    assert main(["targets"]) == 0 and "lora_kernels" in capsys.readouterr().out
    assert main(["faults"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("planted faults of target reference_runner") and "graph_freezes_active_loras" in out
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "triton mode" in out and "interpreter  Triton " in out and "runs every probed feature" in out


def test_console_entry_point_runs_from_a_checkout():
    out = subprocess.run([sys.executable, "-m", "fuzzrunner", "faults"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd="/", timeout=300)
    assert out.returncode == 0 and "padding_not_mapped" in out.stdout


def test_a_users_own_targets_package_does_not_collide_with_the_built_in_targets(tmp_path):
    """Issue 11: the built-ins are ``fuzzrunner.targets``; a user's ``targets`` package is theirs."""
    pkg = tmp_path / "targets"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mine.py").write_text(
        "from hypothesis import strategies as st\n"
        "from fuzzrunner import Case, Target\n\n"
        "def cases(faults=(), *, max_ops=5):\n"
        "    return st.integers(1, 3).map(lambda n: Case('mine', {}, tuple({'op': 'noop'} for _ in range(n))))\n\n"
        "def run(case, ctx):\n"
        "    for i, op in enumerate(case.ops):\n"
        "        with ctx.op(i, op):\n"
        "            pass\n\n"
        "TARGET = Target('mine', 'a user target in a package named targets', cases, run)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]))
    for spec in ("targets.mine:TARGET", "reference_runner"):
        run = subprocess.run([sys.executable, "-m", "fuzzrunner", "fuzz", "--target", spec, "--max-examples", "3",
                              "--corpus", str(tmp_path / "c")],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, (spec, run.stdout + run.stderr)
        assert "0 findings" in run.stdout, run.stdout


@pytest.mark.parametrize("command", ["fuzz", "nightly", "replay", "export", "faults"])
def test_every_option_has_help_and_says_its_default_once(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    options = re.split(r"\n  (?=-)", out.split("options:", 1)[1].split("\n\n")[0])[1:]
    assert options
    for text in options:
        flat = " ".join(text.split())
        assert len(flat.split()) > 2, f"no help: {flat}"
        assert flat.count("default") <= 1 and "(default: None)" not in flat, flat


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and re.fullmatch(r"fuzzrunner \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


@pytest.mark.parametrize("found_by", ["cpu", "device"])
def test_a_shadow_finding_not_reproduced_in_the_other_shadow_mode_proves_nothing(tmp_path, capsys, monkeypatch,
                                                                                 found_by):
    """Each shadow mode sees accesses the other cannot (the device mode: no numpy views). A finding of one mode
    replayed in the other and not reproduced once printed NOT REPRODUCED, exit 0: the 'fixed' signal for a bug
    still there (a new user's try). Now: exit 2, the mode that found it named. Both replays here run the CPU
    mode (FUZZRUNNER_SHADOW=cpu), over a case without the bug."""
    from fuzzrunner.case import Case
    from fuzzrunner.corpus import Corpus
    from fuzzrunner.finding import Finding
    from fuzzrunner.violation import Violation
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "cpu")
    case = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
                ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))
    details = {"op_index": 0, "element": [0], **({"shadow_mode": "device"} if found_by == "device" else {})}
    v = Violation("shadow", "uninitialized-read", "_lora_shrink_kernel", "fuzzrunner/runner/punica.py:103",
                  "token_lora_mapping", "token_lora_mapping[0] (byte 0): never written", details)
    path = Corpus(tmp_path / "corpus").save_finding("reference_runner", Finding.of(v, [], case))
    code = main(["replay", str(path)])
    captured = capsys.readouterr()
    if found_by == "cpu":
        assert code == 0 and "NOT REPRODUCED" in captured.out
    else:
        assert code == 2 and "NOT REPRODUCED" not in captured.out
        assert captured.err.count("\n") == 1 and "found by the shadow oracle's device mode and this replay ran its " \
            "cpu mode" in captured.err and "FUZZRUNNER_SHADOW=device" in captured.err
