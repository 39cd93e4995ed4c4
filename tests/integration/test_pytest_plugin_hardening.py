"""The pytest plugin under issue 23's attacks (the engine half): target names shared by several
files, SIGTERM to pytest. Inner sessions through pytester, as in test_pytest_plugin.py.
"""

import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import triton  # noqa: F401

# Loaded before any inner session (see test_pytest_plugin.py: pytester's sys.modules snapshot).
import fuzzrunner.engine.campaign  # noqa: F401
import fuzzrunner.kernels  # noqa: F401
import fuzzrunner.pytest_runtime  # noqa: F401

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = any(e.name == "fuzzrunner" for e in importlib.metadata.entry_points(group="pytest11"))
PLUGIN = () if INSTALLED else ("-p", "fuzzrunner.pytest_plugin")
RUNNER = Path(__file__).with_name("renamable_target.py")
BUG = "        return self._apply(n)  # the bug"
FIX = "        self.slot_of_token[:n].zero_()\n        return self._apply(n)  # fixed:"


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("FUZZRUNNER_DEVICE", "cpu")  # the CPU's findings are checked: not "auto" (cuda on a GPU)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)

    def run(*args):
        return pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning",
                                  *args)
    return run


def _fuzz_test(name: str, runner: str) -> str:
    return (f"import pytest\n\n@pytest.mark.fuzzrunner('{runner}:TARGET', max_examples=10, seed=1)\n"
            f"def test_{name}(fuzzrunner_campaign):\n    fuzzrunner_campaign.assert_no_findings()\n")


def test_a_corpus_finding_replays_with_its_own_file_when_another_file_has_the_same_target_name(run, pytester):
    """Issue 23: three tests, one target name, different files: a stale corpus item was replayed with
    another test's file and PASSED while the bug was live."""
    buggy, fixed = pytester.path / "buggy_runner.py", pytester.path / "fixed_runner.py"
    shutil.copy(RUNNER, buggy)
    fixed.write_text(RUNNER.read_text().replace(BUG, FIX))
    assert fixed.read_text() != buggy.read_text()
    (pytester.path / "test_1_fixed.py").write_text(_fuzz_test("fixed", "fixed_runner.py"))  # collected first
    (pytester.path / "test_2_buggy.py").write_text(_fuzz_test("buggy", "buggy_runner.py"))
    pytester.makeini("[pytest]\nfuzzrunner_corpus = corpus\n")
    run().assert_outcomes(passed=1, failed=1)
    saved = list((pytester.path / "corpus" / "findings" / "renamable").glob("*.json"))
    assert saved
    from fuzzrunner.case import Case
    from fuzzrunner.corpus import Corpus
    Corpus(pytester.path / "corpus").save_case(Case("renamable", {"max_tokens": 8}, [{"op": "step", "slots": [1]}]),
                                               "one")  # a case names only its target: which file?
    result = run("-v", "-k", "not test_fixed and not test_buggy")  # the corpus items alone
    result.assert_outcomes(failed=len(saved) + 1)
    out = result.stdout.str()
    assert "the saved bug REPRODUCES" in out
    assert "corpus target 'renamable' is defined by several files" in out


def test_sigterm_to_pytest_mid_campaign_leaves_no_hub_folders(pytester):
    """Issue 23: SIGTERM to pytest (a CI job cancelled) left ``fzr-hub-*`` folders in the temp dir."""
    import tempfile
    tmp, started = Path(tempfile.mkdtemp(prefix="fzr-t", dir="/tmp")), pytester.path / "started"  # short: AF_UNIX
    try:
        _sigterm_mid_campaign(pytester, tmp, started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sigterm_mid_campaign(pytester, tmp: Path, started: Path) -> None:
    hostile = Path(__file__).with_name("hostile_targets.py")
    (pytester.path / "test_slow.py").write_text(_fuzz_test("slow", str(hostile)).replace(":TARGET", ":SLEEPY"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               TMPDIR=str(tmp), HOSTILE_MARK_FILE=str(started), HOSTILE_SLEEP_S="60")
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", "-q",
                             str(pytester.path / "test_slow.py")], cwd=pytester.path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), "the campaign never ran a case"
    assert list(tmp.glob("fzr-hub-*")), "the hub's folders, while it runs"
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert list(tmp.glob("fzr-hub-*")) == [], out
    assert proc.returncode == 2 and "KeyboardInterrupt" in out, out
