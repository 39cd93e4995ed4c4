"""What a shard does with what an earlier case's threads did (issue 47): the deaths and exceptions a
worker reports about earlier cases, driven through ``Shard`` with a scripted hub (no process)."""

from dataclasses import replace

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.engine.hub import DeathBetween, Earlier, RunResult, WorkerSpec
from fuzzrunner.engine.plan import CampaignPlan
from fuzzrunner.engine.search import Shard
from fuzzrunner.settings import Settings
from fuzzrunner.target import Target
from fuzzrunner.violation import Violation

TARGET = Target("t", "", lambda faults=(), *, max_ops=5: st.just(Case("t", {}, ({"op": "x"},))), lambda case, ctx: None)


def case(n: int) -> Case:
    return Case("t", {}, ({"op": "x", "n": n},))


def death(how: str = "exit status 7") -> Violation:
    return Violation("worker", "crash", "x", how, "", f"the worker died with {how}", {"op_index": 0, "exit": how})


class ScriptedHub:
    """``run`` answers from ``script``: case n -> a RunResult (a clean one if absent); calls are kept."""

    def __init__(self, script: dict):
        self.script, self.calls = script, []
        self.rerun_error, self.restarts, self.spec = None, 0, WorkerSpec("t")
        self.case, self.preceding = None, ((), 0)  # as Hub: the case in progress, what its worker ran before it

    def run(self, case: Case, cut_at: float = 0, *, linger_s: float = 0.0, fresh: bool = False) -> RunResult:
        self.calls.append((case.ops[0]["n"], linger_s, fresh))
        self.case = case
        answer = self.script.get(case.ops[0]["n"])
        answers = answer if isinstance(answer, list) else [answer]
        result = answers.pop(0) if len(answers) > 1 else answers[0]
        return replace(result, violations=list(result.violations)) if result else RunResult([], 0.01)

    def close(self) -> None:
        pass


def shard(script: dict) -> tuple[Shard, list]:
    events: list = []
    plan = CampaignPlan("t.py:T", TARGET.name, Settings(max_examples=5, seed=0), (), 0, WorkerSpec("t").context)
    s = Shard(plan, 0, TARGET, events.append, worker=WorkerSpec("t"))
    s.hub = ScriptedHub(script)  # type: ignore[assignment]
    return s, events


def test_a_death_whose_rerun_survives_is_the_earlier_cases_whose_rerun_waiting_for_its_threads_dies():
    suspect = Earlier(case(1), 1, ["loader"])
    s, events = shard({2: [RunResult([death()], 0.1, crashed=True, suspects=[suspect]), RunResult([], 0.1)],
                       1: RunResult([death()], 0.1, crashed=True)})
    vs = s.execute(case(2))
    s.record(vs, case(2))
    [finding] = s.book.by_id.values()
    assert finding.case == case(1) and not s.result.flaky  # the earlier case's finding, confirmed by its rerun
    assert s.hub.calls == [(2, 0.0, False), (2, 0.0, False), (1, 2.0, True)]  # waited for, in a fresh worker
    assert s._linger_s == 2.0 and any("waits up to 2 s" in getattr(e, "message", "") for e in events)


def test_a_worker_found_dead_between_cases_is_a_suspects_finding_or_said_once_never_silent():
    between = DeathBetween("SIGKILL", [Earlier(case(1), 1, [])])
    s, events = shard({2: RunResult([], 0.1, died_before=between), 3: RunResult([], 0.1, died_before=between)})
    s.execute(case(2))
    s.execute(case(3))
    warnings = [w for w in s.result.warnings if "died between cases (SIGKILL)" in w]
    assert len(warnings) == 1 and "its last case, run again" in warnings[0] and not s.book.by_id
    s, _ = shard({2: RunResult([], 0.1, died_before=between), 1: RunResult([death("SIGKILL")], 0.1, crashed=True)})
    s.execute(case(2))
    [finding] = s.book.by_id.values()
    assert finding.case == case(1) and not s.result.warnings[1:]


def test_an_exception_a_thread_raised_after_its_case_returned_is_that_cases_finding():
    raised = Violation("python", "crash", "ValueError", "t.py:3", "", "after the case returned: on thread 'x', "
                       "started by the case: ValueError: no", {"op_index": None, "thread": "x"})
    s, _ = shard({2: RunResult([], 0.1, late=[Earlier(case(1), 1, ["x"], [raised])])})
    assert s.execute(case(2)) == []
    [finding] = s.book.by_id.values()
    assert finding.case == case(1) and finding.violation.kernel == "ValueError"


def test_a_death_nothing_explains_is_flaky_once_however_often_it_comes():
    s, events = shard({n: [RunResult([death()], 0.1, crashed=True), RunResult([], 0.1)] for n in range(4)})
    for n in range(4):
        s.record(s.execute(case(n)), case(n))
    assert len(s.result.flaky) == 1 and sum("flaky" in getattr(e, "message", "") for e in events) == 1
