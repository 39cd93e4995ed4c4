"""The run's context is decided once and reaches every process as a parameter: the target's strategy, the
worker's ``ctx``, the result, the report and each finding say the device and shadow mode that ran, whatever
this process's environment says."""

import json
from pathlib import Path

import fuzzrunner
from fuzzrunner.context import Context
from fuzzrunner.finding import Finding
from fuzzrunner.report import report_dict
from fuzzrunner.settings import Settings

SPEC = f"{Path(__file__).with_name('context_target.py')}:TARGET"


def test_a_campaign_says_the_context_it_ran_under_not_the_environments(tmp_path, monkeypatch):
    """``fuzz(settings=Settings(device="cpu"))`` in a process whose environment says cuda and the device mode:
    the report named the environment's device (cuda), and the strategy read its dtypes from it."""
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("CONTEXT_LOG", str(log))
    monkeypatch.setenv("FUZZRUNNER_DEVICE", "cuda")   # the environment's defaults: the settings below win
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    r = fuzzrunner.fuzz(SPEC, settings=Settings(device="cpu", shadow="cpu", max_examples=12, seed=1, shrink=False,
                                                min_valid=0), corpus=tmp_path / "corpus")
    ran = Context("cpu", True, "cpu")
    assert r.context == ran
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert {e["device"] for e in entries if e["where"] == "strategy"} == {"cpu"}
    runs = [e for e in entries if e["where"] == "run"]
    assert runs and all(e["device"] == "cpu" and Context.from_dict({k[8:]: v for k, v in e.items()
                                                                    if k.startswith("context_")}) == ran
                        for e in runs), runs
    report = report_dict(r)
    assert report["provenance"]["device"] == "cpu" and report["runs"][0]["context"] == ran.to_dict()
    assert r.findings and all(f.context == ran for f in r.findings)
    [path] = (tmp_path / "corpus" / "findings" / "context_logged").glob("*.json")
    assert Finding.load(path).context == ran  # on disk too: a replay knows the mode that found it
