"""The state oracle: what a target reports with ``ctx.check`` becomes a ``state-violation`` of its op, and
nothing when every property holds (proven both ways on one tiny target)."""

from __future__ import annotations

from fuzzrunner.case import Case
from fuzzrunner.execute import run_case
from fuzzrunner.target import Target


def _target(broken: bool) -> Target:
    def run(case, ctx):
        for i, op in enumerate(case.ops):
            with ctx.op(i, op):
                resident = {"a": 0} if broken and op["op"] == "unload" else {}
                ctx.check("unload", [f"{k!r} still maps to slot {v}" for k, v in resident.items()], {"slots": 2})
    return Target(name="t", description="", cases=None, run=run)


CASE = Case("t", {}, ({"op": "load"}, {"op": "unload"}), ())


def test_a_broken_property_is_a_state_violation_of_its_op():
    vs = run_case(CASE, _target(broken=True), oracles=["state"], device="cpu")
    assert [(v.tool, v.kind, v.details["op_index"]) for v in vs] == [("state", "state-violation", 1)]
    assert "op 1 (unload): unload: 'a' still maps to slot 0" in vs[0].message
    assert vs[0].details["slots"] == 2


def test_no_problem_is_no_violation():
    assert run_case(CASE, _target(broken=False), oracles=["state"], device="cpu") == []


def test_the_state_oracle_runs_by_default_on_both_devices():
    from fuzzrunner import names
    assert "state" in names.default_oracles("cpu") and "state" in names.default_oracles("cuda")
