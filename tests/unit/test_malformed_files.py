"""Malformed corpus, finding and report files (issue 47, item 13): each is refused with what is
actually wrong, and a corpus moves it to quarantine/; only a genuine integer schema newer than this
fuzzrunner's says "upgrade" and stays where it is (a teammate's newer file).

Before: a string schema ("2") and a finding without its case were told to upgrade fuzzrunner and
left in the corpus forever; a wrong-typed violation field loaded, then broke the id or a report.
"""

import copy
import json

import pytest

from fuzzrunner.case import Case
from fuzzrunner.corpus import Corpus, load_any
from fuzzrunner.errors import InvalidCase, NewerSchema
from fuzzrunner.finding import Finding
from fuzzrunner.report import load_report, write_json
from fuzzrunner.violation import Violation

CASE = Case("t", {}, [{"op": "x"}])
GOOD = Finding.of(Violation("shadow", "uninitialized-read", "k", "a.py:1", "t", "m", {}, "a.py::f"), [],
                  CASE).to_dict()


def _finding(**changes) -> dict:
    d = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is None:
            d.pop(key)
        else:
            d[key] = value
    return d


def _violation(**changes) -> dict:
    return _finding(violation={**GOOD["violation"], **changes})


MALFORMED = [  # (file content, what the reason must say)
    (_finding(schema="2"), "'schema' must be an integer, got str '2'"),
    (_finding(schema=2.0), "'schema' must be an integer, got float 2.0"),
    (_finding(schema=True), "'schema' must be an integer, got bool true"),
    (_finding(schema=0), "'schema' must be 1 or more, got 0"),
    (_finding(case=None), "a finding without its 'case'"),
    ({"schema": 2, "signature": {}, "violation": {}}, "a finding without its 'case'"),
    (_finding(case="x"), "field 'case' must be an object, got str 'x'"),
    (_finding(violation=[]), "field 'violation' must be an object, got list []"),
    (_violation(tool=5), "violation: field 'tool' must be a string, got int 5"),
    (_violation(site=5), "violation: field 'site' must be a string or null, got int 5"),
    (_violation(message=["m"]), "violation: field 'message' must be a string or null"),
    (_violation(details=[1]), "violation: field 'details' must be an object"),
    (_finding(others=[5]), "others[0] must be an object, got int"),
    (_finding(others=[{"kind": "crash"}]), "others[0]: missing field 'tool'"),
    (_finding(minimized="no"), "field 'minimized' must be true or false, got str 'no'"),
    (_finding(first_found_after_examples="7"), "field 'first_found_after_examples' must be an integer"),
    (_finding(found_at=[1]), "field 'found_at' must be a number, got list [1]"),
    (_finding(repro=5), "field 'repro' must be a string or null, got int 5"),
    (_finding(aliases="abc"), "field 'aliases' must be a list, got str 'abc'"),
    ({**CASE.to_dict(), "schema": "1"}, "'schema' must be an integer, got str '1'"),
    ({**CASE.to_dict(), "schema": False}, "'schema' must be an integer, got bool false"),
    ({k: v for k, v in CASE.to_dict().items() if k != "schema"}, "missing field 'schema'"),
]
NEWER = [_finding(schema=99), {**CASE.to_dict(), "schema": 7}, _finding(case={**CASE.to_dict(), "schema": 7})]


@pytest.mark.parametrize("content, reason", MALFORMED)
def test_a_malformed_file_is_quarantined_with_what_is_wrong_never_told_to_upgrade(tmp_path, content, reason):
    path = tmp_path / "findings" / "t" / "bad.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(content))
    with pytest.raises(InvalidCase) as e:
        load_any(path)
    assert not isinstance(e.value, NewerSchema) and reason in str(e.value) and "upgrade" not in str(e.value)
    seen = []
    assert Corpus(tmp_path).entries("t", on_bad=lambda *a: seen.append(a)) == []
    [(where, moved, error)] = seen
    assert moved == tmp_path / "quarantine" / "findings" / "t" / "bad.json" and moved.exists() and not path.exists()
    assert reason in str(error)


@pytest.mark.parametrize("content", NEWER)
def test_only_a_genuinely_newer_schema_says_upgrade_and_stays_in_place(tmp_path, content):
    path = tmp_path / "findings" / "t" / "newer.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(content))
    seen = []
    assert Corpus(tmp_path).entries("t", on_bad=lambda *a: seen.append(a)) == []
    [(where, moved, error)] = seen
    assert moved is None and path.exists() and isinstance(error, NewerSchema) and "upgrade fuzzrunner" in str(error)


def test_a_good_finding_and_null_texts_of_older_files_still_load(tmp_path):
    path = tmp_path / "f.json"
    path.write_text(json.dumps(_violation(kernel=None, site=None)))
    assert Finding.load(path).violation.kernel == ""
    path.write_text(json.dumps(_finding(schema=None)))  # the first findings had no schema
    assert Finding.load(path).id == GOOD["id"]


@pytest.mark.parametrize("change, reason", [
    (lambda r: r.update(schema="2"), "'schema' must be an integer, got str '2'"),
    (lambda r: r["runs"][0].update(examples="12"), "run 0: field 'examples' must be an integer, got str '12'"),
    (lambda r: r["runs"][0]["findings"][0].update(violation="x"), "finding 0: violation must be an object, got str"),
    (lambda r: r["runs"][0]["findings"][0]["violation"].update(tensor=3),
     "finding 0: violation: field 'tensor' must be a string or null, got int 3"),
])
def test_a_malformed_report_is_refused_with_what_is_wrong(tmp_path, change, reason):
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.settings import profile
    f = Finding.from_dict(GOOD)
    path = write_json(CampaignResult("t", profile("ci"), 0, (), examples=1, findings=[f]), tmp_path / "r.json")
    report = json.loads(path.read_text())
    change(report)
    path.write_text(json.dumps(report))
    with pytest.raises(InvalidCase) as e:
        load_report(path)
    assert reason in str(e.value) and "upgrade" not in str(e.value)


def test_the_warning_says_malformed_with_the_parse_error_and_unreadable_only_for_a_file_it_cannot_read(tmp_path,
                                                                                                   monkeypatch):
    """New-user trial: a truncated case file was warned about as an "unreadable corpus file", the word for a file one
    has no permission to read. Each kind of bad file now says what it is, the file once, the error in one line."""
    import errno
    import os

    from fuzzrunner.engine.corpus_replay import bad_corpus_file
    from fuzzrunner.errors import UnreadableFile
    d = tmp_path / "cases" / "t"
    d.mkdir(parents=True)
    (d / "truncated.json").write_text('{"schema": 1, "tar')
    (d / "secret.json").write_text(CASE.to_json())
    (d / "newer.json").write_text(json.dumps({**CASE.to_dict(), "schema": 7}))
    real_open = os.open

    def no_permission(path, *args, **kwargs):
        if str(path).endswith("secret.json"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", no_permission)  # tests run as root, which chmod 000 does not stop
    seen = {}
    assert Corpus(tmp_path).entries("t", on_bad=lambda path, moved, e: seen.update({path.name: (path, moved, e)})) == []
    monkeypatch.undo()
    lines = {name: bad_corpus_file(*args) for name, args in seen.items()}
    quarantine = tmp_path / "quarantine" / "cases" / "t"
    assert isinstance(seen["secret.json"][2], UnreadableFile)
    assert lines["secret.json"] == (f"unreadable corpus file {d / 'secret.json'} (moved to {quarantine / 'secret.json'}): "
                                    f"cannot read (Permission denied).")
    assert lines["truncated.json"] == (f"malformed corpus file {d / 'truncated.json'} (moved to "
                                       f"{quarantine / 'truncated.json'}): not valid JSON (Unterminated string "
                                       f"starting at line 1 column 15).")
    assert lines["newer.json"].startswith(f"corpus file {d / 'newer.json'} not read (left in place): case schema 7 "
                                          f"is newer than this fuzzrunner")
    assert all("\n" not in line and line.count(str(d)) == 1 for line in lines.values()), lines
    refused = InvalidCase(f"{d / 'x.json'}: op 0: num_tokens 0 must be at least 1")  # a case its target refuses
    assert bad_corpus_file(d / "x.json", None, refused, ran=True) == (
        f"invalid corpus case {d / 'x.json'} (could not be moved): op 0: num_tokens 0 must be at least 1")
