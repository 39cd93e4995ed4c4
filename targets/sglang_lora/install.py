"""Make one SGLang release's LoRA modules importable on a machine with no GPU.

``python -m targets.sglang_lora.install VERSION [--for-gpu FILE.tar.xz]`` (``scripts/sglang_setup.sh``):

1. ``pip download sglang==VERSION --no-deps`` into ``.cache/sglang/wheels/`` (3-40 MB);
2. extract SGLang's files into ``.cache/sglang/VERSION/site/`` without compiled code (``*.so``, CUDA and
   C++ sources): Python, JSON configs, the dist-info;
3. import the modules the target drives (with site.py's stubs) and ``pip install --no-deps --target
   .cache/sglang/VERSION/deps`` whatever is missing, until they import (never torch or Triton).

``--for-gpu FILE`` also archives the trees for a GPU machine with no network (gpu_tree.py, scripts/gpu_sglang.sh).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from ..wheel_site import extract, missing_module, pip, wheel
from .site import CACHE, site_dirs

DIST = {"zmq": "pyzmq", "yaml": "pyyaml", "PIL": "pillow", "google": "protobuf", "IPython": "ipython",
        "pydantic_core": "pydantic-core", "typing_inspection": "typing-inspection",
        "annotated_types": "annotated-types", "tvm_ffi": "apache-tvm-ffi", "dateutil": "python-dateutil",
        "huggingface_hub": "huggingface-hub", "cpuinfo": "py-cpuinfo", "opentelemetry": "opentelemetry-api"}
BASE = ("orjson", "msgspec", "psutil", "pybase64", "anyio", "sniffio", "starlette", "tqdm", "pillow", "pyzmq",
        "pydantic", "pydantic-core", "typing-inspection", "annotated-types", "ipython", "requests", "urllib3",
        "idna", "certifi", "charset-normalizer")
PROBE = ("sglang.srt.lora.utils", "sglang.srt.lora.backend.triton_backend", "sglang.srt.lora.backend.chunked_backend")


def _missing_module(site: Path, deps: Path, env: dict) -> str | None:
    root = Path(__file__).resolve().parents[2]
    setup = (f"sys.path.insert(0, {str(root)!r})\nfrom pathlib import Path\nfrom targets.sglang_lora import site\n"
             f"site.activate([Path({str(site)!r}), Path({str(deps)!r})])")
    return missing_module("sglang_setup", setup, PROBE, env)


def install(version: str) -> Path:
    t0 = time.time()
    root = CACHE / version
    site, deps = site_dirs(version)
    stamp = root / "ok"
    if stamp.exists():
        print(f"sglang {version}: ready in {root}")
        return root
    whl = wheel("sglang_setup", "sglang", version, CACHE / "wheels")
    extract(whl, site)
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
