"""Reports: JSON (versioned, read back by load_report), JUnit XML and HTML, from a real finding."""

import json
import os
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fuzzrunner import Case, _env, replay
from fuzzrunner.engine.result import CampaignResult, StopReason
from fuzzrunner.errors import InvalidArgument, InvalidCase
from fuzzrunner.finding import Finding, primary
from fuzzrunner.report import build_report, load_report, report_dict, write_html, write_json, write_junit
from fuzzrunner.report.trend import trend_text
from fuzzrunner.settings import profile
from fuzzrunner.violation import Violation

# The fixture replays a planted dummy-run bug in this process: on a GPU that is a device-side
# assert which kills the CUDA context for every later test. Rendering is device-independent.
# One xdist group: under `--dist loadgroup` a module's ungrouped tests spread over both workers, each
# setting up the module's fixtures; grouped, `finding` (a replay in a worker) is set up once per CI run.
pytestmark = [pytest.mark.skipif(_env.device_type() != "cpu", reason="replays a planted fault in-process; CPU only"),
              pytest.mark.xdist_group("report")]

CASE = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
            [{"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}], ["dummy_run_skips_mapping"])


@pytest.fixture(scope="module")
def finding(tmp_path_factory) -> Finding:
    violations = replay(CASE)
    main = primary(violations)
    repro = tmp_path_factory.mktemp("corpus") / "repro" / f"repro_{main.signature.id}.py"
    return Finding(main.signature, CASE, main, [v for v in violations if v is not main],
                   first_found_after_examples=7, found_after_s=1.5, minimized=True, repro=str(repro))


def campaign(finding, **kw) -> CampaignResult:
    fields = dict(examples=12, invalid=1, duration_s=3.5, findings=[finding], worker_restarts=2,
                  timeline=[(0.3 * i, i, int(i >= 7)) for i in range(1, 13)],
                  replayed=[("corpus/cases/reference_runner/seed.json", None, False)])
    fields.update(kw)
    return CampaignResult("reference_runner", profile("ci"), 0, ("dummy_run_skips_mapping",), **fields)


def clean_campaign() -> CampaignResult:
    return CampaignResult("lora_kernels", profile("ci"), 0, (), examples=5, duration_s=1.0,
                          timeline=[(0.2 * i, i, 0) for i in range(1, 6)])


def _plain(data):
    return json.loads(json.dumps(data, default=str))


# -- JSON ------------------------------------------------------------------------------------

def test_a_findings_preceding_cases_are_counted_in_the_report_and_kept_in_its_file(tmp_path, finding):
    """Each finding carried up to 64 cases its worker ran before it into the report: 79% and 74% of two vllm_engine
    GPU campaigns' reports, 91% of a CPU one's. The report keeps ``of`` and the counts (``dropped``: every earlier case,
    so ``len(cases) + dropped`` stays whole; ``in_finding_file``: how many the corpus file keeps); the finding's own
    file (``to_dict``, what ``replay --preceding`` reads) keeps the cases."""
    from fuzzrunner.engine.hub import HISTORY_CAP
    earlier = [replace(CASE, config={**CASE.config, "n": i}).to_dict() for i in range(HISTORY_CAP)]
    for kept_cases, dropped in ((earlier, 5), (earlier[:1], 0)):
        f = replace(finding, preceding={"of": CASE.to_dict(), "cases": kept_cases, "dropped": dropped})
        [data] = load_report(write_json(campaign(f), tmp_path / "report.json"))["runs"]  # checks the schema
        assert data["findings"][0]["preceding"] == {"of": CASE.to_dict(), "cases": [],
                                                    "dropped": len(kept_cases) + dropped,
                                                    "in_finding_file": len(kept_cases)}
        assert f.to_dict()["preceding"]["cases"] == kept_cases  # the corpus file's shape keeps every one
    nothing = replace(finding, preceding={"of": CASE.to_dict(), "cases": [], "dropped": 3})  # all dropped already
    [data] = load_report(write_json(campaign(nothing), tmp_path / "report.json"))["runs"]
    assert data["findings"][0]["preceding"] == nothing.preceding


def test_json_report_holds_the_campaign_and_its_finding(tmp_path, finding):
    path = write_json(campaign(finding), tmp_path / "report.json")
    report = json.loads(path.read_text())
    assert report["schema"] == 2 and set(report) == {"schema", "provenance", "summary", "runs"}
    [data] = report["runs"]
    assert data["target"] == "reference_runner" and data["seed"] == 0
    assert data["faults"] == ["dummy_run_skips_mapping"] and data["settings"]["max_examples"] == 60
    assert (data["examples"], data["invalid"], data["worker_restarts"], data["duration_s"]) == (12, 1, 2, 3.5)
    assert data["timeline"][0] == [0.3, 1, 0] and data["timeline"][-1][1:] == [12, 1]
    assert data["replayed"] == [{"path": "corpus/cases/reference_runner/seed.json", "id": None,
                                 "still_failing": False}]
    [f] = data["findings"]
    assert f["id"] == finding.signature.id and f["signature"] == finding.signature.to_dict()
    assert f["message"] == finding.violation.message
    assert f["violation"]["details"] == _plain(finding.violation.details) and f == _plain(finding.to_dict())
    assert Case.from_dict(f["case"]) == CASE and f["case"]["ops"] == [dict(CASE.ops[0])]
    assert (f["first_found_after_examples"], f["found_after_s"], f["minimized"]) == (7, 1.5, True)
    assert f["repro"] == finding.repro and f["others"] == _plain([v.to_dict() for v in finding.others])
    assert report["summary"] == {"targets": ["reference_runner"], "examples": 12, "findings": 1, "duration_s": 3.5,
                                 "stop_reasons": ["unknown"], "errors": 0, "known": 0, "unsupported": 0}
    assert load_report(path) == report


def test_json_report_of_several_targets_has_one_run_each(tmp_path, finding):
    path = write_json([campaign(finding), clean_campaign()], tmp_path / "nightly.json")
    data = load_report(path)
    assert data["schema"] == 2 and set(data) == {"schema", "provenance", "summary", "runs"}  # as fuzz's
    assert [r["target"] for r in data["runs"]] == ["reference_runner", "lora_kernels"]
    assert [len(r["findings"]) for r in data["runs"]] == [1, 0]
    assert (data["summary"]["examples"], data["summary"]["findings"], data["summary"]["duration_s"]) == (17, 1, 4.5)


def _schema_1(report: dict, flat: bool) -> dict:
    """What fuzzrunner wrote before the one shape: fuzz the run's fields at the top, no summary."""
    old = {"schema": 1, "provenance": report["provenance"]}
    return {**old, **report["runs"][0]} if flat else {**old, "runs": report["runs"]}


@pytest.mark.parametrize("flat", [True, False], ids=["fuzz", "nightly"])
def test_a_schema_1_report_is_read_back_in_the_current_shape_and_renders(tmp_path, finding, flat):
    now = json.loads(json.dumps(report_dict([campaign(finding)])))
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_schema_1(now, flat)))
    old = load_report(path)
    assert old["schema"] == 2 and old["upgraded_from"] == 1 and old["runs"] == now["runs"]
    assert old["summary"] == now["summary"]
    assert finding.violation.message in write_html(old, tmp_path / "old.html").read_text()
    assert ET.parse(write_junit(old, tmp_path / "old.xml")).getroot().find("testsuite").get("failures") == "1"


def _bad(tmp_path, text: str) -> str:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InvalidCase) as e:
        load_report(path)
    message = str(e.value)
    assert "\n" not in message and str(path) in message
    return message


def test_load_report_refuses_corrupt_newer_and_foreign_files(tmp_path, finding):
    good = json.loads(json.dumps(report_dict(campaign(finding))))
    assert "not valid JSON" in _bad(tmp_path, json.dumps(good)[:200])
    assert "newer than this fuzzrunner" in _bad(tmp_path, json.dumps({**good, "schema": 3}))
    assert "'schema'" in _bad(tmp_path, json.dumps({"runs": []}))
    assert "missing field 'runs'" in _bad(tmp_path, json.dumps(good["runs"][0] | {"schema": 2}))  # flat is schema 1 only
    assert "a report must be a JSON object" in _bad(tmp_path, "[1, 2]")
    assert "missing field 'settings'" in _bad(tmp_path, CASE.to_json())  # a case file is not a report
    wrong = json.loads(json.dumps(good))
    wrong["runs"][0]["findings"][0]["minimized"] = "yes"
    assert "finding 0" in _bad(tmp_path, json.dumps(wrong)) and "'minimized'" in _bad(tmp_path, json.dumps(wrong))
    broken_case = json.loads(json.dumps(good))
    broken_case["runs"][0]["findings"][0]["case"]["ops"] = "dummy_run"
    assert "'ops' must be a list" in _bad(tmp_path, json.dumps(broken_case))
    run = good["runs"][0]
    runs = {"schema": 2, "runs": [run, {**run, "timeline": [[1, 2]]}]}
    assert "run 1: timeline point 0" in _bad(tmp_path, json.dumps(runs))
    with pytest.raises(InvalidCase, match="cannot read"):
        load_report(tmp_path / "missing.json")


# -- JUnit -----------------------------------------------------------------------------------

def test_junit_has_a_passing_campaign_case_and_a_failing_case_per_finding(tmp_path, finding):
    path = write_junit([campaign(finding), clean_campaign()], tmp_path / "junit.xml")
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    first, second = root.findall("testsuite")
    assert (first.get("name"), first.get("tests"), first.get("failures")) == ("reference_runner", "2", "1")
    assert (second.get("tests"), second.get("failures")) == ("1", "0")
    ok, bad = first.findall("testcase")
    assert ok.get("name") == "reference_runner: fuzz campaign" and ok.find("failure") is None
    assert "12 examples" in ok.find("system-out").text
    s = finding.signature
    assert bad.get("name") == f"{s.kind} of {s.tensor} in {s.kernel} at {s.site} [{s.tool}] ({s.id})"
    assert ":" not in s.site.replace("::", "")  # the function, not the line: a fix turns this same test green
    assert bad.get("classname") == "fuzzrunner.reference_runner"
    failure = bad.find("failure")
    assert failure.get("message") == finding.violation.message and failure.get("type") == finding.signature.kind
    text = failure.text
    case_text = text[text.index("{"):text.rindex("}") + 1]
    assert Case.from_dict(json.loads(case_text)) == CASE
    assert f"repro: python {finding.repro}" in text and "minimized case" in text
    props = {p.get("name"): p.get("value") for p in first.iter("property")}
    assert props["seed"] == "0" and props["faults"] == "dummy_run_skips_mapping"
    assert second.findall("testcase")[0].get("name") == "lora_kernels: fuzz campaign"


def test_junit_escapes_markup_and_control_characters(tmp_path, finding):
    nasty = 'read <x> & "y" \x1b[31m \u00e9\x00'
    v = Violation("worker", "crash", "k<&>", "SIGSEGV", "", nasty)
    odd = replace(finding, violation=v, signature=v.signature, repro=None)
    root = ET.parse(write_junit(campaign(odd), tmp_path / "junit.xml")).getroot()
    failure = root.find("testsuite").findall("testcase")[1].find("failure")
    assert failure.get("message") == 'read <x> & "y" \\x1b[31m \u00e9\\x00'
    assert "repro: not exported" in failure.text
    assert root.find("testsuite").findall("testcase")[1].get("name") == f"crash in k<&> at SIGSEGV [worker] ({v.signature.id})"


# -- HTML ------------------------------------------------------------------------------------

class Node:
    def __init__(self, tag, attrs):
        self.tag, self.attrs, self.children, self.parts = tag, dict(attrs), [], []

    def all(self, tag):
        for c in self.children:
            if c.tag == tag:
                yield c
            yield from c.all(tag)

    def text(self) -> str:
        return "".join(self.parts) + "".join(c.text() for c in self.children)


class Tree(HTMLParser):
    VOID = {"meta", "br", "wbr", "img", "link", "input", "hr"}

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack, self.errors = [self.root], []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs)
        self.stack[-1].children.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, attrs))

    def handle_endtag(self, tag):
        if self.stack[-1].tag != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1].tag}>")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.stack[-1].parts.append(data)


def test_html_is_one_self_contained_page_with_tables_and_a_plot(tmp_path, finding):
    path = write_html([campaign(finding), clean_campaign()], tmp_path / "report.html")
    text = path.read_text()
    tree = Tree(text)
    assert not tree.errors and tree.stack == [tree.root]
    assert text.startswith("<!DOCTYPE html>") and text.isascii()
    assert list(tree.root.all("style")) and not list(tree.root.all("script")) and not list(tree.root.all("link"))
    for node in _every(tree.root):
        for value in node.attrs.values():
            assert "://" not in (value or ""), (node.tag, value)  # nothing is fetched from anywhere
    summary, findings = list(tree.root.all("table"))[:2]
    rows = [[td.text() for td in tr.all("td")] for tr in next(summary.all("tbody")).all("tr")]
    assert [r[0] for r in rows] == ["reference_runner", "lora_kernels"]
    assert rows[0][1:3] == ["12", "1"] and rows[0][3] == "3.5 s" and rows[0][4:6] == ["1", "0"]
    first = next(next(findings.all("tbody")).all("tr"))
    cells = [td.text() for td in first.all("td")]
    assert cells[0] == finding.signature.kind and cells[1] == (finding.signature.tensor or "\u2014")
    assert cells[2] == finding.signature.kernel and cells[3] == finding.signature.location
    assert cells[4] == "7 examples1.5 s" and cells[5] == "yes"
    [link] = first.all("a")
    assert link.attrs["href"] == os.path.relpath(finding.repro, tmp_path)  # relative: the folder can move
    assert finding.violation.message in findings.text()
    svgs = list(tree.root.all("svg"))
    assert len(svgs) == 2 and list(svgs[0].all("polyline"))
    [marker] = list(svgs[0].all("g"))
    assert list(marker.all("circle"))
    title = list(marker.all("title"))[0].text()
    assert finding.signature.short() in title and "found after 7 examples" in title
    assert not list(svgs[1].all("circle"))  # no findings, no markers
    assert "No findings in 5 examples." in text


def _every(node):
    for c in node.children:
        yield c
        yield from _every(c)


def test_html_escapes_what_a_finding_says_and_renders_a_loaded_report(tmp_path, finding):
    v = Violation("poison", "poison-divergence", "<script>alert(1)</script>", "", "out&", "<b>bold</b>")
    odd = replace(finding, violation=v, signature=v.signature)
    report = load_report(write_json(campaign(odd, timeline=[]), tmp_path / "r.json"))
    text = write_html(report, tmp_path / "r.html").read_text()
    tree = Tree(text)
    assert not list(tree.root.all("script")) and not list(tree.root.all("b"))
    assert "<b>bold</b>" in tree.root.text() and "<script>alert(1)</script>" in tree.root.text()
    assert "No examples ran" in text


# -- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("write", [write_json, write_junit, write_html])
def test_unwritable_paths_are_invalid_arguments_naming_the_path(tmp_path, finding, write):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    for path in (blocker / "report.out", tmp_path):
        with pytest.raises(InvalidArgument) as e:
            write(campaign(finding), path)
        assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert blocker.read_text() == "not a directory" and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


# -- the published schema ------------------------------------------------------------------------

def test_every_written_report_validates_against_the_published_schema(tmp_path, finding):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed: case files and reports go unchecked here")
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    flaky = replace(finding, flaky=True, triage={"device": "cpu", "status": "not-reproduced"})
    known = replace(finding, triage={"known": {"id": "K1", "title": "t", "upstream": "x#1", "status": "open"}})
    both = replace(finding, triage={"device": "cpu", "status": "not-reproduced", "known": {"id": "K1"}})
    for results in (campaign(finding, flaky=[flaky], stop_reason=StopReason.BUDGET), [campaign(finding), clean_campaign()],
                    campaign(known, flaky=[both])):
        data = json.loads(write_json(results, tmp_path / "r.json").read_text())
        jsonschema.validate(data, schema)
        assert data["provenance"]["versions"]["fuzzrunner"] and data["provenance"]["written_at"].endswith("Z")
    broken = json.loads(write_json(campaign(finding), tmp_path / "r.json").read_text())
    del broken["runs"][0]["findings"][0]["signature"]["site"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    nameless = json.loads(write_json(campaign(replace(finding, triage={"known": {"title": "t"}})),
                                     tmp_path / "r.json").read_text())
    with pytest.raises(jsonschema.ValidationError):  # a label names its bug
        jsonschema.validate(nameless, schema)


def test_a_known_bug_label_reads_in_the_summary_the_html_and_junit(tmp_path, finding):
    import io

    from fuzzrunner.cli.render import _summary
    label = {"id": "K1", "title": "dummy runs read no mapping", "upstream": "example/repo#1", "status": "fixed in 2.0"}
    r = campaign(replace(finding, triage={"known": label}))
    out = io.StringIO()
    _summary(r, out)
    line = "known: K1: dummy runs read no mapping (example/repo#1; fixed in 2.0)"
    assert "1 finding, all known (1 known bug: K1)" in out.getvalue() and line in out.getvalue(), out.getvalue()
    assert line in write_html(r, tmp_path / "r.html").read_text()
    assert line in write_junit(r, tmp_path / "j.xml").read_text()
    assert json.loads(write_json(r, tmp_path / "r.json").read_text())["summary"]["known"] == 1
    # a GPU finding's CPU triage and its label, on one line
    both = replace(finding, triage={"device": "cpu", "status": "not-reproduced", "known": label})
    out = io.StringIO()
    _summary(campaign(both), out)
    assert f"{line}; CPU triage: not reproduced on the CPU" in out.getvalue(), out.getvalue()


# -- trend against a previous report -------------------------------------------------------------

def _moved(finding, *, line_shift=0, site=None, tensor=None) -> Finding:
    """The same finding after an edit: its line shifted, or moved to another function/tensor."""
    v = finding.violation
    path, _, line = v.location.rpartition(":")
    moved = replace(v, location=f"{path}:{int(line) + line_shift}", site=site or v.site,
                    tensor=tensor or v.tensor)
    return replace(finding, violation=moved, signature=moved.signature)


def _trend(tmp_path, before: list, after: list, clean_before=True):
    prev_runs = [campaign(finding, findings=before)] + ([clean_campaign()] if clean_before else [])
    prev = load_report(write_json(prev_runs, tmp_path / "prev.json"))
    return build_report([campaign(finding, findings=after)], previous=prev, previous_source="prev.json"), prev


def test_trend_marks_findings_by_stable_id_so_a_line_shift_is_still_open(tmp_path, finding):
    shifted = _moved(finding, line_shift=7)
    gone = _moved(finding, tensor="lora_a_stacked")  # a bug the previous report had, fixed since
    fresh = _moved(finding, site="fuzzrunner/runner/punica.py::elsewhere")  # same line, other function: new
    assert shifted.violation.location != finding.violation.location and shifted.id == finding.id
    assert len({finding.id, gone.id, fresh.id}) == 3
    report, prev = _trend(tmp_path, [finding, gone], [shifted, fresh])
    [run] = report["runs"]
    assert [(f["id"], f["trend"]) for f in run["findings"]] == [(finding.id, "still-open"), (fresh.id, "new")]
    assert [(f["id"], f["trend"]) for f in run["fixed"]] == [(gone.id, "fixed")]
    assert run["fixed"][0]["message"] == gone.violation.message  # listed in full though not found this time
    assert report["summary"]["trend"] == {"new": 1, "still_open": 1, "fixed": 1}
    assert report["previous"] == {"path": "prev.json", "written_at": prev["provenance"]["written_at"],
                                  "git": prev["provenance"]["git"], "targets": ["lora_kernels", "reference_runner"]}
    assert trend_text(run).splitlines() == [
        "reference_runner: against the previous report: 1 new, 1 still open, 1 fixed",
        f"  new: {fresh.signature.kind} of {fresh.signature.tensor} in {fresh.signature.kernel} at "
        f"{fresh.signature.site} ({fresh.id})",
        f"  fixed: {gone.signature.kind} of lora_a_stacked in {gone.signature.kernel} at {gone.signature.site} "
        f"({gone.id})"]


def test_a_fixed_finding_of_an_older_report_has_its_preceding_cases_counted_too(tmp_path, finding):
    """A previous report written before the cases were counted carries them; its fixed findings are copied into the
    new report, counted like the run's own."""
    gone = _moved(finding, tensor="lora_a_stacked")
    prev = json.loads(write_json([campaign(finding, findings=[gone])], tmp_path / "prev.json").read_text())
    earlier = [CASE.to_dict()] * 3
    prev["runs"][0]["findings"][0]["preceding"] = {"of": CASE.to_dict(), "cases": earlier, "dropped": 0}  # as written
    (tmp_path / "prev.json").write_text(json.dumps(prev))
    report = build_report([campaign(finding, findings=[])], previous=load_report(tmp_path / "prev.json"),
                          previous_source="prev.json")
    [fixed] = report["runs"][0]["fixed"]
    assert fixed["preceding"] == {"of": CASE.to_dict(), "cases": [], "dropped": 3, "in_finding_file": 3}


def test_trend_matches_a_finding_whose_target_file_was_renamed_without_a_corpus_in_between(tmp_path, finding):
    """Issue 47, item 5: a renamed target file made one bug "1 new, 1 fixed" (``torch.empty@FILE:LINE``
    named the file). Where no corpus replay filed it under its new id (a fresh corpus, reports from two
    machines), trend matches it by its access: still open, the old id an alias; a read of the same
    access from other functions altogether stays new, and the old one fixed."""
    def auto(file, reader="Runner.dummy_run", made=10, maker="Runner.__init__"):
        v = Violation("shadow", "uninitialized-read", "aten.index.Tensor", f"{file}:18", f"torch.empty@{file}:{made}",
                      "read never written", {"sites": {f"{file}:{made}": f"{file}::{maker}"}}, f"{file}::{reader}")
        return replace(finding, violation=v, signature=v.signature, others=[])
    before, renamed = auto("t47_trend.py"), auto("t47_trend_renamed.py")
    report, _ = _trend(tmp_path, [before], [renamed])
    [run] = report["runs"]
    assert [(f["id"], f["trend"], f["aliases"]) for f in run["findings"]] == [(renamed.id, "still-open", [before.id])]
    assert run["fixed"] == [] and report["summary"]["trend"] == {"new": 0, "still_open": 1, "fixed": 0}
    unrelated = auto("t47_trend_renamed.py", reader="Runner.warm", made=30, maker="Runner.alloc")
    [run] = _trend(tmp_path, [before], [unrelated])[0]["runs"]
    assert [f["trend"] for f in run["findings"]] == ["new"] and [f["id"] for f in run["fixed"]] == [before.id]


def test_a_target_missing_from_either_report_is_not_called_fixed(tmp_path, finding):
    report, _ = _trend(tmp_path, [], [finding])
    assert [f["trend"] for f in report["runs"][0]["findings"]] == ["new"] and report["runs"][0]["fixed"] == []
    prev = load_report(write_json([campaign(finding), clean_campaign()], tmp_path / "p.json"))
    only_kernels = build_report([clean_campaign()], previous=prev)
    assert only_kernels["runs"][0]["fixed"] == []  # reference_runner did not run: its finding is not "fixed"
    assert only_kernels["summary"]["trend"] == {"new": 0, "still_open": 0, "fixed": 0}


def test_junit_turns_a_fixed_finding_into_the_same_test_passing(tmp_path, finding):
    gone = _moved(finding, tensor="lora_a_stacked")
    prev_xml = ET.parse(write_junit(campaign(finding, findings=[finding, gone]), tmp_path / "prev.xml")).getroot()
    failing = {tc.get("name") for tc in prev_xml.iter("testcase") if tc.find("failure") is not None}
    report, _ = _trend(tmp_path, [finding, gone], [finding])
    root = ET.parse(write_junit(report, tmp_path / "junit.xml")).getroot()
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("3", "1")
    cases = {tc.get("name"): tc for tc in suite.iter("testcase")}
    assert failing <= set(cases)  # both tests of the previous run are there, by the same name
    [passing] = [n for n in failing if cases[n].find("failure") is None]
    assert gone.id in passing and "fixed" in cases[passing].find("system-out").text
    [still] = [n for n in failing if cases[n].find("failure") is not None]
    assert "still open" in cases[still].find("failure").text


def test_html_shows_the_trend_table_and_the_findings_over_time(tmp_path, finding):
    gone = _moved(finding, tensor="lora_a_stacked")
    first = write_json(campaign(finding, findings=[finding, gone]), tmp_path / "1.json")
    second = write_json(build_report(campaign(finding), previous=load_report(first)), tmp_path / "2.json")
    third = build_report(campaign(finding, findings=[]), previous=load_report(second))
    assert [sum(r["findings"] for r in h["runs"].values()) for h in third["history"]] == [2, 1]
    tree = Tree(write_html(third, tmp_path / "r.html").read_text())
    assert not tree.errors
    [table] = [t for t in tree.root.all("table") if t.attrs.get("class") == "trend-table"]
    rows = [[td.text() for td in tr.all("td")] for tr in next(table.all("tbody")).all("tr")]
    assert [r[0] for r in rows] == ["fixed"] and rows[0][3] == finding.id
    [history] = [s for s in tree.root.all("svg") if s.attrs.get("class") == "history"]
    assert len(list(history.all("circle"))) == 3  # two earlier reports and this one
    assert "this report" in history.text()
    assert "0 new, 0 still open, 1 fixed" in tree.root.text()


def test_history_is_kept_across_reports_and_capped(tmp_path, finding, monkeypatch):
    import fuzzrunner.report.trend as trend
    monkeypatch.setattr(trend, "HISTORY", 3)
    report = report_dict(campaign(finding, examples=1))
    for n in range(2, 7):
        report = build_report(campaign(finding, examples=n), previous=report)
    assert [h["runs"]["reference_runner"]["examples"] for h in report["history"]] == [3, 4, 5]


def test_reports_with_a_trend_validate_against_the_published_schema(tmp_path, finding):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed: case files and reports go unchecked here")
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json").read_text())
    report, _ = _trend(tmp_path, [finding, _moved(finding, tensor="x")], [finding])
    data = json.loads(write_json(report, tmp_path / "t.json").read_text())
    jsonschema.validate(data, schema)
    data["runs"][0]["findings"][0]["trend"] = "reopened"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


def test_a_repro_path_relative_to_the_working_directory_links_from_wherever_the_html_is(tmp_path, monkeypatch):
    from fuzzrunner.report.html import _href
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out" / "deep").mkdir(parents=True)
    assert _href("corpus/repro/t/a.py", tmp_path / "out" / "deep") == "../../corpus/repro/t/a.py"
    assert _href("corpus/repro/t/a.py", tmp_path) == "corpus/repro/t/a.py"


def test_runs_with_other_planted_faults_are_compared_with_a_warning_that_says_so(tmp_path, finding):
    prev = load_report(write_json([campaign(finding)], tmp_path / "prev.json"))  # dummy_run_skips_mapping on
    fault_off = CampaignResult("reference_runner", profile("ci"), 0, (), examples=5, duration_s=1.0)
    [run] = build_report([fault_off], previous=prev)["runs"]
    assert [f["id"] for f in run["fixed"]] == [finding.id]  # turning the fault off rehearses the fix
    [note] = run["warnings"]
    assert note == ("the previous report's run of reference_runner had planted faults [dummy_run_skips_mapping], "
                    "this one [none]: fixed and new follow the faults switched")
    assert trend_text(run).splitlines()[-1] == f"  note: {note}"
    same = build_report([campaign(finding)], previous=prev)["runs"][0]
    assert not any("planted faults" in w for w in same["warnings"])


def test_a_json_error_is_said_once_with_its_place():
    from fuzzrunner.case import parse_json
    with pytest.raises(InvalidCase) as e:
        parse_json('{"a": "x\ty"}', source="f.json")
    assert str(e.value) == "f.json: not valid JSON (Invalid control character at line 1 column 9)."


def test_the_recorded_command_runs_again(monkeypatch):
    import sys

    from fuzzrunner.report.json_report import _command
    monkeypatch.setattr(sys, "argv", ["/tmp/x/fuzzrunner/__main__.py", "fuzz", "--target", "my runner.py:T"])
    assert _command() == "python -m fuzzrunner fuzz --target 'my runner.py:T'"


# -- what a run could not do (issue 22) ------------------------------------------------------------

def _gpu_campaign(finding) -> CampaignResult:
    r = campaign(finding, generated=12, known_crash_skips=0)
    r.count_known_crash_skip("abc123", "uninitialized-read of slots in aten.index.Tensor at runner.py:9 [shadow]", 8)
    r.count_limitation("def456", "Triton's interpreter failed in mm_k at kernel_utils.py:40 (Triton 3.6.0, numpy 2.5.0)", 3)
    triaged = replace(finding, triage={"device": "cpu", "status": "could-not-run",
                                       "reason": "a device error (RuntimeError at r.py:3: No CUDA GPUs are available)"})
    r.findings = [triaged]
    return r


def test_skips_per_root_cause_tool_limitations_and_triage_reach_every_report(tmp_path, finding):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed: case files and reports go unchecked here")
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json").read_text())
    r = _gpu_campaign(finding)
    data = json.loads(write_json(r, tmp_path / "r.json").read_text())
    jsonschema.validate(data, schema)
    run = data["runs"][0]
    assert run["known_crash_causes"] == [{"id": "abc123", "short": r.known_crash_causes["abc123"]["short"],
                                          "count": 8}]
    assert run["tool_limitations"][0]["count"] == 3
    page = write_html(r, tmp_path / "r.html").read_text()
    assert "MOST CASES WERE NOT RUN ON THE GPU: 8 of 12" in page and "8 x uninitialized-read of slots" in page
    assert "tool limitation (3 case(s))" in page
    assert "CPU triage: could not run on the CPU: a device error" in page
    junit = write_junit(r, tmp_path / "j.xml").read_text()
    assert "CPU triage: could not run on the CPU: a device error" in junit


def test_the_text_summary_says_plainly_when_most_cases_were_skipped(finding):
    import io

    from fuzzrunner.cli.render import _summary
    out = io.StringIO()
    _summary(_gpu_campaign(finding), out)
    text = out.getvalue()
    assert "MOST CASES WERE NOT RUN ON THE GPU: 8 of 12 generated" in text
    assert "8 x uninitialized-read of slots" in text and "tool limitation (3 case(s))" in text


def test_provenance_records_the_fuzzrunner_environment(monkeypatch):
    """Which shadow mode ran (``FUZZRUNNER_SHADOW``) and the other FUZZRUNNER_* switches are in every
    report's provenance; other variables are not."""
    from fuzzrunner.report.json_report import provenance
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    monkeypatch.setenv("SOME_SECRET_TOKEN", "x")
    env = provenance()["environment"]
    assert env["FUZZRUNNER_SHADOW"] == "device" and "SOME_SECRET_TOKEN" not in env


def test_provenance_lists_a_placeholder_module_as_one_never_as_an_installed_version(monkeypatch):
    """An SGLang run's provenance said ``vllm 0.0.0``: the ``vllm`` that sglang_engine's import finder serves (a module
    of placeholders, no files) read as an installed vLLM (new-user trial). A stand-in is named as one, with its
    finder; a real package keeps its version."""
    import importlib.machinery
    import importlib.util
    import types

    from fuzzrunner.targets.sglang_engine.boot import LazyStubFinder

    from fuzzrunner.report.json_report import provenance
    finder = LazyStubFinder()
    monkeypatch.setitem(sys.modules, "vllm", importlib.util.module_from_spec(
        importlib.machinery.ModuleSpec("vllm", finder, is_package=True)))  # as the import system makes it)
    bare = types.ModuleType("triton")  # any stand-in without files: a hand-made one, no finder
    bare.__version__ = "9.9.9"
    monkeypatch.setitem(sys.modules, "triton", bare)
    p = provenance()
    assert "vllm" not in p["versions"] and "triton" not in p["versions"]
    assert p["placeholders"]["vllm"].startswith("a placeholder module served by "
                                               "fuzzrunner.targets.sglang_engine.boot.LazyStubFinder")
    assert "not installed" in p["placeholders"]["triton"]
    assert p["versions"]["hypothesis"] == sys.modules["hypothesis"].__version__  # a real one is listed as before


def test_a_seeds_bug_reads_as_reproduced_from_its_seed_and_each_known_bug_counts_once(tmp_path, finding):
    """A new user's trial of sglang_engine: the known bugs its seeds replay read "found after 12 examples" (as if the
    search had found them), and G1, shown as two findings, was counted twice ("5 known: SG1, G3, G2, G1, G1";
    ``summary.known`` 5). Now a seed's bug reads "reproduced from its seed NAME", a generated case's "found from
    scratch after N examples", both where both; each known bug is counted once, with how it showed."""
    import io

    from fuzzrunner.cli.render import _summary
    from fuzzrunner.finding import merge, render
    g1 = {"known": {"id": "G1", "title": "lm_head rows"}}
    seed = replace(finding, found_by={"seed": "/t/seeds/lm_head_g1.json"}, triage=g1, first_found_after_examples=12)
    other = Finding(finding.signature, CASE, finding.violation, [], first_found_after_examples=30,
                    found_by={"search": 17}, triage=g1)
    other = replace(other, signature=replace(finding.signature, tensor="base-rows"))  # another finding, also G1
    assert "reproduced from its seed lm_head_g1.json (1.5 s)" in render(seed) and "after 12" not in render(seed)
    assert "found from scratch after 17 examples" in render(other)
    r = campaign(seed, findings=[seed, other])
    out = io.StringIO()
    _summary(r, out)
    assert "2 findings, all known (1 known bug: G1 (seed, search))" in out.getvalue(), out.getvalue()
    assert json.loads(write_json(r, tmp_path / "r.json").read_text())["summary"]["known"] == 1
    # one bug seen both ways (merged sightings): both said, the search's earliest count kept
    both = replace(seed, found_by=dict(seed.found_by))
    merge(both, replace(seed, found_by={"search": 40}))
    merge(both, replace(seed, found_by={"search": 9}))
    assert both.found_by == {"seed": "/t/seeds/lm_head_g1.json", "search": 9}
    assert "reproduced from its seed lm_head_g1.json and found from scratch after 9 examples" in render(both)
    # it travels (report, finding file, a shard's event): a hand-edited source of the wrong type is left out
    back = Finding.from_dict({**both.to_dict(), "found_by": {"seed": 3, "search": 2, "corpus": "/c/x.json"}})
    assert back.found_by == {"corpus": "/c/x.json", "search": 2}
    assert Finding.from_dict(both.to_dict()).found_by == both.found_by
    # a file from before sources were recorded reads as it did
    assert "found after 7 examples (1.5 s)" in render(finding)
    # two GPU findings the CPU triage names as one bug: the kept one says how each showed
    from fuzzrunner.engine.triage import merge_by_triage
    same = {"status": "reproduced", "id": "abc"}
    a, b = replace(seed, triage=same, found_by={"seed": "s.json"}), replace(other, triage=same, found_by={"search": 4})
    assert merge_by_triage([a, b])[0] == [a] and a.found_by == {"seed": "s.json", "search": 4}


def test_the_report_says_which_path_ran_and_what_the_target_drives_on_this_release(tmp_path, finding):
    """A report of an sglang_engine campaign did not say whether SGLang's scheduler path ran, in the text nor the JSON
    (new-user trial). The target's ``summary_features`` (its "path") get a line of their own, counted over the cases
    that ran (declared values no case took at 0), and its ``details`` (what it drives on this release: "scheduler:
    SGLang's get_next_batch_to_run ...") are printed under the code under test and kept in the run's JSON."""
    import io

    from fuzzrunner.cli.render import _summary
    from fuzzrunner.coverage import Coverage
    jsonschema = pytest.importorskip("jsonschema")
    cov = Coverage(("path=scheduler", "path=tokenizer-manager", "op=step"), shown=("path",))
    for names in (("op=step", "path=scheduler"),) * 3 + (("op=step",),):
        cov.add(names)
    details = ["scheduler: SGLang's get_next_batch_to_run / PrefillAdder", "MoE LoRA: not driven (no Mixtral)"]
    r = campaign(finding, coverage=cov, target_details=details,
                 code_under_test={"engine": "sglang", "release": "0.5.23", "tree": "/t"})
    out = io.StringIO()
    _summary(r, out)
    text = out.getvalue()
    assert "  path: scheduler in 3, tokenizer-manager in 0 of 4 valid case(s)\n" in text, text
    assert "  code under test: sglang 0.5.23 (/t)\n    scheduler: SGLang's get_next_batch_to_run" in text, text
    data = json.loads(write_json(r, tmp_path / "r.json").read_text())
    run = data["runs"][0]
    assert run["target_details"] == details and run["coverage"]["shown"] == ["path"]
    jsonschema.validate(data, json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json")
                                         .read_text()))
    # it travels: a shard's result to its campaign, shards merged
    again = Coverage.from_dict(cov.to_dict())
    again.merge(Coverage(shown=("backend",)))
    assert again.shown == ("path", "backend") and again.features["path=scheduler"] == 3
    # a target that shows nothing prints no such line
    out = io.StringIO()
    _summary(campaign(finding), out)
    assert "\n  path:" not in out.getvalue()


def test_a_campaign_result_carries_its_loaded_targets_details(tmp_path):
    from fuzzrunner.engine import events
    from fuzzrunner.engine.campaign import _finish, plan_campaign
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.settings import Settings
    (tmp_path / "detailed_target.py").write_text(
        "from hypothesis import strategies as st\nfrom fuzzrunner.target import Target\n"
        "TARGET = Target('detailed', 'd', lambda faults=(), *, max_ops=5: st.nothing(), lambda case, ctx: None,\n"
        "                details=('scheduler: the real one', 'MoE: not driven'))\n")
    plan = plan_campaign(f"{tmp_path / 'detailed_target.py'}:TARGET", Settings(max_examples=1, device="cpu"))
    assert plan.details == ("scheduler: the real one", "MoE: not driven")
    result = CampaignResult("detailed", plan.settings, plan.seed, ())
    _finish(result, plan, events.Listener(None), None)
    assert result.target_details == ["scheduler: the real one", "MoE: not driven"]


@pytest.mark.parametrize("labels, says", [
    (["K0", "K1", "K1"], "3 findings, all known (2 known bugs: K0 (search), K1 (search))"),
    (["K0", "K1", "K1", None], "4 findings, 1 new or untriaged (2 known bugs: K0 (search), K1 (search))"),
    ([None, "K0", None, None], "4 findings, 3 new or untriaged (1 known bug: K0 (search))"),
    ([None, None], "2 findings\n"),
])
def test_the_summary_says_how_many_findings_no_known_bug_names(finding, labels, says):
    """Second new-user trial: "11 findings (9 known bugs: ...)" left it to the reader whether two findings were new
    (all 11 were known: two bugs showed as two findings each). The summary says "all known" or how many findings
    no known bug names; a campaign with no label at all reads as before."""
    import io

    from fuzzrunner.cli.render import _summary
    findings = [replace(finding, signature=replace(finding.signature, tensor=f"t{i}"), found_by={"search": 1 + i},
                        triage={"known": {"id": k, "title": "t"}} if k else None) for i, k in enumerate(labels)]
    out = io.StringIO()
    _summary(campaign(findings[0], findings=findings), out)
    assert says in out.getvalue(), out.getvalue()
