"""A campaign counts the features of exactly the valid cases it generated, and steering reaches Hypothesis."""

import json
from collections import Counter
from pathlib import Path

import hypothesis
import pytest

import fuzzrunner
from fuzzrunner.case import Case
from fuzzrunner.coverage import features_of
from fuzzrunner.engine.search import Shard
from fuzzrunner.report import report_dict

SPEC = f"{Path(__file__).with_name('coverage_targets.py')}:COUNTED"


def _pairs(names):
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


def test_the_report_coverage_counts_the_features_of_the_valid_cases_run(tmp_path, monkeypatch):
    pytest.importorskip("jsonschema", reason="jsonschema is not installed: case files and reports go unchecked here")  # (invalid cases are the schema's)
    from fuzzrunner.target import load_target
    log = tmp_path / "cases.jsonl"
    monkeypatch.setenv("COVERAGE_LOG", str(log))
    targeted = []
    real_target = hypothesis.target
    monkeypatch.setattr(hypothesis, "target", lambda score, label="": targeted.append(score) or
                        real_target(score, label=label))
    r = fuzzrunner.fuzz(SPEC, max_examples=20, seed=3, shrink=False, device="cpu", steer=True)
    ran = [Case.from_dict(json.loads(line)) for line in log.read_text().splitlines()]
    assert r.invalid > 0 and r.coverage.cases == r.valid == len(ran) > 0  # invalid cases never ran nor count
    features = [features_of(load_target(SPEC).features, c) for c in ran]
    [run] = report_dict(r)["runs"]  # schema 2: a campaign's report holds one run
    cov = run["coverage"]
    assert cov["cases"] == len(ran) and cov["steering"] is True
    assert cov["features"] == dict(Counter(f for fs in features for f in fs))
    assert {(a, b): n for a, b, n in cov["pairs"]} == dict(Counter(p for fs in features for p in _pairs(fs)))
    assert "op=never" in cov["never_reached"] and "op=a" not in cov["never_reached"]
    assert len(targeted) == r.generated and all(s <= 0 for s in targeted)  # every generated case, invalid too
    _valid_against_the_published_schema(report_dict(r))


def _valid_against_the_published_schema(report: dict) -> None:
    import jsonschema
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json").read_text())
    jsonschema.validate(report, schema)
    broken = json.loads(json.dumps(report))
    broken["runs"][0]["coverage"]["pairs"][0][2] = "many"
    try:
        jsonschema.validate(broken, schema)
    except jsonschema.ValidationError:
        return
    raise AssertionError("the schema let an ill-typed coverage pair through")


def test_without_steering_no_score_reaches_hypothesis(monkeypatch):
    from fuzzrunner.coverage import Coverage
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.settings import Settings
    from fuzzrunner.target import load_target
    targeted, events = [], []
    monkeypatch.setattr(hypothesis, "target", lambda score, label="": targeted.append(score))
    monkeypatch.setattr(hypothesis, "event", events.append)
    shard = Shard.__new__(Shard)
    shard.target = load_target(SPEC)
    shard.result = CampaignResult("counted", Settings(), 0, ())
    shard.result.coverage = Coverage()
    case = Case("counted", {}, ({"op": "a", "n": 1}, {"op": "b", "n": 1}))
    for steer in (False, True):
        shard.settings = Settings(steer=steer)
        assert shard._observe(case) == ("op=a", "op=b", "ops=2")
    assert events == ["op=a", "op=b", "ops=2"] * 2 and targeted == [0.0]


def test_the_steer_setting_adds_hypothesis_target_phase():
    from hypothesis import Phase

    from fuzzrunner.settings import Settings

    def phases(**s):
        shard = Shard.__new__(Shard)
        shard.settings = Settings(**s)
        return shard.phases(first_batch=False)
    assert phases(steer=True) == [Phase.generate, Phase.target, Phase.shrink]
    assert phases(steer=False, shrink=False) == [Phase.generate]


def test_the_seed_cases_replayed_count_towards_coverage(tmp_path):
    """The reference runner's seed slot_moved_same_mapping.json reaches a state generation rarely
    does; a finding it found must not sit beside "never reached" (new-user trial)."""
    from fuzzrunner.engine.campaign import run_campaign
    from fuzzrunner.settings import Settings
    r = run_campaign("reference_runner", Settings(max_examples=1, seed=3, device="cpu"), corpus_dir=tmp_path)
    counts = r.coverage.to_dict()
    assert counts["features"].get("slots=moved-between-same-mappings", 0) >= 1
    assert counts["cases"] >= len(r.replayed) + 1
