"""Issue 47, the file-system half: what a user's paths must not break (issue 47: items 1, 5, 11, 12,
13 and 15's file-system messages).

Each test drives the real command line (``fuzzrunner.cli.main``), or ``python -m fuzzrunner`` where
real undecodable path bytes or a real pipe matter, on targets loaded as a user's FILE.py:OBJ.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fuzzrunner.cli import main
from fuzzrunner.report import load_report

ROOT = Path(__file__).resolve().parents[2]
AUTO = Path(__file__).with_name("auto_tracked_target.py")


def fuzz(target: Path, corpus: Path, report: Path, *extra, examples: str = "10", seed: str = "1") -> int:
    return main(["fuzz", "--target", f"{target}:TARGET", "--max-examples", examples, "--seed", seed, "-q",
                 "--device", "cpu", "--corpus", str(corpus), "--report", str(report), *extra])


# -- 5. a renamed or moved target file is not a fix ---------------------------------------------------

def test_renaming_and_moving_the_target_file_keeps_its_finding_open(tmp_path):
    """The bug is a read of an automatically tracked ``torch.empty@my_runner.py:LINE``: renaming the
    file (and moving it to another folder, as a moved checkout does) made it "1 new, 1 fixed"."""
    first = tmp_path / "a" / "my_runner.py"
    first.parent.mkdir()
    shutil.copy(AUTO, first)
    corpus = tmp_path / "corpus"
    assert fuzz(first, corpus, tmp_path / "before.json") == 1
    [before] = load_report(tmp_path / "before.json")["runs"][0]["findings"]
    assert before["signature"]["tensor"].startswith("torch.empty@my_runner.py:")

    moved = tmp_path / "b" / "renamed_runner.py"
    moved.parent.mkdir()
    shutil.move(first, moved)
    for fresh in (False, True):  # through the corpus (refiled), and by the reports alone (a fresh corpus)
        out = tmp_path / f"after{fresh}.json"
        assert fuzz(moved, tmp_path / "fresh" if fresh else corpus, out, "--previous", str(tmp_path / "before.json"),
                    examples="3", seed="2") == 1
        [run] = load_report(out)["runs"]
        [after] = run["findings"]
        assert after["signature"]["tensor"].startswith("torch.empty@renamed_runner.py:")
        assert after["trend"] == "still-open" and before["id"] in after["aliases"] and run["fixed"] == [], run
    [refiled] = (corpus / "findings" / "auto_tracked").glob("*.json")  # one file: the old one is gone
    assert json.loads(refiled.read_text())["aliases"] == [before["id"]]


# -- 11. a target file whose path is not UTF-8 ----------------------------------------------------------

def test_a_memory_finding_of_a_non_utf8_target_file_is_kept_replayed_and_its_script_prints(tmp_path):
    """The access id of ``torch.empty@t\\udcfe.py:10`` raised UnicodeEncodeError: "internal error", no
    finding. Then the repro script's own print raised it under a UTF-8 terminal (strict), and the
    traceback's exit 1 read as "reproduced"."""
    bad = os.fsencode(str(tmp_path)) + b"/dir\xff"
    os.mkdir(bad)
    target = bad + b"/t\xfe.py"
    with open(target, "wb") as f:
        f.write(AUTO.read_bytes())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8:strict"}

    def run(*argv):
        return subprocess.run([sys.executable.encode(), *argv], capture_output=True, env=env, cwd=tmp_path,
                              timeout=300)
    p = run(b"-m", b"fuzzrunner", b"fuzz", b"--target", target + b":TARGET", b"--max-examples", b"10", b"--seed",
            b"1", b"-q", b"--device", b"cpu", b"--corpus", bad + b"/corpus", b"--junit", bad + b"/r.xml")
    assert p.returncode == 1, p.stderr.decode(errors="replace")
    assert b"uninitialized-read of torch.empty@t\\udcfe.py:" in p.stdout  # the summary, escaped
    [saved] = os.listdir(bad + b"/corpus/findings/auto_tracked")
    finding = bad + b"/corpus/findings/auto_tracked/" + saved
    assert b"\\xfe.py" in Path(os.fsdecode(bad + b"/r.xml")).read_bytes()  # the byte itself, not \xdcfe
    replayed = run(b"-m", b"fuzzrunner", b"replay", b"--device", b"cpu", finding)
    assert replayed.returncode == 1 and b"REPRODUCED" in replayed.stdout, replayed.stderr
    [script] = os.listdir(bad + b"/corpus/repro/auto_tracked")
    p = run(bad + b"/corpus/repro/auto_tracked/" + script)
    assert p.returncode == 1 and b"Traceback" not in p.stderr, p.stderr.decode(errors="replace")
    assert b"torch.empty@t\\udcfe.py:" in p.stdout


# -- 12. a timeout finding's repro script waits the recorded timeout -------------------------------------

def test_a_timeout_findings_script_and_library_replay_wait_the_timeout_it_was_found_under(tmp_path):
    """Found under --case-timeout 2, the script replayed it under the default 120 s: a hanging case
    took two minutes to say "reproduced" (``fuzzrunner replay`` already waited 2 s)."""
    target = Path(__file__).with_name("hardening_targets.py")
    assert main(["fuzz", "--target", f"{target}:SLEEPY", "--max-examples", "1", "--seed", "1", "-q", "--no-shrink",
                 "--case-timeout", "2", "--corpus", str(tmp_path / "corpus")]) == 1
    [script] = (tmp_path / "corpus" / "repro" / "sleepy").glob("*.py")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 1 and "past the 2 s timeout" in p.stdout, p.stdout + p.stderr
    from fuzzrunner import replay
    [finding] = (tmp_path / "corpus" / "findings" / "sleepy").glob("*.json")
    [v] = replay(finding, isolated=True)
    assert v.kind == "timeout" and "past the 2 s timeout" in v.message
    [v] = replay(finding, isolated=True, case_timeout=1)
    assert "past the 1 s timeout" in v.message


# -- 13. malformed corpus files are quarantined with the real reason ---------------------------------------

def test_a_campaign_quarantines_malformed_corpus_files_saying_why_and_keeps_a_newer_one(tmp_path, capsys):
    """A finding with a string schema and one without its case were "newer than this fuzzrunner:
    upgrade" and stayed in the corpus forever; a wrong-typed violation field loaded and broke later."""
    findings = tmp_path / "corpus" / "findings" / "ok"
    findings.mkdir(parents=True)
    case = {"schema": 1, "target": "ok", "config": {}, "ops": [{"op": "x", "n": 1}]}
    violation = {"tool": "python", "kind": "crash", "kernel": "ValueError", "location": "t.py:1", "tensor": "",
                 "message": "m", "details": {}, "site": "t.py::run"}
    files = {"string_schema.json": {"schema": "2", "case": case, "violation": violation},
             "no_case.json": {"schema": 2, "violation": violation},
             "typed.json": {"schema": 2, "case": case, "violation": {**violation, "tool": 7}},
             "newer.json": {"schema": 99, "case": case, "violation": violation}}
    for name, content in files.items():
        (findings / name).write_text(json.dumps(content))
    target = Path(__file__).with_name("trust_targets.py")
    assert main(["fuzz", "--target", f"{target}:OK", "--max-examples", "3", "--seed", "1", "-q",
                 "--corpus", str(tmp_path / "corpus")]) == 0
    err = capsys.readouterr().err
    quarantine = tmp_path / "corpus" / "quarantine" / "findings" / "ok"
    for name, reason in (("string_schema.json", "'schema' must be an integer, got str '2'"),
                         ("no_case.json", "a finding without its 'case'"),
                         ("typed.json", "field 'tool' must be a string, got int 7")):
        [line] = [e for e in err.splitlines() if name in e]
        assert f"moved to {quarantine / name}" in line and reason in line and "upgrade" not in line, line
        assert (quarantine / name).exists() and not (findings / name).exists()
    [line] = [e for e in err.splitlines() if "newer.json" in e]
    assert "left in place" in line and "upgrade fuzzrunner" in line and (findings / "newer.json").exists()


# -- 1. output writers never replace what is at the path ---------------------------------------------------

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="os.mknod of a device needs root")


def _null_node(path: Path) -> Path:
    """A character device numbered as /dev/null (writes go nowhere), made under tmp_path: never a real /dev node."""
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


def _finding_file(tmp_path) -> Path:
    target = Path(__file__).with_name("trust_targets.py")
    assert main(["fuzz", "--target", f"{target}:BUGGY", "--fault", "boom", "--max-examples", "30", "--seed", "1",
                 "-q", "--corpus", str(tmp_path / "corpus")]) == 1
    [path] = (tmp_path / "corpus" / "expected" / "buggy").glob("*.json")
    return path


@root_only
def test_export_writes_a_device_in_place_and_never_over_the_finding_it_reads(tmp_path, capsys):
    """As root, `export F.json -o /dev/null` replaced /dev/null with a regular file; `-o F.json`
    overwrote the finding with its own script."""
    finding = _finding_file(tmp_path)
    text = finding.read_text()
    null = _null_node(tmp_path / "null")
    assert main(["export", str(finding), "-o", str(null)]) == 0
    assert stat.S_ISCHR(os.lstat(null).st_mode) and os.lstat(null).st_rdev == os.makedev(1, 3)
    (tmp_path / "link.json").symlink_to(finding)
    os.link(finding, tmp_path / "hard.json")
    for out in (finding, f"{finding.parent}/./{finding.name}", tmp_path / "link.json", tmp_path / "hard.json"):
        capsys.readouterr()
        assert main(["export", str(finding), "-o", str(out)]) == 2
        assert "is the finding file being exported" in capsys.readouterr().err
    assert finding.read_text() == text
    # several files, one of them where its own script would go: that one is refused, the others written
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    own = scripts / f"repro_{json.loads(text)['id']}.py"
    shutil.copy(finding, own)
    other = tmp_path / "other.json"
    shutil.copy(finding, other)
    capsys.readouterr()
    assert main(["export", str(own), str(other), "-o", str(scripts)]) == 2
    assert "it is the finding file" in capsys.readouterr().err and own.read_text() == text
    assert main(["export", str(finding), "-o", ""]) == 2
    assert "-o: an empty path names no file" in capsys.readouterr().err


@root_only
def test_fuzz_writes_its_reports_into_a_device_a_fifo_and_a_links_target_and_refuses_the_rest_first(tmp_path,
                                                                                                   capsys):
    target = Path(__file__).with_name("trust_targets.py")
    null = _null_node(tmp_path / "null")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)  # never holds the process
    reader.start()
    real = tmp_path / "real.html"
    (tmp_path / "latest.html").symlink_to(real)
    argv = ["fuzz", "--target", f"{target}:OK", "--max-examples", "2", "--seed", "1", "-q"]
    assert main([*argv, "--corpus", str(tmp_path / "corpus"), "--report", str(null), "--junit", str(fifo),
                 "--html", str(tmp_path / "latest.html")]) == 0
    reader.join(60)
    assert stat.S_ISCHR(os.lstat(null).st_mode) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got and got[0].startswith("<?xml") and (tmp_path / "latest.html").is_symlink() and "<html" in real.read_text()
    # refused before any case runs: no corpus folder is made
    block = tmp_path / "block"
    os.mknod(block, stat.S_IFBLK | 0o600, os.makedev(0, 0))
    (tmp_path / "a_file").write_text("")
    for flag, value, says in (("--report", "", "--report: an empty path names no file"),
                              ("--junit", str(block), "it is a block device"),
                              ("--html", str(tmp_path), "it is a directory"),
                              ("--report", str(target), "is the target file"),
                              ("--report", str(tmp_path / "a_file" / "r.json"), "is a file, not a folder"),
                              ("--previous", "", "--previous: an empty path names no report")):
        capsys.readouterr()
        assert main([*argv, "--corpus", str(tmp_path / "never"), flag, value]) == 2
        err = capsys.readouterr().err
        assert says in err and "File exists" not in err, err
        assert not (tmp_path / "never").exists()
    assert stat.S_ISBLK(os.lstat(block).st_mode)


@root_only
def test_the_nightly_refuses_a_report_folder_holding_a_device_before_any_target_runs(tmp_path, capsys):
    reports = tmp_path / "reports"
    reports.mkdir()
    os.mknod(reports / "reference_runner.xml", stat.S_IFBLK | 0o600, os.makedev(0, 0))
    assert main(["nightly", "--max-examples", "1", "--corpus", str(tmp_path / "corpus"),
                 "--report-dir", str(reports)]) == 2
    assert "reference_runner.xml" in capsys.readouterr().err and not (tmp_path / "corpus").exists()
    assert stat.S_ISBLK(os.lstat(reports / "reference_runner.xml").st_mode)
    for folder, says in ((tmp_path / "reports" / "reference_runner.xml", "is a file, not a folder"),
                         ("/proc/fuzzrunner-test-reports", "takes no new files or folders")):
        assert main(["nightly", "--max-examples", "1", "--report-dir", str(folder)]) == 2
        assert says in capsys.readouterr().err
    assert main(["fuzz", "--target", "reference_runner", "--corpus", "/proc/fuzzrunner-test-corpus"]) == 2
    assert "the file system of '/proc' takes no new files" in capsys.readouterr().err
