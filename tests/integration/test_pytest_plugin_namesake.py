"""Issue 47 item 10, the pytest plugin's corpus items: a user's target named like a built-in one, mapped in
the ini file (``fuzzrunner_targets = reference_runner = ...``), took the built-in target's findings too,
and replayed them with the user's target. Each finding is replayed with the target spec it recorded.
Inner sessions through pytester, as in test_pytest_plugin.py.
"""

import importlib.metadata
import json
import os
import shutil
from pathlib import Path

import triton  # noqa: F401

# Loaded before any inner session (see test_pytest_plugin.py: pytester's sys.modules snapshot).
import fuzzrunner.engine.campaign  # noqa: F401
import fuzzrunner.kernels  # noqa: F401
import fuzzrunner.pytest_runtime  # noqa: F401

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = any(e.name == "fuzzrunner" for e in importlib.metadata.entry_points(group="pytest11"))
PLUGIN = () if INSTALLED else ("-p", "fuzzrunner.pytest_plugin")
TARGETS = Path(__file__).with_name("api_targets.py")


def test_a_built_in_targets_finding_replays_with_the_built_in_target_whatever_the_ini_maps_its_name_to(
        pytester, monkeypatch, no_hang):
    import fuzzrunner
    shutil.copy(TARGETS, pytester.path / "namesake_target.py")
    spec = f"{pytester.path / 'namesake_target.py'}:NAMESAKE"
    with no_hang(300):
        fuzzrunner.fuzz(spec, max_examples=1, seed=1, corpus=pytester.path / "corpus")
    folder = pytester.path / "corpus" / "findings" / "reference_runner"
    [own] = list(folder.glob("*.json"))
    seed = sorted(Path(fuzzrunner.target.load_target("reference_runner").seeds).glob("*.json"))[0]
    builtin = json.loads(own.read_text())
    builtin.update(case={**json.loads(seed.read_text()), "faults": []}, target_spec="reference_runner")
    (folder / f"builtin_{own.name}").write_text(json.dumps(builtin))
    pytester.makeini(f"[pytest]\nfuzzrunner_corpus = corpus\nfuzzrunner_targets = reference_runner = {spec}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("FUZZRUNNER_DEVICE", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    with no_hang(600):
        result = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "-v",
                                    "-W", "ignore::pytest.PytestAssertRewriteWarning")
    out = result.stdout.str()
    assert f"builtin_{own.stem}" in out and "PASSED" in out, out  # the built-in's: its seed case, no bug
    result.assert_outcomes(passed=1, failed=1)  # the user's: its own target, its live bug
    assert "the saved bug REPRODUCES" in out and "the namesake's own bug" in out
