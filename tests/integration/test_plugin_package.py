"""A plug-in package, pip-installed into a temporary folder: its oracle is a CLI choice (``--oracle racer``) and a
pytest marker choice, runs in the campaign's workers, and its violations become findings (docs/plugins.md)."""

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# One xdist group: under `--dist loadgroup` a module's ungrouped tests spread over both workers, each
# setting up the module's fixtures; grouped, `installed` (the plug-in package, pip-installed) is set up once per CI run.
pytestmark = pytest.mark.xdist_group("plugin_package")

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "racer-plugin"
version = "0.1"

[project.entry-points."fuzzrunner.plugins"]
racer = "racer_plugin:register"

[tool.setuptools]
packages = ["racer_plugin"]
'''

INIT = '''\
import os


def register():
    from fuzzrunner import Kind, OracleSpec, register_kind, register_oracle
    register_kind(Kind("racy-read", 0, "racy-read", memory=True, colour="#8250df"))
    register_oracle(OracleSpec("racer", "racer_plugin.oracle:RaceOracle",
                               summary="the first op of a case reads a slot another thread writes"))
    log = os.environ.get("RACER_PLUGIN_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")
'''

ORACLE = '''\
import os

from fuzzrunner import Oracle, Violation


class RaceOracle(Oracle):
    name = "racer"

    def __init__(self, context):
        self.context, self.ops = context, []

    def begin_op(self, index, op):
        self.ops.append((index, op["op"]))

    def finish(self):
        return [Violation("racer", "racy-read", op, "runner.py:10", "token_lora_mapping",
                          f"op {i} ({op}) read token_lora_mapping[0] while it was written, on {self.context.device}",
                          {"op_index": i, "pid": os.getpid()})
                for i, op in self.ops[:1]]
'''

MARKED = '''\
import pytest


@pytest.mark.fuzzrunner(target="reference_runner", oracles=("racer",), max_examples=3, seed=1, shrink=False)
def test_no_race(fuzzrunner_campaign):
    fuzzrunner_campaign.assert_no_findings()
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package built and installed with pip (no index, no network) into a folder of its own, which goes
    with the test: nothing is left in the environment."""
    for module in ("pip", "setuptools"):  # asked in a child: finding them here would import setuptools' hooks
        if subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, timeout=120).returncode:
            pytest.skip(f"{module} is not installed here: no plug-in package can be installed to test with")
    base = tmp_path_factory.mktemp("plugin")
    src = base / "racer-plugin"
    (src / "racer_plugin").mkdir(parents=True)
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "racer_plugin" / "__init__.py").write_text(INIT)
    (src / "racer_plugin" / "oracle.py").write_text(ORACLE)
    site = base / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                           "--no-build-isolation", "--disable-pip-version-check", "--target", str(site), str(src)],
                          capture_output=True, text=True, timeout=300, cwd=base)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (site / "racer_plugin-0.1.dist-info" / "entry_points.txt").exists()
    return site


def _env(site: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("FUZZRUNNER_DEVICE", "FUZZRUNNER_NO_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**env, **extra}


def test_a_plug_ins_oracle_is_a_cli_choice_runs_in_the_workers_and_its_violations_are_findings(installed, tmp_path):
    log = tmp_path / "loaded.txt"
    env = _env(installed, RACER_PLUGIN_LOG=str(log))
    helped = subprocess.run([sys.executable, "-m", "fuzzrunner", "fuzz", "--help"], env=env, capture_output=True,
                            text=True, timeout=300, cwd=tmp_path)
    assert "racer" in helped.stdout  # the choices are made after the plug-ins registered
    log.unlink()
    report = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "fuzzrunner", "fuzz", "--target", "reference_runner", "--oracle",
                           "racer", "--device", "cpu", "--max-examples", "4", "--seed", "1", "--no-shrink", "-q",
                           "--corpus", str(tmp_path / "corpus"), "--report", str(report)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # findings
    assert "racy-read" in done.stdout and "read token_lora_mapping[0] while it was written, on cpu" in done.stdout
    [run] = json.loads(report.read_text())["runs"]
    found = run["findings"]
    assert found and {f["signature"]["tool"] for f in found} == {"racer"}
    pids = [int(p) for p in log.read_text().split()]
    assert len(pids) == len(set(pids)) >= 2  # once in each process: the CLI's first, then the workers' side
    assert pids[0] not in {f["violation"]["details"]["pid"] for f in found}  # the oracle ran in a worker


def test_a_plug_ins_oracle_is_a_marker_choice_of_a_fuzz_test(installed, tmp_path):
    (tmp_path / "test_marked.py").write_text(MARKED)
    installed_plugin = any(e.name == "fuzzrunner" for e in importlib.metadata.entry_points(group="pytest11"))
    plugin = () if installed_plugin else ("-p", "fuzzrunner.pytest_plugin")
    done = subprocess.run([sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-q",
                           "--fuzzrunner-device", "cpu", "test_marked.py"],
                          env=_env(installed), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 failed" in done.stdout and "racy-read" in done.stdout and "unknown oracle" not in done.stdout


def test_with_the_off_switch_the_plug_ins_oracle_is_unknown(installed, tmp_path):
    done = subprocess.run([sys.executable, "-m", "fuzzrunner", "fuzz", "--target", "reference_runner", "--oracle",
                           "racer"], env=_env(installed, FUZZRUNNER_NO_PLUGINS="1"), capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 2 and "invalid choice: 'racer'" in done.stderr
