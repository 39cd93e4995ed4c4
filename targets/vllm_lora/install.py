"""Make one vLLM release's LoRA modules importable on a machine with no GPU (and none of vLLM's deps).

``python -m targets.vllm_lora.install VERSION [--for-gpu DIR]`` (``scripts/vllm_setup.sh``):

1. ``pip download vllm==VERSION --no-deps --only-binary=:all:`` into ``.cache/vllm/wheels/``;
2. extract vLLM's own files into ``.cache/vllm/VERSION/site/`` without the compiled CUDA
   libraries (``*.so``) and C++ headers: only Python, JSON configs and the dist-info;
3. install, with ``pip --target .cache/vllm/VERSION/deps``, the real Python packages that the
   imported modules need, pinned as vLLM's own metadata pins them (never torch or Triton: the venv's
   are used); then import the modules the target drives and install (``--no-deps``) whatever is
   still missing, until they import.

With ``--for-gpu DIR`` it also writes DIR (a tree small enough to carry to a GPU machine with no
network): the files of vLLM and of its dependencies that the target really imported, with the
dependencies' compiled parts rebuilt for Python 3.12. Nothing here stubs vLLM.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from pathlib import Path

from ..wheel_site import extract, missing_module, pip, wheel
from .site import CACHE, ENGINE_IMPORTS, IMPORTS, site_dirs

# module name -> distribution name, where they differ
DIST = {"zmq": "pyzmq", "yaml": "pyyaml", "PIL": "pillow", "google": "protobuf", "cv2": "opencv-python-headless",
        "attr": "attrs", "cpuinfo": "py-cpuinfo", "sklearn": "scikit-learn", "pydantic_core": "pydantic-core",
        "huggingface_hub": "huggingface-hub", "typing_inspection": "typing-inspection",
        "annotated_types": "annotated-types", "tvm_ffi": "apache-tvm-ffi", "dateutil": "python-dateutil",
        "jwt": "pyjwt", "opentelemetry": "opentelemetry-api"}
# installed up front (one pip call); the import loop below adds what a release needs beyond these
BASE = ("psutil", "pyzmq", "urllib3", "regex", "transformers", "huggingface-hub", "tqdm", "idna", "pyyaml",
        "h11", "safetensors", "tokenizers", "packaging", "filelock", "requests", "certifi", "charset-normalizer",
        "typing-extensions", "msgspec", "cachetools", "cloudpickle", "pydantic", "pydantic-core",
        "typing-inspection", "annotated-types", "blake3", "fsspec", "einops", "httpx2", "httpcore2", "truststore",
        "cbor2", "gguf", "aiohttp", "multidict", "attrs", "yarl", "propcache", "aiohappyeyeballs", "aiosignal",
        "frozenlist", "openai-harmony", "openai", "sniffio", "anyio", "httpx", "httpcore", "jiter", "distro",
        "pillow", "pybase64", "uvloop", "py-cpuinfo", "prometheus-client", "xgrammar", "apache-tvm-ffi",
        "fastapi", "starlette", "annotated-doc", "partial-json-parser", "llguidance")


def requirements(site: Path) -> dict:
    """{normalised dist name: 'name<spec>'} from vLLM's METADATA (unconditional requirements only)."""
    out = {}
    for meta in site.glob("vllm-*.dist-info/METADATA"):
        for line in meta.read_text(encoding="utf-8").splitlines():
            if not line.startswith("Requires-Dist:") or "extra ==" in line:
                continue
            req = line.split(":", 1)[1].split(";")[0].strip()
            name = re.split(r"[\[<>=!~ ]", req, maxsplit=1)[0]
            out[_norm(name)] = re.sub(r"\[[^\]]*\]", "", req).replace(" ", "")
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pinned(dists, reqs: dict) -> list[str]:
    return [reqs.get(_norm(d), d) for d in dists]


def _missing_module(site: Path, deps: Path, env: dict, imports=IMPORTS) -> str | None:
    return missing_module("vllm_setup", f"sys.path[:0] = {[str(site), str(deps)]!r}", imports, env)


def _donor(version: str, reqs: dict) -> Path | None:
    """The deps/ of the nearest release already set up whose vLLM pins transformers the same way (a sweep of
    many releases: ~5 min and ~400 MB saved a release on a busy machine), or None: the first release, or
    FUZZRUNNER_VLLM_OWN_DEPS=1 (every release gets its own pinned install; the other packages' pins may
    differ a little between neighbouring releases, which the LoRA modules' imports have not shown)."""
    if os.environ.get("FUZZRUNNER_VLLM_OWN_DEPS"):
        return None

    def key(v: str) -> tuple:
        return tuple(int(x) for x in re.findall(r"\d+", v)[:3])
    pin = reqs.get("transformers")
    done = [d for d in CACHE.iterdir() if (d / "ok").exists() and (d / "deps").is_dir() and d.name != version
            and requirements(d / "site").get("transformers") == pin] if CACHE.is_dir() else []
    if not done:
        return None
    near = min(done, key=lambda d: tuple(abs(a - b) for a, b in zip(key(d.name), key(version))))
    return near / "deps"


def _top_up(version: str, site: Path, deps: Path, reqs: dict, env: dict, imports=IMPORTS) -> None:
    """Import ``imports`` and install (``--no-deps``, pinned as vLLM pins it) each missing module, until they import."""
    installed: set[str] = set()
    for _ in range(30):
        mod = _missing_module(site, deps, env, imports)
        if mod is None:
            return
        dist = DIST.get(mod, mod)
        if mod in installed:  # pip installed the distribution, yet the module is still missing: say which
            raise SystemExit(f"vllm_setup: vllm {version} imports the module {mod!r}, which installing "
                             f"{reqs.get(_norm(dist), dist)!r} did not provide; install the distribution that "
                             f"provides it: pip install --no-deps --target {deps} NAME (and add it to DIST in "
                             f"targets/vllm_lora/install.py).")
        installed.add(mod)
        print(f"vllm {version}: installing {reqs.get(_norm(dist), dist)} (imported by vLLM)")
        pip("vllm_setup", "install", "--no-deps", "--target", str(deps), reqs.get(_norm(dist), dist))
    raise SystemExit(f"vllm_setup: vllm {version} still misses modules after 30 installs.")


def _engine_top_up(version: str, site: Path, deps: Path, reqs: dict, env: dict) -> None:
    """``_top_up`` for vllm_engine's modules, never fatal: a release where they fail otherwise (0.22's xgrammar
    against its tvm_ffi, in this probe's path order) keeps its vllm_lora set-up; vllm_engine then says why."""
    try:
        _top_up(version, site, deps, reqs, env, IMPORTS + ENGINE_IMPORTS)
    except SystemExit as e:
        print(f"vllm {version}: vllm_engine's modules left as they are ({str(e)[-200:]})")


def install(version: str) -> Path:
    t0 = time.time()
    root = CACHE / version
    site, deps = site_dirs(version)
    stamp = root / "ok"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1", VLLM_LOGGING_LEVEL="ERROR")
    done = f"imports {','.join(IMPORTS + ENGINE_IMPORTS)}"
    if stamp.exists():
        lines = stamp.read_text().splitlines()
        if done not in lines:  # set up before the engine's modules were imported here: add what they need, once
            _engine_top_up(version, site, deps, requirements(site), env)
            stamp.write_text(f"{lines[0] if lines else ''}\n{done}\n")
        print(f"vllm {version}: ready in {root}")
        return root
    whl = wheel("vllm_setup", "vllm", version, CACHE / "wheels", "--only-binary=:all:")
    extract(whl, site)
    reqs = requirements(site)
    shutil.rmtree(deps, ignore_errors=True)
    donor = _donor(version, reqs)
    if donor is not None:
        # a release set up before with the same transformers pin: its packages, hard-linked (seconds, no
        # disk), then the import loop below adds what this release imports beyond them
        print(f"vllm {version}: dependencies from {donor.parent.name} (same transformers pin)")
        shutil.copytree(donor, deps, copy_function=os.link, symlinks=True)
    else:
        # transformers with its own dependencies resolved (it needs a matching huggingface-hub and tokenizers;
        # none of them pulls torch), the rest --no-deps (several, e.g. xgrammar, would pull a second torch):
        # all pinned as vLLM pins them.
        pip("vllm_setup", "install", "--target", str(deps), *_pinned(["transformers"], reqs))
        have = {_norm(d.name.split("-")[0]) for d in deps.glob("*.dist-info")}
        rest = _pinned([b for b in BASE if _norm(b) not in have], reqs)
        pip("vllm_setup", "install", "--no-deps", "--target", str(deps), *rest)
    _top_up(version, site, deps, reqs, env)
    _engine_top_up(version, site, deps, reqs, env)
    size = sum(f.stat().st_size for d in (site, deps) for f in d.rglob("*") if f.is_file()) >> 20
    stamp.write_text(f"{whl.name}\n{done}\n")
    print(f"vllm {version}: ready in {root} ({size} MB, {time.time() - t0:.0f} s)")
    return root


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="vllm_setup")
    p.add_argument("version")
    p.add_argument("--for-gpu", metavar="DIR", help="also write a carryable tree for a GPU machine (Python 3.12)")
    a = p.parse_args(argv)
    install(a.version)
    if a.for_gpu:
        from .gpu_tree import build
        build(a.version, Path(a.for_gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
