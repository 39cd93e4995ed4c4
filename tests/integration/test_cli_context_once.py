"""The CLI resolves the run's context once per command and hands it to the library, which does not resolve it
again (it used to: once in the CLI, to refuse a flag early, and again in ``plan_campaign`` or ``Replayer``)."""

from pathlib import Path

import pytest

from fuzzrunner import cli
from fuzzrunner.context import Context

SEED = Path(__file__).parents[2] / "targets" / "reference_runner" / "seeds" / "dummy_run_first.json"


@pytest.fixture
def resolves(monkeypatch):
    calls: list = []
    real = Context.resolve.__func__  # type: ignore[attr-defined]

    def counting(cls, settings, **kw):
        context = real(cls, settings, **kw)
        calls.append(context)
        return context
    monkeypatch.setattr(Context, "resolve", classmethod(counting))
    return calls


def test_fuzz_resolves_the_context_once_and_the_campaign_runs_under_it(tmp_path, resolves):
    report = tmp_path / "r.json"
    code = cli.main(["fuzz", "--target", "reference_runner", "--max-examples", "1", "--seed", "1", "--device", "cpu",
                     "--corpus", str(tmp_path / "c"), "--report", str(report), "-q"])
    assert code == 0 and len(resolves) == 1, resolves
    import json
    [run] = json.loads(report.read_text())["runs"]
    assert run["context"] == resolves[0].to_dict()


def test_replay_resolves_the_context_once(tmp_path, resolves, capsys):
    assert cli.main(["replay", str(SEED), "--device", "cpu"]) == 0, capsys.readouterr()
    assert len(resolves) == 1 and resolves[0].device == "cpu"
