"""A shard's result travels between processes as plain data (``CampaignResult.to_dict``, read back with
``from_dict``); the result itself is left as it was (the old ``portable_result`` turned its findings into dicts
in place, and the merger read a "result" whose findings were dicts)."""

import copy
import pickle
from collections import Counter

import pytest

from fuzzrunner.case import Case
from fuzzrunner.context import Context
from fuzzrunner.coverage import Coverage
from fuzzrunner.engine.result import CampaignResult, StopReason
from fuzzrunner.engine.sharding import Merger
from fuzzrunner.finding import Finding
from fuzzrunner.settings import Settings
from fuzzrunner.violation import Violation

CPU = Context("cpu", True, "cpu", "none", None)
CASE = Case("reference_runner", {"max_loras": 1}, ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))


def _result(stop_reason=StopReason.BUDGET, context=CPU) -> CampaignResult:
    v = Violation("shadow", "uninitialized-read", "k", "x.py:1", "ids", "ids[0]: never written", {"op_index": 0})
    found, flaky = Finding.of(v, [], CASE), Finding.of(Violation("worker", "crash", "", "", "", "died"), [], CASE)
    r = CampaignResult("reference_runner", Settings(oracles=("shadow",), max_examples=7), 1, ("f",), examples=3,
                       generated=2, findings=[found], flaky=[flaky], timeline=[(0.5, 1, 0), (1.0, 3, 1)],
                       replayed=[("corpus/cases/t/a.json", None, False)], stop_reason=stop_reason,
                       warnings=["w"], errors=["e"], cluster={"address": "x"}, code_under_test={"vllm": "0.33"},
                       coverage=Coverage(("op=step",), False, 2, Counter({"op=step": 2})), context=context)
    r.count_limitation("sig", "the interpreter cannot", 2)
    r.count_known_crash_skip("cause", "crash [worker]")
    return r


@pytest.mark.parametrize(("stop_reason", "context"), [(StopReason.BUDGET, CPU), (None, None)])
def test_to_dict_reads_back_and_leaves_the_result_as_it_was(stop_reason, context):
    r = _result(stop_reason, context)
    before = copy.deepcopy(r.to_dict())
    d = pickle.loads(pickle.dumps(r.to_dict()))  # as it crosses a process
    assert r.to_dict() == before and all(isinstance(f, Finding) for f in (*r.findings, *r.flaky))
    back = CampaignResult.from_dict(d)
    assert back.to_dict() == before
    assert back.settings == r.settings and back.stop_reason is stop_reason and back.context == context
    assert [f.id for f in back.findings] == [f.id for f in r.findings] and back.coverage.features == {"op=step": 2}
    assert all(isinstance(f, Finding) for f in (*back.findings, *back.flaky))


def test_the_merger_folds_results_read_back():
    merged = CampaignResult("reference_runner", Settings(), 1, ("f",))
    merger = Merger(2, None, merged)
    for stop in (StopReason.MAX_EXAMPLES, StopReason.BUDGET):
        merger.done(CampaignResult.from_dict(_result(stop).to_dict()))
    assert merged.examples == 6 and merged.stop_reason is StopReason.BUDGET
    assert len(merged.findings) == 1 and len(merged.flaky) == 1 and merged.tool_limitations["sig"]["count"] == 4
