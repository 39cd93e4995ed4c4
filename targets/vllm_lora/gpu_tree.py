"""``vllm_setup.sh VERSION --for-gpu DIR``: a tree to carry to a GPU machine that has no network.

DIR gets (for ``FUZZRUNNER_VLLM_SITE=DIR``):
* ``vllm/``: the vLLM files the targets import here (measured by running a few cases of ``vllm_lora`` and
  ``vllm_engine`` in a fresh process, and by importing their vLLM modules under the CUDA platform the GPU
  machine resolves: cuda_like.py), plus every module of ``vllm/lora/``, ``vllm/triton_utils/``,
  ``vllm/model_executor/layers/fused_moe/`` and ``vllm/model_executor/kernels/`` (imported at a layer's
  construction, out of the probes' reach); no compiled libraries (a vLLM platform plugin answers the platform
  probe from torch, vLLM's kernel queries, and flash-attention's absent extensions: platform.py);
* ``deps/``: the imported dependency packages, installed for Python 3.12 (the GPU machine's): whole
  where they hold compiled modules, else only the imported modules and the data files.
The compiled dependencies alone pass the 64 MiB that may be carried, so the tree is also written as
DIR.tar.xz (~30 MiB), which ``scripts/gpu_acceptance.py`` unpacks on the GPU machine (docs/ci.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fuzzrunner.env_defaults import DEVICE_ENV

from .site import ROOT, site_dirs


def _py312() -> str:
    """A Python 3.12 to run pip for the GPU machine's interpreter: FUZZRUNNER_PY312, else one that runs."""
    for cand in (os.environ.get("FUZZRUNNER_PY312"), "python3.12", *sorted(
            str(p) for p in Path.home().glob(".pyenv/versions/3.12*/bin/python3.12"))):
        if cand and subprocess.run([cand, "--version"], capture_output=True).returncode == 0:
            return cand
    raise SystemExit("vllm_setup --for-gpu: no Python 3.12 here to install the dependencies for the GPU "
                     "machine's interpreter; set FUZZRUNNER_PY312=/path/to/python3.12.")
# fused_moe/ and model_executor/kernels/: MoE layers import modules at construction (gate_linear.py's router
# tiers: bf16x3_router_gemm_rocm, then kernels.linear.cute_dsl), which no probe case reaches; the GPU run of
# 2026-12-07 crashed every MoE case on the first missing module, then on the second
WHOLE = ("vllm/lora", "vllm/triton_utils", "vllm/model_executor/layers/fused_moe", "vllm/model_executor/kernels")
# read as source where their import fails on the GPU machine (dummy.py; docs/findings/repro_v1_*.py), and what a
# FUZZRUNNER_VLLM_PATCH fix of V1 changes
FILES = ("vllm/v1/worker/lora_model_runner_mixin.py", "vllm/v1/worker/gpu/lora_utils.py", "vllm/lora/utils.py")

_PROBE = r"""
import json, sys
from hypothesis import given, settings, HealthCheck, strategies as st
from fuzzrunner.target import load_target
from fuzzrunner.execute import run_case
for name, n in (("vllm_lora", 12), ("vllm_engine", 4)):
    t = load_target(name)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(t.cases((), device="cpu"))
    def go(case):
        run_case(case, t, oracles=())
    go()
print(json.dumps(sorted({getattr(m, "__file__", None) or "" for m in list(sys.modules.values())})))
"""
# What a CUDA platform imports beyond that (vLLM's modules take their CUDA branches at import: fa_utils imports
# vllm.vllm_flash_attn...): the targets' vLLM modules imported under cuda_like, the platform the GPU machine resolves
_CUDA_PROBE = r"""
import json, os, sys
os.environ["CUDA_VISIBLE_DEVICES"] = ""
from targets.vllm_lora import cuda_like, site
cuda_like.install()
site.activate(site.candidate_paths())
import vllm.lora.punica_wrapper.punica_gpu, vllm.lora.ops.triton_ops
from targets.vllm_engine import vllm_env
vllm_env.prepare()
print(json.dumps(sorted({getattr(m, "__file__", None) or "" for m in list(sys.modules.values())})))
"""


def imported_files(version: str) -> list[str]:
    env = dict(os.environ, FUZZRUNNER_VLLM_VERSION=version, PYTHONPATH=str(ROOT), **{DEVICE_ENV: "cpu"})
    env.pop("FUZZRUNNER_VLLM_SITE", None)
    env.pop("FUZZRUNNER_VLLM_PATCH", None)  # the tree is the release itself; a patch is applied on the GPU machine
    files: set[str] = set()
    for probe, label in ((_PROBE, "the probe run"), (_CUDA_PROBE, "the CUDA platform's imports")):
        r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT)
        if r.returncode:
            raise SystemExit(f"vllm_setup --for-gpu: {label} failed: {r.stderr.strip().splitlines()[-1:]}")
        files.update(json.loads(r.stdout.strip().splitlines()[-1]))
    return sorted(files)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def build(version: str, out: Path) -> None:  # noqa: C901 - one linear recipe
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
    for rel in FILES:
        if (site / rel).is_file():
            _copy(site / rel, out / rel)
    for d in site.glob("vllm-*.dist-info"):
        shutil.copytree(d, out / d.name)
    # deps: the imported top-level packages, reinstalled for Python 3.12 from the same pins
    used = sorted({f.relative_to(deps).parts[0] for f in files if deps in f.parents})
    dists = sorted({p.name.split("-")[0] for p in deps.glob("*.dist-info")})
    tmp = out.parent / (out.name + ".deps312")
    shutil.rmtree(tmp, ignore_errors=True)
    pins = [f"{d}=={_version(deps, d)}" for d in dists]
    py312 = _py312()
    cmd = [py312, "-m", "pip", "-q", "--disable-pip-version-check", "install", "--no-deps", "--target", str(tmp),
           "--only-binary=:all:", *pins]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"vllm_setup --for-gpu: pip for Python 3.12 failed ({py312}): {r.stderr.strip()[-300:]}")
    for top in used:
        name = top.split(".")[0]
        src = tmp / name
        if src.is_dir() and not any(src.rglob("*.so")):
            # pure Python: the modules imported here, and the package's data files
            for f in files:
                if deps / name in f.parents and f.suffix == ".py":
                    _copy(tmp / f.relative_to(deps), out / "deps" / f.relative_to(deps))
            for f in src.rglob("*"):
                if f.is_file() and f.suffix not in (".py", ".pyc", ".pyi") and "__pycache__" not in f.parts:
                    _copy(f, out / "deps" / f.relative_to(tmp))
        elif src.is_dir():  # compiled parts: the whole package, as built for 3.12
            shutil.copytree(src, out / "deps" / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "3rdparty", "*.pyi"))
        else:
            for f in tmp.glob(name + "*"):
                if f.is_file():
                    _copy(f, out / "deps" / f.name)
    for libs in _vendored_libs(tmp, {u.split(".")[0] for u in used}):
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
    archive = out.parent / (out.name + ".tar.xz")  # what to carry: the tree itself is over the 64 MiB limit
    subprocess.run(["tar", "-cJf", str(archive), "-C", str(out.parent), out.name], check=True)
    print(f"vllm {version}: GPU tree {out} ({size:.1f} MiB, Python 3.12), archived as {archive} "
          f"({archive.stat().st_size / 2**20:.1f} MiB): carry the archive (docs/ci.md, the GPU acceptance run)")


def _vendored_libs(tmp: Path, used: set[str]) -> list[Path]:
    """The ``*.libs`` folders (shared libraries a binary wheel vendors) of the distributions that
    install a used package. The folder is named for the distribution, not the package it installs
    (``pyzmq.libs`` holds ``zmq``'s libzmq), so the owner is read from each dist-info's RECORD."""
    out = []
    for libs in tmp.glob("*.libs"):
        for record in tmp.glob("*.dist-info/RECORD"):
            tops = {line.split("/", 1)[0] for line in record.read_text().splitlines() if "/" in line}
            if libs.name in tops and tops & used:
                out.append(libs)
                break
    return out


def _version(deps: Path, dist: str) -> str:
    for d in deps.glob(f"{dist}-*.dist-info"):
        return d.name[len(dist) + 1:-len(".dist-info")]
    raise SystemExit(f"no dist-info for {dist} in {deps}")
