"""Per-stage times (engine/stages.py): exclusive, so a campaign's stages never count a second twice."""

import pytest

from fuzzrunner.engine.stages import WORKER, CompileTimer, StageClock, merged, ordered, rows, table


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_stage_inside_another_is_taken_out_of_it():
    t = _Clock()
    c = StageClock(t)
    with c.stage("generate"):
        t.now += 1.0
        with c.stage("findings"):
            t.now += 2.0
            with c.stage("pre-check"):
                t.now += 4.0
        t.now += 0.5
    assert c.stage_s == {"generate": 1.5, "findings": 2.0, "pre-check": 4.0}
    assert sum(c.stage_s.values()) == t.now  # every second once


def test_a_stage_left_by_an_exception_is_still_counted_and_closed():
    t = _Clock()
    c = StageClock(t)
    with pytest.raises(KeyError), c.stage("generate"):
        t.now += 1.0
        with c.stage("findings"):
            t.now += 1.0
            raise KeyError("x")
    with c.stage("shutdown"):
        t.now += 1.0
    assert c.stage_s == {"generate": 1.0, "findings": 1.0, "shutdown": 1.0}


def test_a_case_is_split_by_the_workers_own_breakdown():
    t = _Clock()
    c = StageClock(t)
    with c.stage("generate"):
        t.now += 10.0  # of which the case below: 9 s in the hub's call
        c.case(9.0, 6.0, {WORKER: 5.0, "oracle:shadow": 1.5, "second-run": 2.0, "compile": 0.5})
    assert c.stage_s == pytest.approx({"generate": 1.0, "start-up": 3.0, "dispatch": 1.0, "oracle:shadow": 1.5,
                                       "second-run": 2.0, "compile": 0.5, "run": 1.0})


def test_a_case_the_worker_said_nothing_of_is_all_run():
    c = StageClock(_Clock())
    c.case(4.0, 3.0, {})  # a crash, a budget cut: no breakdown came back
    assert c.stage_s == {"start-up": 1.0, "run": 3.0}


def test_shards_are_summed_and_the_table_orders_oracles_after_the_run():
    s = merged({"run": 1.0, "oracle:b": 1.0}, {"run": 2.0, "oracle:a": 0.5, "triage": 1.0, "mine": 0.1})
    assert s == {"run": 3.0, "oracle:b": 1.0, "oracle:a": 0.5, "triage": 1.0, "mine": 0.1}
    assert ordered(s) == ["run", "oracle:a", "oracle:b", "triage", "mine"]
    text = table(s, duration_s=4.0, cases=9, shards=2, extra={"report": 0.5})
    lines = text.splitlines()
    assert [ln.split()[0] for ln in lines[1:-2]] == ["run", "oracle:a", "oracle:b", "triage", "mine", "report",
                                                     "other"]
    # other: 2 x 4 s less 4.6 s in shard stages; the % are of every row's sum (9.5 s), so they add up to 100
    assert lines[1].split() == ["run", "3.000", "31.6%"] and lines[-3].split() == ["other", "3.400", "35.8%"]
    assert lines[-2].startswith("total                      9.500   100.0%  (2 shards' stages summed")
    # the wall: the shards' 4 s and the campaign process's triage and report, said as the summary's time splits it
    assert lines[-1] == ("wall 5.50 s from the command's start: set-up 0.00 s + campaign 4.00 s (the summary's time) "
                         "+ after it 1.50 s; 2 shard(s), 9 cases, 1.64 cases/s")


@pytest.mark.parametrize("shards", [1, 2, 4])
def test_the_percentages_add_up_to_100_whatever_the_shards(shards):
    """A new user's trial: with 2 shards the '% wall' column summed to ~190% (shard stages summed over the shards,
    divided by the wall) with nothing saying what it was of."""
    s = {"set-up": 10.9, "shard-start": 44.5, "generate": 6.3, "run": 28.8, "oracle:numeric": 0.2, "shutdown": 0.5}
    lines = table(s, duration_s=41.6, cases=20, shards=shards, extra={"report": 0.05}).splitlines()
    pct = [float(ln.split()[-1].rstrip("%")) for ln in lines[1:-2]]
    assert sum(pct) == pytest.approx(100.0, abs=0.3)
    assert lines[0].split() == ["stage", "s", "%"] and lines[-2].split()[:3] == ["total", lines[-2].split()[1],
                                                                                 "100.0%"]


def test_rows_take_a_reports_other_and_report_as_they_are():
    got, wall = rows({"set-up": 1.0, "run": 3.0, "other": 99.0, "report": 0.5}, 4.0, 1)
    assert got == {"set-up": 1.0, "run": 3.0, "report": 0.5, "other": 1.0} and wall == 5.5


def test_the_compile_timer_sums_triton_s_listener_calls_and_chains():
    heard = []

    class Times:
        ir_initialization, total_lowering, store_results = 1000, 250_000, 4000

    timer = CompileTimer()
    timer._before = lambda **kw: heard.append(kw["cache_hit"])
    timer(src=None, metadata={}, metadata_group={}, times=Times(), cache_hit=False)
    timer(src=None, metadata={}, metadata_group={}, times=Times(), cache_hit=True)
    assert (timer.misses, timer.hits, heard) == (1, 1, [False, True])
    assert timer.take() == pytest.approx(0.51) and timer.take() == 0.0


def _napping_target():
    import time

    from hypothesis import strategies as st

    from fuzzrunner.case import Case
    from fuzzrunner.target import Target

    def run(case, ctx):
        for i, op in enumerate(case.ops):
            with ctx.op(i, op):
                time.sleep(0.05)
    return Target("napping", "naps 0.05 s an op", lambda faults=(), *, max_ops=5: st.just(
        Case("napping", {}, ({"op": "nap"},))), run)


def test_run_case_times_each_oracle_and_a_second_run_apart():
    from fuzzrunner.case import Case
    from fuzzrunner.execute import run_case
    times: dict = {}
    run_case(Case("napping", {}, ({"op": "nap"}, {"op": "nap"})), _napping_target(), device="cpu",
             oracles=["numeric", "poison"], times=times)
    assert {"oracle:numeric", "oracle:poison", "second-run"} <= set(times)
    assert times["second-run"] >= 0.1  # the second run's two naps (poison asks for it), its oracles' calls not
    assert all(v >= 0 for v in times.values())
