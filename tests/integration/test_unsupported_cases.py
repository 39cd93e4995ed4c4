"""A corpus case that the release under test cannot run (``UnsupportedCase``: a knob or backend it does not ship)
is kept in the corpus and skipped, counted in one line per campaign and in the reports; a malformed one is still
quarantined. Before, both were moved to ``corpus/quarantine``, so the next campaign on the release that runs the
case no longer replayed it.

Two releases of one user target (``released``): 1.0 refuses ``n`` 7 (a knob it lacks), 2.0 runs it; both refuse
``n`` 8 (a case no release runs)."""

import json
from pathlib import Path

from fuzzrunner.cli import main
from fuzzrunner.report import load_report

TARGET = """
from hypothesis import strategies as st
from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidCase, UnsupportedCase
from fuzzrunner.target import Target


def make(release):
    def run(case, ctx):
        for i, op in enumerate(case.ops):
            if op["n"] == 7 and release == "1.0":
                raise UnsupportedCase(f"n=7: release {release} has no such knob; leave it out")
            if op["n"] == 8:
                raise InvalidCase("n=8: no release takes n 8; draw 0 to 7")
            with ctx.op(i, op):
                pass
    return Target("released", f"release {release}", lambda faults=(), *, max_ops=5: st.integers(0, 6).map(
        lambda n: Case("released", {}, ({"op": "x", "n": n},))), run,
        code_under_test={"engine": "eng", "release": release, "tree": TREE})


OLD, NEW = make("1.0"), make("2.0")
"""


def _case(n: int) -> str:
    return json.dumps({"schema": 1, "target": "released", "config": {}, "ops": [{"op": "x", "n": n}]})


def _campaign(tmp_path, release: str, capsys) -> tuple[dict, list[str]]:
    report = tmp_path / f"{release}.json"
    assert main(["fuzz", "--target", f"{tmp_path / 'released.py'}:{release}", "--max-examples", "3", "--seed", "1",
                 "-q", "--corpus", str(tmp_path / "corpus"), "--report", str(report),
                 "--html", str(tmp_path / f"{release}.html")]) == 0
    whole = load_report(report)  # checks the report's shape too
    [run] = whole["runs"]
    assert whole["summary"]["unsupported"] == len(run["unsupported"])
    return run, capsys.readouterr().err.splitlines()


def test_a_case_the_release_refuses_is_kept_and_skipped_and_replayed_by_the_release_that_runs_it(tmp_path, capsys):
    (tmp_path / "released.py").write_text(f"TREE = {str(tmp_path)!r}\n" + TARGET)
    cases = tmp_path / "corpus" / "cases" / "released"
    cases.mkdir(parents=True)
    for name, n in (("knob.json", 7), ("knob2.json", 7), ("broken.json", 8), ("fine.json", 1)):
        (cases / name).write_text(_case(n))

    run, err = _campaign(tmp_path, "OLD", capsys)
    # kept where it was, skipped, one line for the campaign; the malformed case still quarantined
    assert (cases / "knob.json").exists() and (cases / "knob2.json").exists()
    assert not (tmp_path / "corpus" / "quarantine" / "cases" / "released" / "knob.json").exists()
    assert (tmp_path / "corpus" / "quarantine" / "cases" / "released" / "broken.json").exists()
    said = [line for line in err if "not supported" in line]
    assert said == ["  warning: 2 corpus cases not supported by released eng 1.0: skipped (kept); "
                    "n=7: release 1.0 has no such knob; leave it out"], err
    assert not any("knob.json" in line or "knob2.json" in line for line in err)  # no line per case
    assert sorted(Path(u["path"]).name for u in run["unsupported"]) == ["knob.json", "knob2.json"]
    assert {u["why"] for u in run["unsupported"]} == {"n=7: release 1.0 has no such knob; leave it out"}
    assert [Path(q["path"]).name for q in run["quarantined"]] == ["broken.json"]
    assert [Path(r["path"]).name for r in run["replayed"]] == ["fine.json"]
    assert "2 not supported by this release (skipped, kept)" in (tmp_path / "OLD.html").read_text()

    # the next campaign, on the release that runs it, replays it
    run, err = _campaign(tmp_path, "NEW", capsys)
    assert sorted(Path(r["path"]).name for r in run["replayed"]) == ["fine.json", "knob.json", "knob2.json"]
    assert run["unsupported"] == [] and run["quarantined"] == []
    assert not any("not supported" in line for line in err)
    assert "not supported" not in (tmp_path / "NEW.html").read_text()
