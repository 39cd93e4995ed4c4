"""Hardening (issue 23), the input, corpus and command-line half: what a new user and an attacker
broke from outside, driven through the real command line (``fuzzrunner.cli.main``, or
``python -m fuzzrunner`` where a real pipe or a real non-UTF-8 path matters).

Targets are the small ones of trust_targets.py and hardening_targets.py, loaded as a user's
FILE.py:OBJ. Anything that could hang runs under an alarm, so a regression fails instead of
blocking the suite.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuzzrunner.cli import main
from fuzzrunner.report import load_report, runs

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent


def spec(name: str, file: str = "trust_targets.py") -> str:
    return f"{HERE / file}:{name}"


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("fuzzrunner: error: ") and "Traceback" not in err[0], err[0]
    return err[0]



def fuzz(tmp_path, target, *extra, examples="3"):
    return main(["fuzz", "--target", target, "--max-examples", examples, "--seed", "1", "-q",
                 "--corpus", str(tmp_path / "corpus"), *extra])


# -- 1. one safe reader of corpus entries ---------------------------------------------------------

def _odd_corpus(tmp_path) -> Path:
    d = tmp_path / "corpus" / "findings" / "ok"
    d.mkdir(parents=True)
    os.mkfifo(d / "fifo.json")
    os.symlink("loop.json", d / "loop.json")
    os.symlink("loopdir", tmp_path / "corpus" / "cases")  # a looping folder where cases/ should be
    return d


def test_a_fifo_and_symlink_loops_in_the_corpus_are_skipped_with_a_line_each_and_fuzz_goes_on(tmp_path, capsys, no_hang):
    d = _odd_corpus(tmp_path)
    with no_hang(120):
        assert fuzz(tmp_path, spec("OK"), "--report", str(tmp_path / "r.json")) == 0
    err = capsys.readouterr().err.splitlines()
    for name, says in (("fifo.json", "a FIFO, not a regular file"), ("loop.json", "symlink loop")):
        [line] = [e for e in err if name in e]
        assert "warning" in line and "left in place" in line and says in line
    assert (d / "fifo.json").exists() and os.path.islink(d / "loop.json")
    [run] = runs(load_report(tmp_path / "r.json"))
    assert {Path(q["path"]).name: q["moved_to"] for q in run["quarantined"]} == {"fifo.json": None, "loop.json": None}


def test_replay_and_export_of_a_fifo_say_so_in_one_line_instead_of_hanging(tmp_path, capsys, no_hang):
    d = _odd_corpus(tmp_path)
    for argv in (["replay", str(d / "fifo.json")], ["export", str(d / "fifo.json"), "-o", str(tmp_path / "r.py")],
                 ["replay", str(d / "loop.json")], ["fuzz", "--target", "reference_runner", "--previous",
                                                     str(d / "fifo.json"), "--max-examples", "1"]):
        with no_hang(30):
            assert main(argv) == 2
        line = one_error_line(capsys)
        assert "skipped" in line and ("FIFO" in line or "symlink loop" in line)


def test_the_pytest_plugin_leaves_a_fifo_out_of_the_corpus_items_with_a_warning(tmp_path, no_hang):
    d = _odd_corpus(tmp_path)
    case = {"schema": 1, "target": "ok", "config": {}, "ops": [{"op": "x", "n": 1}]}
    (d.parent.parent / "findings" / "ok" / "good.json").write_text(json.dumps(case))
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    with no_hang(120):
        p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                            f"--fuzzrunner-corpus={tmp_path / 'corpus'}", str(tmp_path / "test_nothing.py")],
                           capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                           timeout=100)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "finding-good" in p.stdout and "fifo" not in p.stdout.split("warnings summary")[0]
    assert "fifo.json: skipped: a FIFO" in p.stdout


# -- 2. one validation of numeric settings --------------------------------------------------------

@pytest.mark.parametrize("flag, value", [("--case-timeout", "nan"), ("--case-timeout", "inf"),
                                         ("--case-timeout", "-1"), ("--case-timeout", "0"),
                                         ("--case-timeout", "1e999"), ("--case-timeout", "-inf"),
                                         ("--budget", "nan"), ("--budget", "inf"), ("--budget", "-1e3"),
                                         ("--budget", "-5"), ("--budget", "0"), ("--max-examples", "-3"),
                                         ("--workers", "0"), ("--max-ops", "0")])
def test_a_numeric_flag_that_is_not_finite_and_in_range_is_refused_before_any_case_runs(
        tmp_path, capsys, flag, value):
    assert fuzz(tmp_path, spec("OK"), flag, value, "--report", str(tmp_path / "r.json")) == 2
    line = one_error_line(capsys)
    assert flag in line and "must be" in line
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "corpus").exists()  # nothing left behind


def test_replay_validates_its_case_timeout_too(tmp_path, capsys):
    case = tmp_path / "c.json"
    case.write_text(json.dumps({"schema": 1, "target": "ok", "config": {}, "ops": [{"op": "x", "n": 1}]}))
    assert main(["replay", str(case), "--target", spec("OK"), "--case-timeout", "nan"]) == 2
    assert "--case-timeout" in one_error_line(capsys)


def test_the_api_and_the_pytest_plugin_get_the_same_validation():
    from fuzzrunner import Settings
    from fuzzrunner.errors import InvalidArgument
    for field, bad in (("case_timeout_s", float("nan")), ("budget_s", float("inf")), ("budget_s", True)):
        with pytest.raises(InvalidArgument, match=field):
            Settings(**{field: bad})


# -- 4. two reports naming one file ---------------------------------------------------------------

@pytest.mark.parametrize("second", ["--junit", "--html"])
def test_two_reports_naming_one_file_are_refused_up_front(tmp_path, capsys, monkeypatch, second):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.json").write_text("precious")
    os.link(tmp_path / "old.json", tmp_path / "hard.json")
    for a, b in (("x.json", "x.json"), ("x.json", "./x.json"), ("old.json", "hard.json"),
                 ("sub/../y.json", "y.json")):
        assert fuzz(tmp_path, spec("OK"), "--report", a, second, b) == 2
        line = one_error_line(capsys)
        assert f"--report and {second} name the same file" in line
    assert (tmp_path / "old.json").read_text() == "precious" and not (tmp_path / "x.json").exists()


# -- 5. replay waits as long as the finding was found with ----------------------------------------

def test_a_timeout_finding_records_its_timeout_and_replay_uses_it_or_case_timeout(tmp_path, capsys, no_hang):
    target = spec("SLEEPY", "hardening_targets.py")
    with no_hang(300):
        assert fuzz(tmp_path, target, "--case-timeout", "2", "--no-shrink", examples="1") == 1
    [path] = (tmp_path / "corpus" / "findings" / "sleepy").glob("*.json")
    finding = json.loads(path.read_text())
    assert finding["signature"]["kind"] == "timeout" and finding["case_timeout_s"] == 2
    capsys.readouterr()
    with no_hang(60):  # the 120 s default would trip the alarm
        assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert "REPRODUCED" in out and "past the 2 s timeout" in out
    with no_hang(60):
        assert main(["replay", str(path), "--case-timeout", "1"]) == 1
    assert "past the 1 s timeout" in capsys.readouterr().out


# -- 6. a target's own strategy failing is the target's error -------------------------------------

@pytest.mark.parametrize("target, says", [
    ("CASES_RAISE", "its cases(faults, max_ops=8) raised ValueError: my cases() is broken"),
    ("DRAW_RAISES", "its strategy raised KeyError while drawing a case: 'y'"),
    ("NOT_A_STRATEGY", "returned list, not a Hypothesis strategy"),
    ("OLD_SIGNATURE", "must accept the faults and the keyword max_ops")])
def test_a_target_whose_cases_or_strategy_raises_is_named_as_the_targets_error(tmp_path, capsys, target, says):
    assert fuzz(tmp_path, spec(target, "hardening_targets.py")) == 2
    line = one_error_line(capsys)
    assert says in line and "internal error" not in line and "target '" in line


# -- 7. export, pipes, long values ----------------------------------------------------------------

def _finding_file(tmp_path) -> Path:
    assert fuzz(tmp_path, spec("BUGGY"), "--fault", "boom", examples="30") == 1
    [path] = (tmp_path / "corpus" / "expected" / "buggy").glob("*.json")
    return path


def test_export_of_several_findings_writes_one_repro_each_to_a_folder(tmp_path, capsys):
    path = _finding_file(tmp_path)
    capsys.readouterr()
    other = tmp_path / "copy.json"
    other.write_text(path.read_text())
    assert main(["export", str(path), str(other), "-o", str(tmp_path / "repros")]) == 0
    scripts = sorted(p.name for p in (tmp_path / "repros").iterdir())
    assert len(scripts) == 2 and all(s.startswith("repro_") for s in scripts)  # one bug twice: both kept
    assert main(["export", str(path), str(other)]) == 2  # the default -o repro.py is one script
    assert "give a folder (-o DIR)" in one_error_line(capsys)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["export", str(path), str(bad), "-o", str(tmp_path / "more")]) == 2
    assert len(list((tmp_path / "more").iterdir())) == 1 and "bad.json" in capsys.readouterr().err


def test_piping_into_head_ends_quietly_with_the_commands_own_exit_code(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv, code in ((["faults"], 0), (["--help"], 0), (["fuzz", "--help"], 0), (["replay", "nope.json"], 2)):
        with subprocess.Popen([sys.executable, "-m", "fuzzrunner", *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env) as p:
            p.stdout.close()  # the reader is gone before the command writes a word (`| head -0`)
            err = p.stderr.read().decode()
            assert p.wait(timeout=120) == code
        assert "BrokenPipeError" not in err and "internal error" not in err and "Exception ignored" not in err, err


def test_an_absurdly_long_value_is_cut_in_the_one_line_error(tmp_path, capsys):
    for argv in (["fuzz", "--target", "reference_runner", "--fault", "x" * 100_000],
                 ["fuzz", "--target", "y" * 100_000], ["replay", "z" * 5000 + ".json"],
                 ["fuzz", "--target", "reference_runner", "--device", "w" * 100_000]):
        assert main(argv) == 2
        line = one_error_line(capsys)
        assert len(line) < 2000 and "characters]" in line, len(line)


# -- 3. paths that are not UTF-8 ------------------------------------------------------------------

def test_a_non_utf8_target_path_and_corpus_keep_the_finding_and_every_report(tmp_path):
    """Real non-UTF-8 folder names: the finding is found, saved and exported, the reports written."""
    bad = os.fsencode(str(tmp_path)) + b"/dir\xff"
    os.mkdir(bad)
    target = bad + b"/t\xfe.py"
    with open(target, "wb") as f:
        f.write((HERE / "trust_targets.py").read_bytes())
    out = bad + b"/out"
    argv = [b"fuzz", b"--target", target + b":BUGGY", b"--fault", b"boom", b"--max-examples", b"30", b"--seed", b"1",
            b"-q", b"--corpus", bad + b"/corpus", b"--report", out + b".json", b"--junit", out + b".xml",
            b"--html", os.fsencode(str(tmp_path / "r.html"))]
    # strict: the output stream cannot write the undecodable bytes back (what a non-C UTF-8 locale does)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8:strict"}
    p = subprocess.run([sys.executable.encode(), b"-m", b"fuzzrunner", *argv], capture_output=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert p.returncode == 1, p.stderr.decode(errors="replace")
    assert b"internal error" not in p.stderr and b"Traceback" not in p.stderr
    assert b"crash in ValueError at t\\udcfe.py" in p.stdout  # the summary, escaped
    [saved] = os.listdir(bad + b"/corpus/expected/buggy")
    finding = json.loads(Path(os.fsdecode(bad + b"/corpus/expected/buggy/" + saved)).read_bytes())
    assert os.fsencode(finding["target_spec"]) == target + b":BUGGY"
    html = (tmp_path / "r.html").read_text(encoding="ascii")
    assert 'href="dir%FF/corpus/repro/buggy/' in html  # the link is the folder's real bytes
    [reported] = load_report(os.fsdecode(out + b".json"))["runs"][0]["findings"]
    assert os.path.exists(os.fsencode(reported["repro"]))
    import xml.etree.ElementTree as ET
    ET.parse(os.fsdecode(out + b".xml"))


# -- 8. what a new user sees ------------------------------------------------------------------------

def test_a_campaign_leaves_no_hypothesis_folder_in_the_working_directory(tmp_path):
    """Hypothesis caches the constants of local source files under its home, ./.hypothesis by default
    (the reference runner's strategies make it do so)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"}
    p = subprocess.run([sys.executable, "-m", "fuzzrunner", "fuzz", "--target", "reference_runner", "--max-examples",
                        "3", "--seed", "1", "-q", "--corpus", str(tmp_path / "corpus")], capture_output=True, text=True,
                       cwd=cwd, env={**env, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert p.returncode == 0, p.stderr
    assert os.listdir(cwd) == []
    assert os.listdir(tmp_path / "corpus" / "hypothesis" / ".storage" / "constants")  # they went here instead
