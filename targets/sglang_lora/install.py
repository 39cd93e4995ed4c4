"""Make one SGLang release's LoRA modules importable on a machine with no GPU.

``python -m targets.sglang_lora.install VERSION [--for-gpu FILE.tar.xz]`` (``scripts/sglang_setup.sh``):

1. ``pip download sglang==VERSION --no-deps`` into ``.cache/sglang/wheels/`` (3-40 MB);
2. extract SGLang's files into ``.cache/sglang/VERSION/site/`` without compiled code (``*.so``, CUDA and
   C++ sources, except the JIT kernels' sources that ``sglang.jit_kernel`` looks for at import): Python,
   JSON configs, the dist-info;
3. import the modules the target drives (with site.py's stubs) and ``pip install --no-deps --target
   .cache/sglang/VERSION/deps`` whatever is missing, until they import (never torch or Triton);
4. for the ``sglang_engine`` target (``install_engine``, stamp ``engine-ok``): transformers at SGLang's pin
   with its dependencies, then the engine's modules imported whole (``targets.sglang_engine.boot``) and
   what they miss installed the same way. A release whose engine does not import here is left without
   the stamp: ``sglang_engine`` is unavailable for it, ``sglang_lora`` is not affected;
5. for ``sglang_engine``'s adapter-management API and admission (``install_frontend``, stamp ``frontend-ok``):
   the tokenizer manager and the scheduler imported on top of the engine (aiohttp, uvloop, setproctitle and
   what else they miss, compiled wheels included: the venv's Python runs them). Without the stamp the target
   drives the manager directly (targets/sglang_engine/frontend.py says what is then not driven).

``--for-gpu FILE`` also archives the trees for a GPU machine with no network (gpu_tree.py, scripts/gpu_acceptance.py).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from pathlib import Path

from ..wheel_site import extract, extract_kept, missing_module, pip, wheel
from .site import CACHE, site_dirs

DIST = {"zmq": "pyzmq", "yaml": "pyyaml", "PIL": "pillow", "google": "protobuf", "IPython": "ipython",
        "pydantic_core": "pydantic-core", "typing_inspection": "typing-inspection",
        "annotated_types": "annotated-types", "tvm_ffi": "apache-tvm-ffi", "dateutil": "python-dateutil",
        "huggingface_hub": "huggingface-hub", "cpuinfo": "py-cpuinfo", "opentelemetry": "opentelemetry-api"}
BASE = ("orjson", "msgspec", "psutil", "pybase64", "anyio", "sniffio", "starlette", "tqdm", "pillow", "pyzmq",
        "pydantic", "pydantic-core", "typing-inspection", "annotated-types", "ipython", "requests", "urllib3",
        "idna", "certifi", "charset-normalizer")
# the engine's pure-Python imports beyond transformers, installed up front (one pip call, --no-deps); the
# import loop adds what a release needs beyond these
ENGINE_BASE = ("traitlets", "dill", "einops", "compressed-tensors", "loguru", "gguf", "sentencepiece", "openai",
               "partial-json-parser", "httpx2", "httpcore2", "truststore", "h11", "uvicorn", "fastapi",
               "annotated-doc", "opentelemetry-api")  # the last four: the model runner's imports (0.5.5 - 0.5.23)
# SGLang's JIT-kernel sources: 0.5.6 - 0.5.9's sglang.jit_kernel.utils looks for their folders at import
# (KERNEL_PATH) and raises without them; nothing here compiles them
KEEP = ("sglang/jit_kernel/",)
# the tokenizer manager's and the scheduler's imports beyond the engine's (0.5.23: aiohttp and its family,
# uvloop, setproctitle), installed up front; the import loop adds what a release needs beyond these
FRONTEND_BASE = ("aiohttp", "multidict", "yarl", "propcache", "frozenlist", "aiosignal", "aiohappyeyeballs",
                 "uvloop", "setproctitle")
PROBE = ("sglang.srt.lora.utils", "sglang.srt.lora.backend.triton_backend", "sglang.srt.lora.backend.chunked_backend")


def _missing_module(site: Path, deps: Path, env: dict) -> str | None:
    root = Path(__file__).resolve().parents[2]
    setup = (f"sys.path.insert(0, {str(root)!r})\nfrom pathlib import Path\nfrom targets.sglang_lora import site\n"
             f"site.activate([Path({str(site)!r}), Path({str(deps)!r})])")
    return missing_module("sglang_setup", setup, PROBE, env)


def _pin(site: Path, dist: str) -> str:
    """``dist==X`` as SGLang's METADATA pins it, else ``dist``."""
    for meta in site.glob("sglang-*.dist-info/METADATA"):
        for line in meta.read_text(encoding="utf-8").splitlines():
            m = re.match(rf"Requires-Dist:\s*{re.escape(dist)}\s*==\s*([^;\s]+)", line, re.IGNORECASE)
            if m:
                return f"{dist}=={m.group(1)}"
    return dist


def install_engine(version: str) -> bool:
    """Step 4 (module doc): True when the engine imports (stamp ``engine-ok``)."""
    from ..sglang_engine.boot import ENGINE_PROBE, boot_lines
    root = CACHE / version
    site, deps = site_dirs(version)
    stamp = root / "engine-ok"
    probe = " ".join(ENGINE_PROBE) + "\n"
    if stamp.exists() and stamp.read_text() == probe:
        return True  # set up for these modules (a stamp of another probe list is checked again)
    t0 = time.time()
    print(f"sglang {version}: setting up the engine's imports for sglang_engine (once: ~2 min) ...")
    extract_kept(wheel("sglang_setup", "sglang", version, CACHE / "wheels"), site, KEEP)
    try:
        pip("sglang_setup", "install", "--target", str(deps), "--upgrade", _pin(site, "transformers"))
        pip("sglang_setup", "install", "--no-deps", "--target", str(deps), *ENGINE_BASE)
        env = dict(os.environ, TRITON_INTERPRET="1")
        for _ in range(30):
            mod = missing_module("sglang_setup", boot_lines([site, deps]), ENGINE_PROBE, env)
            if mod is None:
                break
            dist = DIST.get(mod, mod)
            print(f"sglang {version}: installing {dist} (imported by SGLang's engine)")
            pip("sglang_setup", "install", "--no-deps", "--target", str(deps), dist)
        else:
            raise SystemExit(f"sglang_setup: sglang {version}'s engine still misses modules after 30 installs.")
    except SystemExit as e:
        print(f"sglang {version}: the engine does not import here ({e}); sglang_engine is unavailable for it.")
        return False
    stamp.write_text(probe)
    print(f"sglang {version}: engine ready ({time.time() - t0:.0f} s)")
    return True


def install_frontend(version: str) -> bool:
    """Step 5 (module doc): True when the tokenizer manager and the scheduler import (stamp ``frontend-ok``)."""
    from ..sglang_engine.boot import ENGINE_PROBE, FRONTEND_PROBE, boot_lines
    root = CACHE / version
    site, deps = site_dirs(version)
    stamp = root / "frontend-ok"
    probe = " ".join(FRONTEND_PROBE) + "\n"
    if stamp.exists() and stamp.read_text() == probe:
        return True
    if not (root / "engine-ok").exists():
        return False
    t0 = time.time()
    print(f"sglang {version}: setting up the tokenizer manager's and scheduler's imports for sglang_engine ...")
    try:
        pip("sglang_setup", "install", "--no-deps", "--target", str(deps), *FRONTEND_BASE)
        env = dict(os.environ, TRITON_INTERPRET="1")
        for _ in range(15):
            mod = missing_module("sglang_setup", boot_lines([site, deps]), ENGINE_PROBE + FRONTEND_PROBE, env)
            if mod is None:
                break
            dist = DIST.get(mod, mod)
            print(f"sglang {version}: installing {dist} (imported by SGLang's tokenizer manager or scheduler)")
            pip("sglang_setup", "install", "--no-deps", "--target", str(deps), dist)
        else:
            raise SystemExit(f"sglang_setup: sglang {version}'s front end still misses modules after 15 installs.")
    except SystemExit as e:
        print(f"sglang {version}: the tokenizer manager or scheduler does not import here ({e}); sglang_engine "
              f"drives the LoRA manager directly for it.")
        return False
    stamp.write_text(probe)
    print(f"sglang {version}: front end ready ({time.time() - t0:.0f} s)")
    return True


def install(version: str) -> Path:
    t0 = time.time()
    root = CACHE / version
    site, deps = site_dirs(version)
    stamp = root / "ok"
    if stamp.exists():
        if install_engine(version):
            install_frontend(version)
        print(f"sglang {version}: ready in {root}")
        return root
    whl = wheel("sglang_setup", "sglang", version, CACHE / "wheels")
    extract(whl, site, keep=KEEP)
    shutil.rmtree(deps, ignore_errors=True)
    pip("sglang_setup", "install", "--no-deps", "--target", str(deps), *BASE)
    env = dict(os.environ, TRITON_INTERPRET="1")
    for _ in range(30):
        mod = _missing_module(site, deps, env)
        if mod is None:
            break
        dist = DIST.get(mod, mod)
        print(f"sglang {version}: installing {dist} (imported by SGLang's LoRA modules)")
        pip("sglang_setup", "install", "--no-deps", "--target", str(deps), dist)
    else:
        raise SystemExit(f"sglang_setup: sglang {version} still misses modules after 30 installs.")
    size = sum(f.stat().st_size for d in (site, deps) for f in d.rglob("*") if f.is_file()) >> 20
    stamp.write_text(f"{whl.name}\n")
    if install_engine(version):
        install_frontend(version)
    print(f"sglang {version}: ready in {root} ({size} MB, {time.time() - t0:.0f} s)")
    return root


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="sglang_setup")
    p.add_argument("version", nargs="+")
    p.add_argument("--for-gpu", metavar="FILE", help="also write one carryable archive (tar.xz) of these releases")
    a = p.parse_args(argv)
    for v in a.version:
        install(v)
    if a.for_gpu:
        from .gpu_tree import archive
        archive(a.version, Path(a.for_gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
