"""``run_case(stop_early=True)``: the CPU pre-check ends a case at its first op with a violation."""

import torch
from hypothesis import strategies as st

import fuzzrunner  # noqa: F401  (interpreter mode before Triton loads)
from fuzzrunner.case import Case
from fuzzrunner.execute import run_case
from fuzzrunner.target import Target

RAN: list = []


def run(case, ctx):
    RAN.clear()
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            RAN.append(i)
            if op["op"] != "clean":
                ctx.track(torch.empty(4), op["op"], initialized=False).sum()  # a read of never-written memory
            else:
                torch.ones(4).sum()


TARGET = Target("early", "reads of never-written buffers named by the op",
                lambda faults=(), *, max_ops=4: st.just(Case("early", {}, ())), run)


def case(*ops):
    return Case("early", {}, tuple({"op": o} for o in ops))


def test_the_run_stops_after_the_first_op_that_showed_a_violation():
    vs = run_case(case("clean", "bad_a", "clean", "bad_b"), TARGET, oracles=["shadow"], device="cpu", stop_early=True)
    assert RAN == [0, 1]
    assert {v.tensor for v in vs} == {"bad_a"} and {v.details["op_index"] for v in vs} == {1}


def test_without_stop_early_every_op_runs_and_each_bad_one_is_seen():
    vs = run_case(case("clean", "bad_a", "clean", "bad_b"), TARGET, oracles=["shadow"], device="cpu")
    assert RAN == [0, 1, 2, 3] and {v.tensor for v in vs} == {"bad_a", "bad_b"}


def test_a_clean_case_runs_to_the_end_under_stop_early():
    assert run_case(case("clean", "clean", "clean"), TARGET, oracles=["shadow"], device="cpu", stop_early=True) == []
    assert RAN == [0, 1, 2]


def test_a_hub_asked_to_stop_early_passes_it_to_its_worker():
    from fuzzrunner.context import Context
    from fuzzrunner.engine.hub import Hub, WorkerSpec
    with Hub(WorkerSpec(f"{__file__}:TARGET", Context.of("cpu")), oracles=("shadow",), stop_early=True) as hub:
        vs = hub.run(case("bad_a", "bad_b")).violations
    assert {v.tensor for v in vs} == {"bad_a"}
