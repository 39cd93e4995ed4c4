"""The wheel: one top-level package (a user's own ``targets`` cannot collide), with its data."""

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BACKEND_MIN = 77  # pyproject.toml's build-system: setuptools>=77
# what pip says when it cannot fetch the build backend for an isolated build (no network: the GPU image)
NO_BACKEND = ("No matching distribution found for setuptools", "Could not find a version that satisfies the "
              "requirement setuptools", "Failed to establish a new connection", "Network is unreachable")


def _wheel(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *extra, "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=600, cwd=out)


def _installed_backend() -> bool:
    try:
        return int(importlib.metadata.version("setuptools").split(".")[0]) >= BACKEND_MIN
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False


def test_the_wheel_has_one_top_level_package_with_seeds_types_and_license(tmp_path):
    src = tmp_path / "src"  # a copy: setuptools writes build/ and *.egg-info beside the sources
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".cache", ".git", ".gpu-vllm", "corpus", "build",
                                                             "reports", "__pycache__", "*.egg-info", ".hypothesis"))
    build = _wheel(src, tmp_path)
    if build.returncode != 0 and any(s in build.stderr for s in NO_BACKEND):  # no network for an isolated build
        if not _installed_backend():
            pytest.skip(f"building the wheel needs setuptools>={BACKEND_MIN}: no network here to fetch it for an "
                        f"isolated build, and none installed")
        build = _wheel(src, tmp_path, "--no-build-isolation")  # with the setuptools installed here
    assert build.returncode == 0, build.stderr[-2000:]
    [wheel] = tmp_path.glob("fuzzrunner-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"fuzzrunner"}
    for needed in ("fuzzrunner/py.typed", "fuzzrunner/targets/reference_runner/__init__.py",
                   "fuzzrunner/targets/vllm_lora/__init__.py", "fuzzrunner/targets/vllm_engine/__init__.py",
                   "fuzzrunner/targets/reference_runner/seeds/dummy_run_first.json",
                   "fuzzrunner/targets/sglang_engine/__init__.py",  # was left out of the wheel (not listed)
                   "fuzzrunner/targets/sglang_engine/seeds/unload_keeps_slot_21380.json"):
        assert needed in names
    assert any(n.endswith("licenses/LICENSE") for n in names)
    metadata = next(zipfile.ZipFile(wheel).read(n).decode() for n in names if n.endswith("METADATA"))
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    core = [line for line in requires if "extra ==" not in line]
    assert any("jsonschema" in line for line in core)
    assert not any("pytest" in line for line in core)  # pytest and xdist are the [pytest] extra


def test_the_engine_targets_import_as_the_installed_package_without_the_checkout_on_the_path(tmp_path):
    """An exported repro of an sglang_engine finding, run outside the checkout, loads the target as
    ``fuzzrunner.targets.sglang_engine``: its modules imported ``targets.sglang_lora`` by absolute name and the repro
    failed with "No module named 'targets'" (a new user's trial). Every target module imports its siblings
    relatively, so the installed package never needs a top-level ``targets``."""
    modules = ["fuzzrunner.targets.sglang_engine", "fuzzrunner.targets.sglang_engine.boot",
               "fuzzrunner.targets.sglang_engine.graphs", "fuzzrunner.targets.vllm_engine"]
    code = ("import importlib, sys\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'targets'))\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=300)
    if "No module named 'fuzzrunner" in r.stderr:  # 'fuzzrunner' itself on the GPU image (PYTHONPATH=. only)
        pytest.skip("fuzzrunner is not installed here (run from a checkout with PYTHONPATH=.)")
    assert r.returncode == 0, r.stderr[-1500:]
    assert r.stdout.split("\n")[-2] == "[]", r.stdout
