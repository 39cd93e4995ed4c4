"""``vllm_setup.sh VERSION --for-gpu DIR``: a tree to carry to a GPU machine that has no network.

DIR gets (for ``FUZZRUNNER_VLLM_SITE=DIR``):
* ``vllm/``: the vLLM files the target imports here (measured by running a few cases in a fresh
  process), plus all of ``vllm/lora/`` and ``vllm/triton_utils/``; no compiled libraries (a vLLM
  platform plugin answers the platform probe from torch: platform.py);
* ``deps/``: the same dependency packages, installed for Python 3.12 (the GPU machine's), with only
  the imported files of the packages that load lazily and are large (transformers).
The carried tree must stay under 64 MiB with the repository: the size is printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .site import ROOT, site_dirs

PY312 = os.environ.get("FUZZRUNNER_PY312", "python3.12")
WHOLE = ("vllm/lora", "vllm/triton_utils")
PRUNED_DEPS = ("transformers",)  # large and lazily imported: keep what was imported

_PROBE = r"""
import json, sys
from hypothesis import given, settings, HealthCheck, strategies as st
from fuzzrunner.target import load_target
from fuzzrunner.execute import run_case
t = load_target("vllm_lora")
@settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(t.cases(()))
def go(case):
    run_case(case, t, oracles=())
go()
print(json.dumps(sorted({getattr(m, "__file__", None) or "" for m in list(sys.modules.values())})))
"""


def imported_files(version: str) -> list[str]:
    env = dict(os.environ, FUZZRUNNER_VLLM_VERSION=version, PYTHONPATH=str(ROOT), FUZZRUNNER_DEVICE="cpu")
    env.pop("FUZZRUNNER_VLLM_SITE", None)
    r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, cwd=ROOT)
    if r.returncode:
        raise SystemExit(f"vllm_setup --for-gpu: the probe run failed: {r.stderr.strip().splitlines()[-1:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def build(version: str, out: Path) -> None:
    site, deps = site_dirs(version)
    files = [Path(f) for f in imported_files(version) if f]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # vLLM: imported modules, whole lora/ and triton_utils/, its dist-info (version detection)
    for f in files:
        if site in f.parents:
            _copy(f, out / f.relative_to(site))
    for d in WHOLE:
        for f in (site / d).rglob("*.py"):
            _copy(f, out / f.relative_to(site))
    for d in site.glob("vllm-*.dist-info"):
        shutil.copytree(d, out / d.name)
    # deps: the imported top-level packages, reinstalled for Python 3.12 from the same pins
    used = sorted({f.relative_to(deps).parts[0] for f in files if deps in f.parents})
    dists = sorted({p.name.split("-")[0] for p in deps.glob("*.dist-info")})
    tmp = out.parent / (out.name + ".deps312")
    shutil.rmtree(tmp, ignore_errors=True)
    pins = [f"{d}=={_version(deps, d)}" for d in dists]
    cmd = [PY312, "-m", "pip", "-q", "--disable-pip-version-check", "install", "--no-deps", "--target", str(tmp),
           "--only-binary=:all:", *pins]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"vllm_setup --for-gpu: pip for Python 3.12 failed ({PY312}): {r.stderr.strip()[-300:]}")
    for top in used:
        name = top.split(".")[0]
        src = tmp / name
        if name in PRUNED_DEPS:
            for f in files:
                if deps / name in f.parents:
                    _copy(tmp / f.relative_to(deps), out / "deps" / f.relative_to(deps))
        elif src.is_dir():
            shutil.copytree(src, out / "deps" / name, dirs_exist_ok=True)
        else:
            for f in tmp.glob(name.split(".")[0] + "*"):
                if f.is_file():
                    _copy(f, out / "deps" / f.name)
    for libs in tmp.glob("*.libs"):  # vendored shared libraries of binary wheels (pyzmq.libs, ...)
        if libs.name.split(".")[0] in {u.split(".")[0] for u in used}:
            shutil.copytree(libs, out / "deps" / libs.name, dirs_exist_ok=True)
    for di in tmp.glob("*.dist-info"):  # metadata: packages check each other's versions at import
        shutil.copytree(di, out / "deps" / di.name, dirs_exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    plug = out / "deps" / "fuzzrunner_vllm_platform-0.dist-info"  # platform.py: vLLM's plugin entry point
    plug.mkdir(parents=True, exist_ok=True)
    (plug / "METADATA").write_text("Metadata-Version: 2.1\nName: fuzzrunner-vllm-platform\nVersion: 0\n")
    (plug / "entry_points.txt").write_text("[vllm.platform_plugins]\n"
                                           "fuzzrunner_cuda_from_torch = targets.vllm_lora.platform:plugin\n")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20
    print(f"vllm {version}: GPU tree in {out} ({size:.1f} MiB, Python 3.12); carry it and set "
          f"FUZZRUNNER_VLLM_SITE={out}")


def _version(deps: Path, dist: str) -> str:
    for d in deps.glob(f"{dist}-*.dist-info"):
        return d.name[len(dist) + 1:-len(".dist-info")]
    raise SystemExit(f"no dist-info for {dist} in {deps}")
