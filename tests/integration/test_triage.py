"""Cross-device triage (issue 14): a GPU finding replayed on the CPU names the tensor, element,
op and line; findings whose CPU replays name one bug become one. Runs on the CPU: the GPU's
findings are written as the GPU reports them (a device-side crash, an initcheck report with no
source line), their cases the ones the GPU campaign found."""

from fuzzrunner.case import Case
from fuzzrunner.engine.triage import merge_by_triage, triage_on_cpu
from fuzzrunner.finding import Finding, render
from fuzzrunner.settings import Settings
from fuzzrunner.violation import Violation

WARMUP = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
              ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},), ("dummy_run_skips_mapping",))
CLEAN = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
             ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))


def _gpu_crash(case):
    v = Violation("worker", "crash", "dummy_run", "SIGABRT", "", "the worker died with SIGABRT in op 0 "
                  "(dummy_run): device-side assert triggered", {"op_index": 0})
    return Finding.of(v, [], case, target_spec="reference_runner")


def _gpu_initcheck(case):
    v = Violation("initcheck", "uninitialized-read", "vectorized_elementwise_kernel", "", "",
                  "Uninitialized __global__ memory read of size 8 bytes", {"op_index": 0})
    return Finding.of(v, [], case, target_spec="reference_runner")


def test_a_gpu_crash_is_named_exactly_by_its_cpu_replay_and_one_bug_is_one_finding():
    crash, report = _gpu_crash(WARMUP), _gpu_initcheck(WARMUP)
    triage_on_cpu([crash, report], "reference_runner", Settings(case_timeout_s=120.0))
    for f in (crash, report):
        t = f.triage
        assert t["status"] == "reproduced" and t["device"] == "cpu"
        assert t["signature"]["kind"] in ("uninitialized-read", "stale-read")
        assert t["signature"]["tensor"] and ".py:" in t["signature"]["location"]
        assert "CPU triage: reproduced on the CPU as " in render(f) and t["signature"]["tensor"] in render(f)
    kept, absorbed = merge_by_triage([crash, report])
    assert kept == [crash] and absorbed == [report]
    assert report.violation in crash.others  # every site kept
    assert Finding.from_dict(crash.to_dict()).triage == crash.triage


def test_a_case_the_cpu_does_not_reproduce_says_so_and_stays_its_own_finding():
    gpu_only = _gpu_crash(CLEAN)
    triage_on_cpu([gpu_only], "reference_runner", Settings(case_timeout_s=120.0))
    assert gpu_only.triage == {"device": "cpu", "status": "not-reproduced"}
    assert "CPU triage: not reproduced on the CPU" in render(gpu_only)
    assert merge_by_triage([gpu_only]) == ([gpu_only], [])


def test_a_target_that_cannot_run_on_the_cpu_gets_the_reason_not_a_lost_finding(tmp_path):
    f = _gpu_crash(Case("nowhere", {}, ({"op": "x"},)))
    f.target_spec = str(tmp_path / "missing.py") + ":TARGET"
    triage_on_cpu([f], f.target_spec, Settings(case_timeout_s=30.0))
    assert f.triage["status"] == "could-not-run" and "does not exist" in f.triage["reason"]


def test_a_runner_that_builds_on_cuda_itself_could_not_run_on_the_cpu_and_says_how_to_fix_it():
    """Its constructor's device error is no triage of the finding (it was shown as one: 'CPU triage:
    crash in RuntimeError at user_runner.py:32: No CUDA GPUs are available')."""
    import os
    spec = os.path.join(os.path.dirname(__file__), "gpu_only_target.py") + ":TARGET"
    case = Case("gpu_only", {}, ({"op": "dummy_run", "num_tokens": 3},), ("dummy_skips_slots",))
    f = _gpu_crash(case)
    f.target_spec = spec
    triage_on_cpu([f], spec, Settings(case_timeout_s=60.0))
    assert f.triage["status"] == "could-not-run"
    assert "device error" in f.triage["reason"] and "ctx.device" in f.triage["reason"]
    assert "CPU triage: could not run on the CPU: a device error" in render(f)
    assert merge_by_triage([f]) == ([f], [])
