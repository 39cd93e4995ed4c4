"""Events of real shard processes (``--workers 2`` on the reference runner) cross as plain data and reach
``on_event`` as the dataclasses of engine/events.py; a reader of the old dicts still works, warned once."""

import io
import warnings

from fuzzrunner.api import fuzz
from fuzzrunner.engine import events
from fuzzrunner.finding import Finding
from fuzzrunner.progress import Progress
from fuzzrunner.settings import Settings

FAULT = "dummy_run_skips_mapping"  # the target's seed case is its shape: found at once, in the corpus replay


def _campaign(corpus, on_event):
    return fuzz("reference_runner", faults=(FAULT,), corpus=corpus, on_event=on_event, workers=2, max_examples=4,
                seed=3, device="cpu", shrink=False, cpu_triage=False)


def test_shard_processes_events_arrive_typed_and_an_old_style_reader_still_works(tmp_path, monkeypatch):
    monkeypatch.setattr(events, "_warned", False)
    heard: list = []
    line = io.StringIO()
    shown = Progress(line, Settings(max_examples=4))  # the CLI's progress line, on the merged events

    def typed(e):
        heard.append(e)
        shown(e)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # nothing of ours reads an event as a dict
        first = _campaign(tmp_path, typed)
    assert first.findings and not first.errors and not first.warnings, (first.errors, first.warnings)
    assert all(type(e) in events.CAMPAIGN_EVENTS for e in heard), {type(e) for e in heard}
    found = [e for e in heard if isinstance(e, events.FindingEvent)]
    assert found and all(isinstance(e.finding, Finding) and e.shard in (0, 1) for e in found)
    assert sorted(e.finding.id for e in found) == sorted(f.id for f in first.findings)  # each once, from 2 shards
    progress = [e for e in heard if isinstance(e, events.ProgressEvent)]
    assert progress and progress[-1].examples <= first.examples and all(e.elapsed >= 0 for e in progress)
    assert "  found: " in line.getvalue()

    again: list = []

    def old_reader(e):  # as library users wrote it before the events were typed
        again.append(e)
        if e["type"] == "regression":
            assert e["finding"].signature.short() and e.get("path", "").endswith(".json")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        second = _campaign(tmp_path, old_reader)  # the corpus now holds the finding: a regression
    assert not second.errors and not any("on_event" in w for w in second.warnings), second.warnings
    regressions = [e for e in again if isinstance(e, events.RegressionEvent)]
    assert regressions and all(isinstance(e.finding, Finding) for e in regressions)
    assert sum(issubclass(w.category, DeprecationWarning) and "campaign event" in str(w.message) for w in said) == 1
