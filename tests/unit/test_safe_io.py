"""One reader of corpus entries (issue 23): regular files only, no symlink loops, bounded size.

A FIFO named ``x.json`` hung ``fuzz`` and ``replay`` forever; a symlink loop aborted ``fuzz`` and
``nightly`` with "internal error: RuntimeError: Symlink loop". Every test that could hang runs under
an alarm, so a regression fails instead of blocking the suite.
"""

import json
import os

import pytest

from fuzzrunner.case import Case
from fuzzrunner.corpus import Corpus, load_any
from fuzzrunner.errors import InvalidCase, SkippedFile
from fuzzrunner.finding import Finding
from fuzzrunner.safe_io import json_files, read_text, subfolders
from fuzzrunner.target import Target

CASE = Case("ok", {}, ({"op": "x", "n": 1},))


@pytest.fixture
def odd(tmp_path):
    """A target folder holding one good case and every kind of thing that is not one."""
    d = tmp_path / "corpus" / "cases" / "ok"
    d.mkdir(parents=True)
    (d / "good.json").write_text(CASE.to_json())
    os.mkfifo(d / "fifo.json")
    os.symlink("loop.json", d / "loop.json")
    os.symlink("b.json", d / "a.json")
    os.symlink("a.json", d / "b.json")
    (d / "folder.json").mkdir()
    os.symlink("/dev/zero", d / "zero.json")
    with open(d / "huge.json", "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: 64 MiB on paper, nothing on disk
    return d


@pytest.mark.parametrize("name, says", [("fifo.json", "a FIFO"), ("loop.json", "symlink loop"),
                                        ("a.json", "symlink loop"), ("folder.json", "a directory"),
                                        ("zero.json", "a character device"), ("huge.json", "64 MiB")])
def test_anything_but_a_regular_file_of_sane_size_is_skipped_in_one_line(odd, name, says, no_hang):
    with no_hang(10), pytest.raises(SkippedFile) as e:
        read_text(odd / name)
    message = str(e.value)
    assert str(odd / name) in message and says in message and "skipped" in message and "\n" not in message
    with no_hang(10), pytest.raises(SkippedFile):  # every loader reads through it
        load_any(odd / name)
    with no_hang(10), pytest.raises(SkippedFile):
        Finding.load(odd / name)


def test_a_symlink_to_a_regular_file_still_reads(odd):
    os.symlink("good.json", odd / "link.json")
    assert load_any(odd / "link.json")[0] == CASE


def test_corpus_entries_skip_them_without_hanging_or_moving_them_and_load_the_rest(odd, no_hang):
    corpus = Corpus(odd.parents[1])
    bad = []
    with no_hang(10):
        entries = corpus.entries("ok", on_bad=lambda path, moved, e: bad.append((path.name, moved, type(e))))
    assert [(p.name, c) for p, c, _ in entries] == [("good.json", CASE)]
    assert sorted(bad) == [(n, None, SkippedFile) for n in
                           ("a.json", "b.json", "fifo.json", "folder.json", "huge.json", "loop.json", "zero.json")]
    assert not (corpus.root / "quarantine").exists()
    assert os.path.islink(odd / "loop.json") and (odd / "fifo.json").exists()


def test_a_looping_target_folder_is_reported_not_followed(tmp_path, no_hang):
    findings = tmp_path / "corpus" / "findings"
    findings.mkdir(parents=True)
    os.symlink("loopdir", findings / "loopdir")
    os.symlink("..", findings / "up")  # a cycle without ELOOP: listed one level deep only
    bad = []
    with no_hang(10):
        assert Corpus(tmp_path / "corpus").entries(on_bad=lambda p, m, e: bad.append(p.name)) == []
    assert bad == ["loopdir"]
    assert [p.name for p in subfolders(findings)] == ["up"]


def test_quarantine_of_a_symlink_loop_moves_the_link_instead_of_raising(tmp_path):
    d = tmp_path / "corpus" / "findings" / "ok"
    d.mkdir(parents=True)
    os.symlink("x.json", d / "x.json")
    moved = Corpus(tmp_path / "corpus").quarantine(d / "x.json")
    assert moved == tmp_path / "corpus" / "quarantine" / "findings" / "ok" / "x.json" and os.path.islink(moved)


def test_a_corrupt_file_is_still_invalid_not_skipped(tmp_path):
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe")
    (tmp_path / "half.json").write_text('{"schema": 1, "tar')
    for name in ("bin.json", "half.json"):
        with pytest.raises(InvalidCase) as e:
            load_any(tmp_path / name)
        assert not isinstance(e.value, SkippedFile)


def test_seed_files_list_through_the_same_lister(odd):
    t = Target("ok", "", lambda faults=(), *, max_ops=5: None, lambda case, ctx: None, seeds=str(odd))
    assert [os.path.basename(p) for p in t.seed_files()] == [p.name for p in json_files(odd)]
    assert "good.json" in [os.path.basename(p) for p in t.seed_files()]


def test_a_report_reader_refuses_a_fifo_too(tmp_path, no_hang):
    from fuzzrunner.report import load_report
    os.mkfifo(tmp_path / "r.json")
    with no_hang(10), pytest.raises(SkippedFile):
        load_report(tmp_path / "r.json")
    (tmp_path / "s.json").write_text(json.dumps({"schema": 1}))
    with pytest.raises(InvalidCase):
        load_report(tmp_path / "s.json")
