"""Issue 47, items 2, 4, 10 and the API/CLI part of 15, end to end: through the command line
(``fuzzrunner.cli.main``) and the library (``fuzzrunner.fuzz``), with real workers. The targets are
api_targets.py's, loaded as a user's FILE.py:OBJ. The classes are unit-tested in
tests/unit/test_async_callbacks.py, test_user_objects.py and test_api_arguments.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fuzzrunner
from fuzzrunner.cli import main
from fuzzrunner.report import load_report, runs

HERE = Path(__file__).parent


def spec(name: str) -> str:
    return f"{HERE / 'api_targets.py'}:{name}"


def fuzz_cli(tmp_path, target, *extra, examples="3"):
    return main(["fuzz", "--target", target, "--max-examples", examples, "--seed", "1", "-q",
                 "--corpus", str(tmp_path / "corpus"), *extra])


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("fuzzrunner: error: ")]


# -- item 2 ------------------------------------------------------------------------------------------

def test_a_run_returning_a_coroutine_stops_the_campaign_with_the_targets_error(tmp_path, capsys, no_hang):
    """Caught where the worker runs the case: a plain function whose value is a coroutine (before: exit 0,
    "3 cases ... 0 findings", the code under test never ran)."""
    with no_hang(300):
        assert fuzz_cli(tmp_path, spec("RETURNS_COROUTINE"), "--report", str(tmp_path / "r.json")) == 2
    out = capsys.readouterr()
    errors = [line for line in out.err.splitlines() if line.startswith("fuzzrunner: error: ")]
    assert errors == ["fuzzrunner: error: target 'returns_coroutine': its run returned a coroutine, so no line of "
                      "the case would run: run(case, ctx) must run the case and return None. Let run run what it "
                      "awaits to its end inside it (asyncio.run(...)) instead of returning it."], out.err
    assert "0 findings" not in out.out and "Traceback" not in out.err and not (tmp_path / "r.json").exists()


def test_check_target_says_a_generator_run_cannot_test_anything(capsys):
    assert main(["check-target", spec("GENERATOR")]) == 2
    assert error_lines(capsys) == ["fuzzrunner: error: target 'generator': its run is a generator function, so no "
                                   "line of the case would run: run(case, ctx) must run the case and return None. "
                                   "Make run a plain function that runs its loop itself instead of yielding."]


# -- item 4 ------------------------------------------------------------------------------------------

def test_an_exception_whose_str_raises_is_a_finding_with_its_report(tmp_path, capsys, no_hang):
    """Before: "worker failed outside the target", exit 2, no report."""
    with no_hang(300):
        assert fuzz_cli(tmp_path, spec("STR_RAISES"), "--report", str(tmp_path / "r.json")) == 1
    assert error_lines(capsys) == []
    [run] = runs(load_report(tmp_path / "r.json"))
    [finding] = run["findings"]
    assert finding["message"] == "op 0: StrRaises: <StrRaises object: its str() failed (RuntimeError)>"


def test_cases_raising_an_exception_whose_str_raises_is_one_line_not_an_internal_error(tmp_path, capsys):
    assert fuzz_cli(tmp_path, spec("CASES_RAISE")) == 2
    assert error_lines(capsys) == ["fuzzrunner: error: target 'cases_raise': its cases(faults, max_ops=8) raised "
                                   "StrRaises: <StrRaises object: its str() failed (RuntimeError)>"]


# -- item 15: on_event, --previous -------------------------------------------------------------------

def test_an_on_event_that_raises_is_said_once_and_the_campaign_keeps_its_findings(tmp_path, no_hang):
    seen: list = []

    def on_event(event):
        seen.append(event.kind)
        raise ValueError("the user's progress bar broke")
    with no_hang(300):
        result = fuzzrunner.fuzz(spec("STR_RAISES"), max_examples=3, seed=1, corpus=tmp_path / "corpus",
                                 on_event=on_event)
    assert len(result.findings) == 1 and not result.errors and len(seen) > 1  # later events still went to it
    [warning] = [w for w in result.warnings if "on_event" in w]
    assert warning.startswith("on_event raised ValueError: the user's progress bar broke (on a ")
    assert f"{len(seen)} events it failed on in all" in warning


def test_previous_of_another_targets_report_is_refused_before_the_campaign(tmp_path, capsys):
    """Before: the run was compared with nothing, every finding "new", nothing "fixed", not a word said."""
    previous = _report_of_another_target(tmp_path)
    assert fuzz_cli(tmp_path, spec("GENERATOR_FEATURES"), "--previous", str(previous)) == 2
    assert error_lines(capsys) == [f"fuzzrunner: error: --previous '{previous}' has no run of 'generator_features' "
                                   f"(it ran: lora_kernels): there would be nothing to compare. Pass a report of "
                                   f"this target's earlier run, or drop --previous."]
    assert not (tmp_path / "corpus").exists()


def _report_of_another_target(tmp_path) -> Path:
    from fuzzrunner.engine.result import CampaignResult, StopReason
    from fuzzrunner.report import write_reports
    from fuzzrunner.settings import Settings
    result = CampaignResult("lora_kernels", Settings(), 1, ())
    result.stop_reason = StopReason.MAX_EXAMPLES
    path = tmp_path / "old.json"
    write_reports([result], json_path=path)
    return path


# -- item 10 -----------------------------------------------------------------------------------------

def test_a_users_target_named_like_a_built_in_one_keeps_its_findings_apart(tmp_path, no_hang):
    """The built-in campaign quarantined the user's findings (its schema refused their cases), and the
    user's campaign replayed the built-in's. Each finding belongs to the spec it recorded."""
    corpus = tmp_path / "corpus"
    with no_hang(600):
        mine = fuzzrunner.fuzz(spec("NAMESAKE"), max_examples=2, seed=1, corpus=corpus)
        [own] = list((corpus / "findings" / "reference_runner").glob("*.json"))
        assert len(mine.findings) == 1 and json.loads(own.read_text())["target_spec"] == spec("NAMESAKE")
        builtin = _as_the_builtins(own, corpus)

        theirs = fuzzrunner.fuzz("reference_runner", max_examples=1, seed=1, corpus=corpus)
        assert theirs.quarantined == [] and own.exists() and not (corpus / "quarantine").exists()
        assert [Path(p).name for p, _, _ in theirs.replayed if "findings" in p] == [builtin.name]
        assert any("1 finding of a target of your own also named 'reference_runner'" in w for w in theirs.warnings)

        again = fuzzrunner.fuzz(spec("NAMESAKE"), max_examples=1, seed=1, corpus=corpus)
    assert [Path(p).name for p, _, _ in again.replayed] == [own.name]
    assert any("1 finding of the built-in target also named 'reference_runner'" in w for w in again.warnings)
    assert builtin.exists() and json.loads(builtin.read_text())["target_spec"] == "reference_runner"


def _as_the_builtins(own: Path, corpus: Path) -> Path:
    """A finding of the built-in target beside the user's: a seed case of reference_runner, recorded as found
    by the built-in spec (what a built-in campaign with the bug would have written)."""
    seed = sorted((Path(fuzzrunner.target.load_target("reference_runner").seeds)).glob("*.json"))[0]
    data = json.loads(own.read_text())
    data["case"] = {**json.loads(seed.read_text()), "faults": []}
    data["target_spec"] = "reference_runner"
    path = own.with_name("builtin_" + own.name)
    path.write_text(json.dumps(data))
    shutil.copymode(own, path)
    return path
