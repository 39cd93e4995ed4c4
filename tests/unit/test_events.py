"""Campaign and shard events are frozen dataclasses (engine/events.py): each kind crosses processes as plain
data and comes back equal; the dict they used to be still reads, with one DeprecationWarning."""

import dataclasses
import json
import pickle
import warnings

import pytest

from fuzzrunner.case import Case
from fuzzrunner.engine import events
from fuzzrunner.engine.result import CampaignResult, StopReason
from fuzzrunner.finding import Finding
from fuzzrunner.settings import Settings
from fuzzrunner.violation import Violation


def _finding(n=3) -> Finding:
    v = Violation("shadow", "uninitialized-read", "k", "run.py:12", "lora_ids", "lora_ids[0] never written",
                  {"op_index": 0}, site="run.py::step")
    return Finding.of(v, [], Case("reference_runner", {"n": n}, ({"op": "x"},)), target_spec="reference_runner")


def _result() -> CampaignResult:
    r = CampaignResult("reference_runner", Settings(max_examples=7, seed=1), 1, ("planted",), examples=5,
                       findings=[_finding()], stop_reason=StopReason.BUDGET, warnings=["w"])
    return r


ONE_OF_EACH = [
    events.ProgressEvent(10, 8, 1, 2.5, 1),
    events.WarningEvent("slow case"),
    events.WarningEvent("slow case", 1),
    events.FindingEvent(_finding(), 0),
    events.RegressionEvent(_finding(), "/c/expected/reference_runner/a.json"),
    events.ShardDone(_result()),
    events.ShardError("Traceback: boom"),
    events.CorpusSave("reference_runner", _finding()),
    events.CorpusSetAside("reference_runner", _finding()),
    events.CorpusQuarantine("/c/expected/reference_runner/bad.json"),
]


def _plain(d):
    """As JSON has it (tuples are lists): the wire's own carriers (a queue, Ray) pickle and keep tuples."""
    return json.loads(json.dumps(d))


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_event_class_is_declared_and_tested_here():
    assert set(_subclasses(events.Event)) == set(events.KINDS.values()) == {type(e) for e in ONE_OF_EACH}
    assert all(dataclasses.is_dataclass(c) and c.__dataclass_params__.frozen for c in events.KINDS.values())
    assert len({c.kind for c in events.KINDS.values()}) == len(events.KINDS)  # one kind, one class


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: f"{e.kind}")
def test_each_kind_travels_as_plain_data_and_comes_back_the_same(event):
    d = event.to_dict()
    assert d["type"] == event.kind
    wire = json.loads(json.dumps(d))  # plain data: no Finding, no result, no enum
    back = events.Event.from_dict(pickle.loads(pickle.dumps(wire)))
    assert type(back) is type(event) and _plain(back.to_dict()) == wire
    for f in dataclasses.fields(event):
        mine, theirs = getattr(event, f.name), getattr(back, f.name)
        if isinstance(mine, (Finding, CampaignResult)):
            assert type(theirs) is type(mine) and _plain(theirs.to_dict()) == _plain(mine.to_dict())
        else:
            assert theirs == mine


def test_events_are_frozen_and_to_dict_leaves_the_event_as_it_was():
    e = events.FindingEvent(_finding(), 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.shard = 1  # type: ignore[misc]
    before = e.finding
    e.to_dict()
    assert e.finding is before and isinstance(e.finding, Finding)


def test_the_old_dict_reading_still_works_with_one_deprecation_warning(monkeypatch):
    monkeypatch.setattr(events, "_warned", False)
    f = _finding()
    found, progress, warned = events.FindingEvent(f, 1), events.ProgressEvent(4, 3, 1, 0.5, 0), \
        events.WarningEvent("slow")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert found["type"] == found["kind"] == "finding" and found["finding"] is f and found["shard"] == 1
        assert found.get("finding") is f and found.get("nothing", 7) == 7 and found.get("type") == "finding"
        assert {**progress} == {"type": "progress", "examples": 4, "generated": 3, "findings": 1, "elapsed": 0.5,
                                "shard": 0}
        assert "elapsed" in progress and "message" not in progress
        assert dict(warned) == {"type": "warning", "message": "slow"}  # no shard: as the old dict had none
        assert warned.get("message", "") == "slow" and sorted(warned.keys()) == ["message", "type"]
        with pytest.raises(KeyError):
            warned["shard"]
    deprecations = [w for w in said if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1 and "e.kind, e.message" in str(deprecations[0].message)
    assert deprecations[0].filename == __file__  # it points at the reader, not at events.py


def test_reading_by_attribute_says_nothing(monkeypatch):
    monkeypatch.setattr(events, "_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = events.ProgressEvent(4, 3, 1, 0.5, 0)
        assert (e.kind, e.examples, e.to_dict()["type"]) == ("progress", 4, "progress")
        events.dispatch({events.ProgressEvent: lambda e: None}, e)
        events.Listener(lambda e: e.kind)(e)
