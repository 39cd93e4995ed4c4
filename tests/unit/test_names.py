"""The vocabulary registry: every registered name resolves, and a new oracle needs only a spec."""

import pytest

from fuzzrunner import names, settings
from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.execute import run_case
from fuzzrunner.oracles.base import Oracle
from fuzzrunner.target import load_target
from fuzzrunner.violation import Violation


@pytest.mark.parametrize("name", sorted(names.ORACLES))
def test_every_registered_oracle_resolves_to_an_oracle(name):
    oracle = names.ORACLES[name].make()
    assert isinstance(oracle, Oracle)
    for tool in names.ORACLES[name].not_under:
        assert tool in names.SANITIZER_TOOLS
    for device in names.ORACLES[name].default_on:
        assert device in names.DEVICES


def test_every_profile_and_kind_is_defined_once():
    assert set(names.PROFILES) == set(settings.PROFILES)
    assert set(names.CRASH_KINDS) <= set(names.KINDS)
    for kind in names.KINDS.values():
        assert kind.name and kind.family and kind.priority >= 0


def test_the_sanitizer_forbids_poison_and_invariants_under_initcheck():
    assert names.effective_oracles(None, "cuda", "initcheck") == ("numeric",)
    assert names.effective_oracles(["shadow", "poison"], "cpu", "none") == ("shadow", "poison")
    with pytest.raises(InvalidArgument, match="unknown oracle 'posion'"):
        names.effective_oracles(["posion"], "cpu")


class _CountsOps(Oracle):
    """A third-party oracle: one violation per op whose name it was told to flag."""

    name = "counts"

    def __init__(self):
        self.seen = []

    def begin_op(self, index, op):
        self.seen.append((index, op["op"]))

    def finish(self):
        return [Violation("counts", "invariant-violation", op, "", "", f"op {i} is {op}", {"op_index": i})
                for i, op in self.seen if op == "dummy_run"]


def test_a_registered_oracle_runs_without_touching_any_other_file(monkeypatch):
    monkeypatch.setitem(names.ORACLES, "counts", names.OracleSpec("counts", f"{__name__}:_CountsOps"))
    case = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
                ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))
    violations = run_case(case, load_target("reference_runner"), oracles=("counts",))
    assert [(v.tool, v.kernel) for v in violations] == [("counts", "dummy_run")]
