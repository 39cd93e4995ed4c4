"""A shard's result travels between processes as a copy (``portable_result``), its findings as dicts; the
result itself keeps its ``Finding`` objects (it was turned into dicts in place)."""

from fuzzrunner.case import Case
from fuzzrunner.engine.result import CampaignResult, StopReason
from fuzzrunner.engine.sharding import portable_result
from fuzzrunner.finding import Finding
from fuzzrunner.settings import Settings
from fuzzrunner.violation import Violation


def test_portable_result_copies_and_leaves_the_result_as_it_was():
    case = Case("reference_runner", {"max_loras": 1}, ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))
    v = Violation("shadow", "uninitialized-read", "k", "x.py:1", "ids", "ids[0]: never written", {"op_index": 0})
    found, flaky = Finding.of(v, [], case), Finding.of(Violation("worker", "crash", "", "", "", "died"), [], case)
    res = CampaignResult("reference_runner", Settings(), 1, (), examples=3, findings=[found], flaky=[flaky],
                         stop_reason=StopReason.BUDGET)
    sent = portable_result(res)
    assert res.findings == [found] and res.flaky == [flaky]
    assert sent.findings == [found.to_dict()] and sent.flaky == [flaky.to_dict()]
    assert (sent.examples, sent.stop_reason, sent.target) == (3, StopReason.BUDGET, "reference_runner")
    assert [Finding.from_dict(d).id for d in sent.findings] == [found.id]
