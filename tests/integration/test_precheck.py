"""The GPU campaign's CPU pre-check (engine/search.py, engine/cpu_check.py) skips only what it proved.

No GPU here: the campaign's worker stands in for one (``GPU_ONLY_FAKE=1`` in its environment
only, and no shadow oracle, as on a GPU), while the pre-check worker runs the case on the CPU
under the shadow oracle, as beside a real GPU. The target (gpu_only_target.py) builds its
tensors on cuda itself, as most engines do, and has two independent planted bugs.
"""

import os

import pytest

from fuzzrunner.context import Context
from fuzzrunner.engine.cpu_check import classify, outside_reason
from fuzzrunner.engine.events import WarningEvent
from fuzzrunner.engine.hub import WorkerSpec
from fuzzrunner.engine.plan import CampaignPlan
from fuzzrunner.engine.search import Shard
from fuzzrunner.settings import Settings
from fuzzrunner.target import load_target
from fuzzrunner.violation import Violation

SPEC = os.path.join(os.path.dirname(__file__), "gpu_only_target.py") + ":TARGET"
FAULTS = ("dummy_skips_slots", "padding_overruns")


def _campaign(seed: int, examples: int = 40):
    settings = Settings(oracles=("numeric",), max_examples=examples, seed=seed, case_timeout_s=60)
    worker = WorkerSpec(SPEC, Context.of("cpu"), env={"GPU_ONLY_FAKE": "1"})  # the "GPU" worker
    events: list = []
    plan = CampaignPlan(SPEC, "gpu_only", settings, FAULTS, seed, worker.context)
    shard = Shard(plan, 0, load_target(SPEC), events.append, worker=worker)
    shard.precheck_on = True  # as on a GPU
    try:
        shard.search(examples)
    finally:
        result = shard.close()
    return result, events


def test_a_target_that_cannot_run_on_the_cpu_turns_the_precheck_off_and_both_bugs_are_found():
    result, events = _campaign(seed=1)
    kinds = {(f.violation.kind, f.violation.kernel) for f in result.findings}
    assert kinds == {("crash", "IndexError")} and len(result.findings) == 2, [f.signature.short() for f in
                                                                              result.findings]
    assert result.known_crash_skips == 0 and result.known_crash_causes == {}
    off = [w for w in result.warnings if w.startswith("CPU pre-check of cases is off")]
    assert len(off) == 1 and "device error" in off[0] and "ctx.device" in off[0]
    assert any(isinstance(e, WarningEvent) and "pre-check" in e.message for e in events)


def test_a_precheck_that_runs_skips_only_the_proven_root_causes_and_counts_each(monkeypatch):
    monkeypatch.setenv("GPU_ONLY_FAKE", "1")  # the CPU workers can build the runner too
    result, _ = _campaign(seed=1, examples=60)
    assert len(result.findings) == 2
    assert result.known_crash_skips > 0
    assert sum(c["count"] for c in result.known_crash_causes.values()) == result.known_crash_skips
    for c in result.known_crash_causes.values():  # each skip names the memory error the CPU proved
        assert c["short"].startswith("out-of-bounds") and "[shadow]" in c["short"]
    assert not [w for w in result.warnings if "pre-check" in w]


def _crash(message: str, op_index=0, kind="RuntimeError") -> Violation:
    return Violation("python", "crash", kind, "runner.py:3", "", f"op {op_index}: {kind}: {message}",
                     {"op_index": op_index})


@pytest.mark.parametrize("v, outside", [
    (_crash("No CUDA GPUs are available"), "device error"),
    (_crash("Torch not compiled with CUDA enabled", kind="AssertionError"), "device error"),
    (_crash("Expected all tensors to be on the same device, but found cuda:0 and cpu"), "device error"),
    (_crash("No module named 'flashinfer'", kind="ModuleNotFoundError"), "imports fail"),
    (_crash("index 9 is out of bounds", op_index=None, kind="IndexError"), "before its first op"),
    (_crash("index 9 is out of bounds", kind="IndexError"), None),
    (Violation("shadow", "uninitialized-read", "k", "a.py:1", "t", "read", {"op_index": 0}), None),
])
def test_what_a_cpu_run_failing_outside_the_case_looks_like(v, outside):
    why = outside_reason(v)
    assert (why is None) if outside is None else (outside in why)


def test_a_memory_error_is_proof_even_when_the_run_failed_later_for_an_outside_reason():
    read = Violation("shadow", "uninitialized-read", "k", "a.py:1", "t", "read", {"op_index": 0, "seq": 1})
    later = _crash("No CUDA GPUs are available", op_index=1)
    run = classify([read, later])
    assert run.outside is None and list(run.heads) == [read.signature.id]
    assert classify([later]).outside and not classify([later]).heads


def test_a_one_worker_gpu_campaign_prechecks_in_parallel_shards_and_nothing_else_changes():
    from fuzzrunner.engine.campaign import _with_precheck_shards

    def shards(settings, device="cuda", database=None) -> Settings:
        plan = CampaignPlan("reference_runner", "reference_runner", settings, (), 0, Context.of(device), None, database)
        return _with_precheck_shards(plan).settings
    auto = shards(Settings()).workers
    assert auto == max(1, min(8, (os.cpu_count() or 1) // 4))
    assert shards(Settings(precheck_workers=3)).workers == 3
    assert shards(Settings(precheck_workers=3, max_examples=2)).workers == 2
    for unchanged in (shards(Settings(precheck_workers=3), "cpu"),      # no pre-check on the CPU
                      shards(Settings(precheck_workers=3, cpu_triage=False)),
                      shards(Settings(precheck_workers=3, workers=2)),
                      shards(Settings(precheck_workers=3), database=object())):  # a database object
        assert unchanged.workers in (1, 2) and unchanged.precheck_workers == 3
    with pytest.raises(Exception, match="precheck_workers=0 must be"):
        Settings(precheck_workers=0)


def test_a_bug_another_shard_already_wrote_is_neither_confirmed_nor_shrunk_again(tmp_path):
    """Shards of one campaign share its corpus: the first to find a bug shrinks it; the others take it
    as found (on a GPU each of four shards shrinking the same crashing bug cost 127 worker restarts)."""
    from fuzzrunner.corpus import Corpus
    spec = os.path.join(os.path.dirname(__file__), "trust_targets.py") + ":BUGGY"
    target = load_target(spec)
    runs = []
    for index in range(2):  # the first still shrinking (here: not shrinking) when the second meets the bug
        settings = Settings(max_examples=30, seed=5, workers=2, shrink=index == 1)
        plan = CampaignPlan(spec, target.name, settings, ("boom",), 5, Context.of("cpu"))
        shard = Shard(plan, index, target, corpus=Corpus(tmp_path, faults=("boom",)))
        shard.shrink_once = True  # as on a GPU
        try:
            shard.search(30)
        finally:
            runs.append(shard.close())
    first, second = runs
    assert len(first.findings) == len(second.findings) == 1
    assert not second.findings[0].minimized
    assert second.examples <= 30  # generation only: no shrink steps


def test_shards_saying_one_warning_say_it_once():
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.engine.sharding import Merger
    heard: list = []
    merger = Merger(3, heard.append, CampaignResult("t", Settings(), 0, ()))
    for shard in range(3):
        merger.event(WarningEvent("CPU pre-check of cases is off", shard))
    merger.event(WarningEvent("another", 0))
    assert [e.message for e in heard] == ["CPU pre-check of cases is off", "another"]


def test_a_cpu_campaign_of_a_target_that_asks_for_cuda_is_the_targets_error_not_a_finding(tmp_path, capsys):
    """New-user trial: a runner with device="cuda" hard-coded, fuzzed on a machine without a GPU, was
    a crash finding ("Torch not compiled with CUDA enabled") put in the regression set."""
    from fuzzrunner.cli import main
    code = main(["fuzz", "--target", SPEC, "--max-examples", "5", "--seed", "1", "--corpus", str(tmp_path / "c"),
                 "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot run on the CPU: it asks for a GPU" in err and "ctx.device" in err
    assert not list((tmp_path / "c").rglob("findings/**/*.json"))


def test_shards_skip_counts_merge_per_root_cause():
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.engine.sharding import Merger
    merged = CampaignResult("t", Settings(), 0, ())
    merger = Merger(2, None, merged)
    for n in (2, 3):
        r = CampaignResult("t", Settings(), 0, ())
        r.count_known_crash_skip("abc", "uninitialized-read of slots [shadow]", n)
        merger.done(r)
    assert merged.known_crash_skips == 5 and merged.known_crash_causes == {
        "abc": {"short": "uninitialized-read of slots [shadow]", "count": 5}}
