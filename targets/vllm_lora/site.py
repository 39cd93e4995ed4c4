"""Where the vLLM under test comes from, and the environment it must be imported in.

Order: ``FUZZRUNNER_VLLM_SITE`` (a directory holding ``vllm/``, e.g. a tree carried to a GPU
machine; its ``deps/`` sub-directory, if any, too); else an installed ``vllm``; else the tree
``scripts/vllm_setup.sh VERSION`` made under ``.cache/vllm/VERSION/`` for
``FUZZRUNNER_VLLM_VERSION`` (default: the pinned ``PINNED``).

Two settings are vLLM's own, made before its first import:
* ``CUDA_VISIBLE_DEVICES=""`` on the CPU: ``vllm.triton_utils`` disables Triton (swapping in a
  placeholder whose ``@jit`` returns the plain Python function) when Triton reports no active
  driver, unless CUDA_VISIBLE_DEVICES is empty (its Ray case). Under ``TRITON_INTERPRET=1`` no
  driver is active, so without this the "kernels" would run as Python, not as Triton programs.
The CPU launch shapes (split_k=1, small blocks) are set in api.py, as vLLM's tuned JSON configs would
set them: that lookup calls ``torch.cuda.get_device_name()`` and cannot run on a CPU.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("FUZZRUNNER_VLLM_CACHE") or ROOT / ".cache" / "vllm")
PINNED = "0.33.0"  # what scripts/setup.sh installs for CI
IMPORTS = ("vllm.lora.ops.triton_ops", "vllm.lora.punica_wrapper.punica_gpu")  # vllm_lora's: the set-up needs them
# vllm_engine's too (the managers and the runner mixin: 0.14 imports mistral_common, opentelemetry... through them,
# which vllm_lora's never reach); the set-up adds what they miss, and goes on without them where they fail otherwise
ENGINE_IMPORTS = ("vllm.lora.worker_manager", "vllm.v1.worker.lora_model_runner_mixin")
_VERSION = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


def site_dirs(version: str) -> tuple[Path, Path]:
    return CACHE / version / "site", CACHE / version / "deps"


def wanted_version() -> str:
    return os.environ.get("FUZZRUNNER_VLLM_VERSION") or PINNED


def candidate_paths() -> list[Path] | None:
    """Directories to put on sys.path; [] when vllm is importable as installed; None when nothing is set up."""
    explicit = os.environ.get("FUZZRUNNER_VLLM_SITE")
    if explicit:
        base = Path(explicit)
        return [base] + ([base / "deps"] if (base / "deps").is_dir() else [])
    if "vllm" in sys.modules or importlib.util.find_spec("vllm") is not None:
        return []
    site, deps = site_dirs(wanted_version())
    if (site.parent / "ok").exists():
        return [site, deps]
    return None


def release_of(tree: Path) -> str:
    """The vLLM release a tree holds: its dist-info's version, else ``vllm/_version.py``'s, else ``unknown``."""
    for d in sorted(tree.glob("vllm-*.dist-info")):
        return d.name[len("vllm-"):-len(".dist-info")]
    try:
        m = _VERSION.search((tree / "vllm" / "_version.py").read_text(encoding="utf-8"))
    except OSError:
        m = None
    return m.group(1) if m else "unknown"


def explicit_site_problem() -> str | None:
    """What makes ``FUZZRUNNER_VLLM_SITE=DIR`` unusable, in one line (None when it is fine or unset): DIR must hold
    ``vllm/`` (else an installed vLLM would be imported instead, in silence) and vLLM's dist-info (in DIR or
    DIR/deps): vLLM reads its own version from it at import, and 0.24 - 0.31 switch Triton off without it (their
    LoRA kernels undefined: ``NameError: LoRAKernelMeta``), later releases fail their platform probe."""
    explicit = os.environ.get("FUZZRUNNER_VLLM_SITE")
    if not explicit:
        return None
    base = Path(explicit)
    if not (base / "vllm").is_dir():
        return (f"FUZZRUNNER_VLLM_SITE={explicit!r} holds no vllm/ package; give the directory that holds vllm/ "
                f"(e.g. .cache/vllm/VERSION/site), or unset it.")
    if not any(next(d.glob("vllm-*.dist-info"), None) for d in (base, base / "deps")):
        v = release_of(base) if release_of(base) != "unknown" else "VERSION"
        return (f"FUZZRUNNER_VLLM_SITE={explicit!r} holds vllm/ but no vllm-*.dist-info (in it or its deps/): vLLM "
                f"reads its own version from it at import, and without it switches Triton off (NameError: "
                f"LoRAKernelMeta); copy the release's in (cp -al .cache/vllm/{v}/site/vllm-{v}.dist-info {explicit}/).")
    return None


def prepare_environment(device: str) -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs at import; our reports are the output
    # ... and where vLLM has not configured its loggers yet (they fall back to the root's stderr),
    # its "Failed to import from vllm._C" warning would open every command's output
    logging.getLogger("vllm").setLevel(getattr(logging, os.environ["VLLM_LOGGING_LEVEL"].upper(), logging.ERROR))
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def activate(paths: list[Path]) -> None:
    for p in paths:
        if str(p) not in sys.path:
            sys.path.append(str(p))  # after the venv: its torch and Triton win over anything in deps


def tree_of(paths: list[Path]) -> Path:
    """The directory holding the ``vllm/`` package that ``paths`` (from ``candidate_paths``) would import."""
    if paths:
        return paths[0]
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("vllm")
    return Path(list(spec.submodule_search_locations)[0]).parent


def activate_first(path: Path) -> None:
    """Put ``path`` before everything (a patched copy of vLLM must win over the tree it was copied from)."""
    if "vllm" in sys.modules:
        raise RuntimeError("vllm was imported before the patched copy could be put first on sys.path")
    sys.path.insert(0, str(path))
