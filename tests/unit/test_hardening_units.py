"""Hardening (issue 23), the input and front-end half, one behaviour per test, no campaign.

Numeric settings are finite and in range; undecodable path bytes never raise; two report flags
never name one file; the command line survives a reader that has gone and cuts echoed values; a
finding says what the live line said; Hypothesis' own files never land in the working directory.
"""

import io
import math
import os
import types

import pytest

from fuzzrunner import cli
from fuzzrunner.case import Case
from fuzzrunner.cli import render as cli_render
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.finding import Finding, merge, render
from fuzzrunner.safe_write import check_distinct_files
from fuzzrunner.settings import PROFILES, Settings
from fuzzrunner.signature import Signature
from fuzzrunner.violation import Violation

# -- numeric settings ------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("case_timeout_s", math.nan), ("case_timeout_s", math.inf), ("case_timeout_s", -math.inf),
    ("case_timeout_s", 0), ("case_timeout_s", -1), ("case_timeout_s", 1e300), ("case_timeout_s", True),
    ("case_timeout_s", "5"), ("budget_s", math.nan), ("budget_s", math.inf), ("budget_s", 0), ("budget_s", -1.5),
    ("budget_s", 1e12), ("budget_s", False), ("max_examples", 0), ("max_examples", 2.5), ("workers", 0),
    ("max_ops", 65), ("seed", 1.5)])
def test_every_numeric_setting_is_finite_and_in_range_with_a_one_line_message(field, value):
    with pytest.raises(InvalidArgument) as e:
        Settings(**{field: value})
    message = str(e.value)
    assert message.startswith(f"{field}={value!r}") and "must be" in message and "\n" not in message
    with pytest.raises(InvalidArgument):  # overriding a profile goes through the same validators
        PROFILES["dev"].override(**{field: value})


@pytest.mark.parametrize("field, value", [("case_timeout_s", 0.5), ("case_timeout_s", 3600), ("budget_s", 1),
                                          ("budget_s", None), ("budget_s", 8 * 3600.0)])
def test_sane_values_still_pass(field, value):
    assert getattr(Settings(**{field: value}), field) == value


def test_the_json_report_of_a_validated_run_holds_no_bare_nan():
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.report import report_dict
    from fuzzrunner.report.json_report import json_text
    r = CampaignResult("ok", PROFILES["dev"].override(budget_s=30, case_timeout_s=5), 1, (), examples=1)
    text = json_text(r)
    assert "NaN" not in text and "Infinity" not in text
    assert report_dict(r)["runs"][0]["settings"]["budget_s"] == 30


# -- undecodable path bytes ------------------------------------------------------------------------

BAD = os.fsdecode(b"/tmp/dir\xff/t.py")  # what Python makes of a non-UTF-8 folder name


def test_a_signature_with_undecodable_path_bytes_has_a_stable_id():
    sig = Signature("shadow", "uninitialized-read", "k", f"{BAD}:3", "ids", f"{BAD}::run")
    assert sig.id == Signature("shadow", "stale-read", "k", f"{BAD}:9", "ids", f"{BAD}::run").id
    assert len(sig.id) == 12


def test_utf8_ids_are_unchanged_by_the_surrogate_handling():
    import hashlib
    sig = Signature("shadow", "uninitialized-read", "k", "a.py:1", "ids", "a.py::f")
    key = "|".join(("shadow", "unwritten-read", "k", "a.py::f", "ids"))
    assert sig.id == hashlib.sha1(key.encode()).hexdigest()[:12]


def test_the_html_links_a_non_utf8_folder_by_its_bytes():
    from fuzzrunner.report.html import _href
    assert _href(BAD.replace("t.py", "repro/x.py"), None) == "/tmp/dir%FF/repro/x.py"


def test_the_output_streams_write_undecodable_bytes_escaped_instead_of_raising():
    raw = io.BytesIO()
    strict = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
    stream = cli_render._SafeStream(strict)
    stream.write(f"repro: python {BAD}\n")
    stream.flush()
    assert raw.getvalue() == b"repro: python /tmp/dir\\udcff/t.py\n"


def test_a_memory_finding_with_undecodable_bytes_in_its_tensor_name_has_an_access_id_and_a_file(tmp_path):
    """Issue 47, item 11: an automatically tracked buffer of a target file in a non-UTF-8 folder is named
    ``torch.empty@t\\udcfe.py:10``; its access id raised UnicodeEncodeError and the finding was lost."""
    from fuzzrunner.corpus import Corpus
    bad = os.fsdecode(b"t\xfe.py")
    v = Violation("shadow", "uninitialized-read", "aten.add.Tensor", f"{bad}:18", f"torch.empty@{bad}:10", "m",
                  {}, f"{bad}::Runner.step")
    f = Finding.of(v, [], Case("t", {}, [{"op": "step"}]))
    assert len(v.signature.access_id) == 12 and f.to_dict()["access_id"] == v.signature.access_id
    assert Finding.load(Corpus(tmp_path).save_finding("t", f)).id == f.id
    # its line is no part of the id, as for any other file: a line shift is not a new bug
    moved = Violation("shadow", "uninitialized-read", "aten.add.Tensor", f"{bad}:18", f"torch.empty@{bad}:14", "m",
                      {}, f"{bad}::Runner.step")
    assert moved.signature.id == v.signature.id


def test_reports_show_an_undecodable_path_byte_as_that_byte():
    from fuzzrunner.report.junit import xml_safe
    assert xml_safe(os.fsdecode(b"dir\xff/t.py") + "\x1b") == "dir\\xff/t.py\\x1b"  # not \\xdcff


def test_workers_and_the_example_database_take_undecodable_bytes(monkeypatch, tmp_path):
    """A TMPDIR in a non-UTF-8 folder (the hub's socket path was encoded as UTF-8), a target named after
    a file with one (the example database's key)."""
    import shutil
    import tempfile

    from fuzzrunner.engine.database import campaign_database
    from fuzzrunner.engine.hub import _hub_dir
    bad = os.fsencode(str(tmp_path)) + b"/tmp\xff"
    os.mkdir(bad)
    monkeypatch.setattr(tempfile, "tempdir", os.fsdecode(bad))
    d = _hub_dir()
    assert os.path.isdir(d)
    shutil.rmtree(d)
    assert campaign_database(None, None, "x", (), 1) is None  # no database: nothing to key
    from hypothesis.database import InMemoryExampleDatabase
    db = campaign_database(InMemoryExampleDatabase(), None, os.fsdecode(b"t\xfe"), (), 1)
    db.save(b"k", b"v")
    assert list(db.fetch(b"k")) == [b"v"]


# -- a reader that has gone, long values -----------------------------------------------------------

class _Gone(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_stream_whose_reader_has_gone_drops_later_writes_instead_of_raising():
    stream = cli_render._SafeStream(_Gone())
    assert stream.write("a line\n") == 7 and stream.gone
    stream.write("more\n")
    stream.flush()


def test_main_keeps_the_commands_exit_code_when_stdout_is_gone(monkeypatch):
    monkeypatch.setattr("sys.stdout", _Gone())
    assert cli.main([]) == 2  # prints the help to stdout, and exits 2: no command


def test_clip_cuts_each_long_value_in_its_middle_and_keeps_the_rule_and_the_fix():
    message = f"unknown fault {'x' * 100_000!r} for target 'reference_runner'. Known faults: a, b."
    out = cli.clip(message)
    assert len(out) < 400 and out.endswith("for target 'reference_runner'. Known faults: a, b.")
    assert "characters]" in out and out.startswith("unknown fault 'xxx")
    spaced = "word " * 10_000
    assert len(cli.clip(spaced)) < 2000
    assert cli.clip("short message") == "short message"


# -- two flags, one file ---------------------------------------------------------------------------

def test_two_report_flags_naming_one_file_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text("")
    os.symlink("a.json", tmp_path / "link.json")
    for a, b in (("r.json", "r.json"), ("r.json", str(tmp_path / "r.json")), ("a.json", "link.json"),
                 ("d/../r.json", "r.json")):
        with pytest.raises(InvalidArgument, match="name the same file"):
            check_distinct_files({"--report": a, "--junit": None, "--html": b})
    check_distinct_files({"--report": "r.json", "--junit": "r.xml", "--html": "r.html"})


# -- a finding says what the live line said --------------------------------------------------------

def _finding(kind, ops, after):
    v = Violation("shadow", kind, "aten.add.Tensor", "punica.py:103", "embeddings_indices", f"{kind}!")
    case = Case("reference_runner", {}, tuple({"op": "dummy_run", "num_tokens": 1} for _ in range(ops)))
    return Finding.of(v, [], case, first_found_after_examples=after, found_after_s=1.0)


def test_a_finding_shrunk_to_another_kind_of_its_family_says_what_it_was_first_seen_as():
    first = _finding("stale-read", 3, after=1)
    smaller = _finding("uninitialized-read", 1, after=4)
    assert first.id == smaller.id and merge(first, smaller)
    assert first.signature.kind == "uninitialized-read" and first.first_found_after_examples == 1
    assert "found after 1 example as stale-read" in render(first)
    again = Finding.from_dict(first.to_dict())
    assert again.first_kind == "stale-read" and "as stale-read" in render(again)
    assert " as " not in render(_finding("uninitialized-read", 1, after=2)).splitlines()[-1]


def test_the_summary_labels_every_count_so_they_add_up():
    r = types.SimpleNamespace(replayed=[1] * 5, examples=25, generated=19, invalid=2)
    assert cli_render._cases_text(r) == "30 cases: 5 replayed (corpus and seeds), 19 generated (2 invalid), 6 shrinking"


def test_a_finding_found_by_a_replayed_case_is_found_after_1_example_not_0(monkeypatch):
    from fuzzrunner.engine.search import Shard
    seen = []
    shard = types.SimpleNamespace(result=types.SimpleNamespace(examples=0, generated=0,
                                                               replayed=[("seed.json", None, True)], errors=[]),
                                  book=types.SimpleNamespace(write_errors=[], by_id={}, settled=set(),
                                                             record=lambda v, c, n, t, *how: seen.append(n) or []),
                                  replaying=None, hub=types.SimpleNamespace(case=object()), elapsed=lambda: 0.0, _refuse_missing_device=lambda v: None,
                                  _note_limitations=lambda v: None, _found_by_siblings=lambda v: set())
    Shard._record(shard, [], None)  # record() is this, timed as the campaign's 'findings' stage
    assert seen == [1]


def test_found_after_n_examples_counts_generated_and_replayed_cases_never_shrink_steps():
    """A bug found while another shrank was "found after" the shrink's steps too (a new user's trial): 12 generated,
    2 replayed, 30 shrink steps: found after 14."""
    from fuzzrunner.engine.search import Shard
    seen = []
    shard = types.SimpleNamespace(result=types.SimpleNamespace(examples=12 + 30, generated=12,
                                                               replayed=[("a.json", None, True)] * 2, errors=[]),
                                  book=types.SimpleNamespace(write_errors=[], by_id={}, settled=set(),
                                                             record=lambda v, c, n, t, *how: seen.append(n) or []),
                                  replaying=None, hub=types.SimpleNamespace(case=object()), elapsed=lambda: 0.0, _refuse_missing_device=lambda v: None,
                                  _note_limitations=lambda v: None, _found_by_siblings=lambda v: set())
    Shard._record(shard, [], None)
    assert seen == [14]


# -- Hypothesis' own files -------------------------------------------------------------------------

def test_hypothesis_storage_goes_under_the_corpus_during_a_campaign_and_is_put_back_after(tmp_path, monkeypatch):
    from hypothesis import configuration

    from fuzzrunner.corpus import Corpus
    from fuzzrunner.engine.database import hypothesis_storage
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    before = configuration.storage_directory("x", intent_to_write=False).path
    with hypothesis_storage(Corpus(tmp_path / "corpus")):
        assert configuration.storage_directory("x", intent_to_write=False).path == \
            tmp_path / "corpus" / "hypothesis" / ".storage" / "x"
    assert configuration.storage_directory("x", intent_to_write=False).path == before
    with hypothesis_storage(None):
        assert not str(configuration.storage_directory("x", intent_to_write=False).path).startswith(os.getcwd())


@pytest.mark.parametrize("recorded, read", [(5, 5.0), (0.5, 0.5), (None, None), (math.nan, None), (1e300, None),
                                            (-1, None), ("5", None), (True, None)])
def test_a_findings_recorded_timeout_is_read_only_if_it_is_a_real_one(recorded, read):
    d = _finding("uninitialized-read", 1, after=1).to_dict()
    d["case_timeout_s"] = recorded
    assert Finding.from_dict(d).case_timeout_s == read
