"""The campaign's one deadline (engine/deadline.py) reaches every phase: the CLI's start, the plan, the search,
the GPU pre-check, shard processes, the CPU triage. Mechanism only, no timed assertions: the budget against wall
time is benchmarks/budget_overrun.py's."""

import math
import time

import pytest

from fuzzrunner import cli
from fuzzrunner.case import Case
from fuzzrunner.context import Context
from fuzzrunner.engine import campaign as campaign_module
from fuzzrunner.engine import events, hub, sharding
from fuzzrunner.engine import triage as triage_module
from fuzzrunner.engine.campaign import plan_campaign
from fuzzrunner.engine.deadline import TAIL_MAX_S, TAIL_MIN_S, Deadline, monotonic
from fuzzrunner.engine.hub import RunResult, WorkerSpec
from fuzzrunner.engine.hypothesis_bridge import BudgetSpent
from fuzzrunner.engine.plan import CampaignPlan
from fuzzrunner.engine.result import StopReason
from fuzzrunner.engine.search import Shard
from fuzzrunner.settings import Settings
from fuzzrunner.target import load_target

CASE = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
            ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))


def test_the_search_leaves_the_deadline_room_for_what_follows_it_and_more_once_there_is_a_triage():
    d = Deadline.of(100.0, started=1000.0)
    assert d.end == 1100.0 and Deadline.of(None) is None
    assert d.search_end(triage=False) == 1100.0 - d.tail_s < d.end
    assert d.search_end(triage=True) == d.search_end(triage=False) - d.triage_s
    assert d.search_end(triage=True) < d.triage_end == d.end - d.tail_s  # the triage ends before the reports
    assert Deadline.of(2.0).tail_s == TAIL_MIN_S and Deadline.of(10 ** 6).tail_s == TAIL_MAX_S
    assert Deadline.of(10 ** 6).triage_s < 0.01 * 10 ** 6  # a nightly keeps its hours for the search
    assert monotonic(None) == math.inf


def test_the_plan_carries_the_budget_counted_from_when_the_caller_started():
    plan = plan_campaign("reference_runner", Settings(budget_s=30.0, seed=1, device="cpu"), started=500.0)
    assert plan.deadline == Deadline(530.0, 30.0)
    assert plan_campaign("reference_runner", Settings(seed=1, device="cpu")).deadline is None
    assert plan.portable().deadline == plan.deadline  # it travels to shard processes and Ray actors


def test_the_cli_starts_the_budgets_clock_before_it_loads_anything(monkeypatch, tmp_path):
    seen = {}
    from fuzzrunner import api, target

    def fake_fuzz(spec, **kw):
        seen["started"] = kw["started"]
        raise KeyboardInterrupt  # enough: the campaign is not the point
    real_load = target.load_target

    def timed_load(spec):
        seen.setdefault("loaded", time.time())
        return real_load(spec)
    monkeypatch.setattr(api, "fuzz", fake_fuzz)
    monkeypatch.setattr(target, "load_target", timed_load)
    before = time.time()
    cli.main(["fuzz", "--target", "reference_runner", "--budget", "30", "--device", "cpu", "--corpus",
              str(tmp_path / "c")])
    assert before <= seen["started"] <= seen["loaded"]


def _shard(device: str, deadline: Deadline, seen=None) -> Shard:
    settings = Settings(budget_s=deadline.budget_s, seed=1, case_timeout_s=30)
    worker = WorkerSpec("reference_runner", Context.of(device))  # no process starts before a case runs
    plan = CampaignPlan("reference_runner", "reference_runner", settings, (), 1, worker.context, deadline=deadline)
    return Shard(plan, 0, load_target("reference_runner"), worker=worker, findings_seen=seen)


class _Flag:
    def __init__(self):
        self.on = False

    def is_set(self):
        return self.on


def test_a_shard_takes_the_campaigns_plan_whole():
    """``run_shard`` (one shard here, a shard process, a Ray actor) hands ``Shard`` the plan itself: its spec,
    settings, faults, seed, deadline and this shard's worker are the plan's, not pieces passed one by one."""
    d = Deadline.of(120.0, started=time.time() - 30.0)
    plan = CampaignPlan("reference_runner", "reference_runner", Settings(budget_s=120.0, seed=9, max_worker_rss_mb=900),
                        ("dummy_run_skips_mapping",), 4242, Context.of("cpu"), code={"vllm": "x"}, deadline=d)
    shard = Shard(plan, 1, load_target("reference_runner"))
    try:
        assert (shard.target_spec, shard.settings, shard.faults, shard.seed) == \
            (plan.target_spec, plan.settings, plan.faults, plan.seed)
        assert shard.hub.spec == plan.worker(1) and shard.hub.spec.code == {"vllm": "x"}
        assert shard.stop_at() == pytest.approx(monotonic(d.search_end(triage=False)), abs=0.05)
        assert (shard.result.seed, shard.result.faults) == (4242, plan.faults)
    finally:
        shard.close()


def test_a_shard_stops_by_the_campaigns_deadline_not_by_its_own_clock():
    # a campaign whose start-up spent its whole budget: the shard, just made, is already out of time
    late = Deadline.of(60.0, started=time.time() - 60.0)
    shard = _shard("cpu", late)
    try:
        assert shard.elapsed() < 60.0 and shard.over_budget()
        shard.search(10)
        assert shard.result.examples == 0 and shard.result.stop_reason is StopReason.BUDGET
    finally:
        shard.close()


def test_a_gpu_shard_stops_earlier_once_any_shard_has_a_finding_to_triage():
    d = Deadline.of(600.0)
    seen = _Flag()
    gpu, cpu = _shard("cuda", d, seen), _shard("cpu", d, seen)
    try:
        before = gpu.stop_at()
        assert before == pytest.approx(monotonic(d.search_end(triage=False)), abs=0.05)
        seen.on = True  # another shard found something (sharding's event)
        assert gpu.stop_at() == pytest.approx(before - d.triage_s, abs=0.05)
        assert cpu.stop_at() == pytest.approx(before, abs=0.05)  # a CPU campaign triages nothing
    finally:
        gpu.close()
        cpu.close()


def test_the_gpu_precheck_runs_until_the_search_stops_and_a_cut_one_spends_the_budget():
    shard = _shard("cuda", Deadline.of(600.0))
    calls = []

    class Precheck:
        def run(self, case, cut_at=math.inf):
            calls.append(cut_at)
            return RunResult([], 0.1, True, 1, budget_cut=True)

        def close(self):
            pass
    shard._precheck = Precheck()
    try:
        with pytest.raises(BudgetSpent):
            shard._cpu_run(CASE)
        assert calls == [shard.stop_at()] and shard.result.stop_reason is StopReason.BUDGET
    finally:
        shard.close()


def test_shards_learn_of_a_finding_through_the_campaigns_event():
    got, flag = [], _Flag()
    flag.set = lambda: setattr(flag, "on", True)
    relay = sharding._noting_findings(got.append, flag)
    relay(events.ProgressEvent(1, 1, 0, 0.1, 0))
    assert not flag.on
    relay(events.FindingEvent(None, 0))  # type: ignore[arg-type]
    assert flag.on and len(got) == 2


def test_the_triage_worker_starts_at_the_first_finding_only(monkeypatch):
    class Triage:
        starts = 0

        def start(self):
            self.starts += 1
    t, got = Triage(), []
    relay = campaign_module._starting_triage(got.append, t)
    relay(events.WarningEvent("x"))
    assert t.starts == 0
    relay(events.FindingEvent(None, 0))  # type: ignore[arg-type]
    relay(events.FindingEvent(None, 1))  # type: ignore[arg-type]
    assert t.starts == 2 and len(got) == 3  # CpuTriage.start itself starts once
    assert campaign_module._starting_triage(None, None) is None


def test_the_triage_prestarts_the_very_zygote_its_replays_take(monkeypatch):
    started = []
    monkeypatch.setattr(triage_module, "prestart_zygote", started.append)
    t = triage_module.CpuTriage("reference_runner", Settings(device="cuda", sanitizer="initcheck"))
    t.start()
    t.start()
    from fuzzrunner.engine.replay import Replayer
    replay_spec = Replayer(t.settings).hub("reference_runner").spec
    assert started == [replay_spec]  # one zygote, for the spec the replay's hub asks for (hub._take_prestarted)
    hub.drop_prestarted()


def test_a_triage_past_its_end_starts_no_worker_and_says_the_budget_ran_out(monkeypatch):
    from fuzzrunner.finding import Finding
    from fuzzrunner.violation import Violation
    v = Violation("worker", "crash", "dummy_run", "SIGABRT", "", "died", {"op_index": 0})
    findings = [Finding.of(v, [], CASE, target_spec="reference_runner") for _ in range(2)]
    monkeypatch.setattr(hub.Hub, "run", lambda *a, **k: pytest.fail("no worker should run a case"))
    unreached = triage_module.triage_on_cpu(findings, "reference_runner", Settings(), end=time.time() - 1)
    assert unreached == 2
    assert all(f.triage == {"device": "cpu", "status": "could-not-run", "reason": triage_module.OUT_OF_TIME}
               for f in findings)


def test_a_budget_that_ended_before_any_case_says_the_start_up_counts_in_it():
    from fuzzrunner.engine.result import CampaignResult
    settings = Settings(budget_s=5.0)
    r = CampaignResult("reference_runner", settings, 1, (), stop_reason=StopReason.BUDGET)
    campaign_module._check_floor(r, settings)
    [error] = r.errors
    assert "only 0 valid case(s) ran" in error and "The 5 s budget ended first: it counts the start-up too" in error
