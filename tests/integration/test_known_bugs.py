"""A target's ``known_bugs`` labels a campaign's findings (fuzzrunner/engine/known.py, docs/triage.md): the report and
the summary say "known: ID" for a finding the target names, nothing for another, and a broken classifier costs no
finding (a warning). A target file around ``reference_runner`` and its planted ``dummy_run_skips_mapping`` (its seed
case finds it at once)."""

import io
import json

from fuzzrunner.engine.campaign import run_campaign
from fuzzrunner.settings import Settings

TARGET = '''
import dataclasses
from fuzzrunner.target import load_target

def known(finding):
    {body}

def make():
    return dataclasses.replace(load_target("reference_runner"), known_bugs=known)

TARGET = make
'''
NAMES_IT = ('return {"id": "K1", "title": "dummy runs read no mapping", "upstream": "example/repo#1", '
            '"status": "fixed in 2.0"} if finding["violation"]["kind"] == "uninitialized-read" else None')


def _campaign(tmp_path, body: str):
    path = tmp_path / "labelled_target.py"
    path.write_text(TARGET.format(body=body))
    settings = Settings(max_examples=1, seed=3, device="cpu", shrink=False)
    return run_campaign(f"{path}:TARGET", settings, faults=("dummy_run_skips_mapping",), corpus_dir=tmp_path / "c")


def _summary(result) -> str:
    from fuzzrunner.cli.render import _summary
    out = io.StringIO()
    _summary(result, out)
    return out.getvalue()


def test_a_finding_the_target_names_is_labelled_in_the_report_the_summary_and_the_corpus(tmp_path):
    from fuzzrunner.report import write_json
    r = _campaign(tmp_path, NAMES_IT)
    named = [f for f in r.findings if f.violation.kind == "uninitialized-read"]
    assert named and all(f.triage == {"known": {"id": "K1", "title": "dummy runs read no mapping",
                                                "upstream": "example/repo#1", "status": "fixed in 2.0"}}
                         for f in named), [f.triage for f in r.findings]
    assert all(f.triage is None for f in r.findings if f not in named)
    text = _summary(r)
    assert "(1 known bug: K1 (seed" in text  # each known bug once, however many findings it shows as
    assert "known: K1: dummy runs read no mapping (example/repo#1; fixed in 2.0)" in text, text
    report = json.loads(write_json(r, tmp_path / "r.json").read_text())
    assert report["summary"]["known"] == 1
    assert report["runs"][0]["findings"][0]["triage"]["known"]["id"] == "K1"
    saved = [json.loads(p.read_text()) for p in (tmp_path / "c").rglob("*.json")]  # a planted fault's: expected/
    assert any((d.get("triage") or {}).get("known", {}).get("id") == "K1" for d in saved), saved


def test_a_finding_the_target_does_not_name_stays_unlabelled(tmp_path):
    r = _campaign(tmp_path, "return None")
    assert r.findings and all(f.triage is None for f in r.findings)
    assert "known" not in _summary(r)


def test_a_classifier_that_raises_costs_no_finding_and_says_so(tmp_path):
    r = _campaign(tmp_path, "raise KeyError('violation')")
    assert r.findings and all(f.triage is None for f in r.findings)
    assert any("its known_bugs raised on finding" in w and "KeyError" in w for w in r.warnings), r.warnings


def test_a_known_bug_is_not_shrunk_and_the_cases_go_to_the_search(tmp_path):
    """Shrinking a bug the target names as known spent a short campaign's cases on it (``sglang_engine``: the known
    bugs its seeds show, found again by generated cases and shrunk each time). The same campaign, the bug named or
    not: named, no case is a shrink step (every case is replayed or generated) and the finding keeps its first,
    smallest case, said "not shrunk: a known bug"; unnamed, it is shrunk as before."""
    from fuzzrunner.finding import render
    results = {}
    for name, body in (("named", NAMES_IT), ("unnamed", "return None")):
        path = tmp_path / name / "labelled_target.py"
        path.parent.mkdir()
        path.write_text(TARGET.format(body=body))
        settings = Settings(max_examples=4, seed=1, device="cpu", shrink=True, oracles=("shadow",))
        results[name] = run_campaign(f"{path}:TARGET", settings, faults=("dummy_run_skips_mapping",),
                                     corpus_dir=tmp_path / name / "c")
    named, unnamed = results["named"], results["unnamed"]
    assert named.examples == named.generated and named.generated > 0, (named.examples, named.generated)
    assert unnamed.examples > unnamed.generated, (unnamed.examples, unnamed.generated)  # the control: it shrinks
    known = [f for f in named.findings if (f.triage or {}).get("known")]
    assert known and all(not f.minimized and "not shrunk: a known bug" in render(f) for f in known)


def test_a_bug_a_seed_shows_reads_as_reproduced_from_its_seed_and_one_the_search_finds_from_scratch(tmp_path):
    """A new user's trial: the bugs sglang_engine's seeds replay read "found after 12 examples", like the search's.
    The same planted bug, shown by reference_runner's seed, then (seeds left out) by generated cases."""
    r = _campaign(tmp_path, NAMES_IT)
    named = [f for f in r.findings if f.violation.kind == "uninitialized-read"]
    assert named and all(f.found_by.get("seed", "").endswith(".json") for f in named), [f.found_by for f in named]
    text = _summary(r)  # (the one generated case shows it too: "and found from scratch after 1 example")
    assert "reproduced from its seed " in text and "found after" not in text and "(1 known bug: K1 (seed" in text
    path = tmp_path / "unseeded_target.py"
    path.write_text(TARGET.format(body=NAMES_IT).replace("known_bugs=known)", "known_bugs=known, seeds=None)"))
    settings = Settings(max_examples=3, seed=3, device="cpu", shrink=False)
    r = run_campaign(f"{path}:TARGET", settings, faults=("dummy_run_skips_mapping",), corpus_dir=tmp_path / "c2")
    named = [f for f in r.findings if f.violation.kind == "uninitialized-read"]
    assert named and all(set(f.found_by) == {"search"} for f in named), [f.found_by for f in r.findings]
    text = _summary(r)
    assert f"found from scratch after {named[0].found_by['search']} example" in text and "from its seed" not in text, text


def test_replay_prints_the_known_bug_label_the_campaign_gave_the_finding(tmp_path, capsys):
    """``fuzzrunner replay`` (a finding, ``--preceding``, a case file) says "known: ID: ..." under a violation the
    target names, as the campaign's summary does; before, a replay printed the violation alone, and a user replaying a
    nightly's finding could not tell a known bug from a new one."""
    from fuzzrunner.case import Case
    from fuzzrunner.cli import main
    _campaign(tmp_path, NAMES_IT)
    label = "known: K1: dummy runs read no mapping (example/repo#1; fixed in 2.0)"
    [finding] = [f for f in (tmp_path / "c").rglob("*.json")
                 if json.loads(f.read_text())["violation"]["kind"] == "uninitialized-read"]
    assert main(["replay", str(finding)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"REPRODUCED {json.loads(finding.read_text())['signature']['kind']}" in out[0], out
    assert f"    {label}" in out, out
    # --preceding: the cases its worker ran before it first, then its case, labelled the same
    d = json.loads(finding.read_text())
    fine = Case(d["case"]["target"], d["case"]["config"], ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))
    d["preceding"] = {"of": d["case"], "cases": [fine.to_dict()], "dropped": 0}
    finding.write_text(json.dumps(d))
    assert main(["replay", "--preceding", str(finding)]) == 1
    captured = capsys.readouterr()
    assert "ran the 1 case(s) its worker ran before it first" in captured.err
    assert f"    {label}" in captured.out.splitlines(), captured.out
    # a case file: under the head of the root cause the target names
    case = tmp_path / "case.json"
    case.write_text(json.dumps(d["case"]))
    assert main(["replay", "--target", f"{tmp_path / 'labelled_target.py'}:TARGET", str(case)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"      {label}" in out and out.count(f"      {label}") == 1, out
    assert out[out.index(f"      {label}") - 1].startswith("    uninitialized-read"), out


def test_replay_prints_no_label_where_the_target_names_none(tmp_path, capsys):
    from fuzzrunner.cli import main
    _campaign(tmp_path, "return None")
    files = sorted(str(f) for f in (tmp_path / "c").rglob("*.json"))
    assert files and main(["replay", *files]) == 1
    assert "known:" not in capsys.readouterr().out
