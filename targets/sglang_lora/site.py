"""Where the SGLang under test comes from, and how its LoRA modules are imported without the engine.

Order: ``FUZZRUNNER_SGLANG_SITE`` (a directory holding ``sglang/``, e.g. a tree carried to a GPU
machine; its ``deps/`` sub-directory too, if any); else the tree ``scripts/sglang_setup.sh VERSION``
made under ``.cache/sglang/VERSION/`` for ``FUZZRUNNER_SGLANG_VERSION`` (default ``PINNED``).

SGLang's LoRA backends import, for type names and configuration only, modules that pull the whole
engine (model configs, transformers, torchvision, the HTTP server). Four modules are replaced, each
by a module holding exactly the names the LoRA code takes from it (``STUBS``, docs/sglang.md):

* ``sglang`` itself: the package object, without running ``sglang/__init__.py`` (the front-end
  language API and Hugging Face patches; no LoRA code lives there);
* ``sglang.srt.model_executor.forward_batch_info``: ``ForwardMode`` and ``CaptureHiddenMode``
  compiled from the release's own file (SGLang's code), ``ForwardBatch`` our plain record of the
  fields the LoRA code reads (``batch.ForwardBatch``);
* ``sglang.srt.utils.hf_transformers_utils``: ``AutoConfig`` (an annotation in ``lora/utils.py``);
* ``sglang.srt.server_args``: ``ServerArgs`` (an annotation in the chunked backend; the target
  passes its own record with ``max_lora_chunk_size``);
* ``torchvision.io`` where no torchvision matching this torch is importable: ``decode_jpeg``, which
  ``sglang.srt.utils.common`` of 0.5.10 - 0.5.20 imports at module level for image inputs.

A stubbed name that the code under test calls raises ``StubCalled`` (a target error, never a
silent wrong answer).

The stubs stay with this target: they replace real modules of the release, which the ``sglang_engine``
target imports whole. Loaded after this one in a process (a campaign or pytest session that loads both,
``doctor --engines`` until each target loaded in a process of its own), the engine met the stub of
``hf_transformers_utils`` and was "unavailable" (cannot import name 'get_config'). So ``evict_stubs`` (the
engine calls it before it imports the release) takes this target's modules out of ``sys.modules`` (they
live on in the target's ``API``), and a release the engine imported already is not stubbed over
(``activate``): the LoRA modules are then the engine's, the same files.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import sys
import types
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("FUZZRUNNER_SGLANG_CACHE") or ROOT / ".cache" / "sglang")
PINNED = "0.5.23"  # what scripts/setup.sh sets up for CI
STUBS = ("sglang", "sglang.srt.model_executor.forward_batch_info", "sglang.srt.utils.hf_transformers_utils",
         "sglang.srt.server_args", "torchvision.io")


# What SGLang's own modules warn of while they import, which a user of fuzzrunner cannot act on: on a machine without
# CUDA 0.5.23 says "Only CUDA, HIP and XPU support AWQ currently." (quantization/awq/awq.py), the same of GGUF
# (quantization/gguf.py) and "Triton is not supported on current platform, roll back to CPU." (fla/utils.py), in
# `fuzzrunner faults`, every campaign and every exported repro (a new user's trial). Only these categories, only
# from SGLang's modules, only while they import (``quiet_imports``): our warnings, the user's and SGLang's at run
# time still show.
IMPORT_NOISE = (UserWarning, DeprecationWarning, PendingDeprecationWarning, FutureWarning)


@contextlib.contextmanager
def quiet_imports(package: str = "sglang"):
    """While SGLang imports (the target's load), its own modules' ``IMPORT_NOISE`` is not shown; the filters as they
    were afterwards."""
    with warnings.catch_warnings():
        for category in IMPORT_NOISE:
            warnings.filterwarnings("ignore", category=category, module=rf"{re.escape(package)}(\.|$)")
        yield


class StubCalled(RuntimeError):
    """SGLang's LoRA code used a name of a module the target replaces (site.STUBS) at run time."""


def site_dirs(version: str) -> tuple[Path, Path]:
    return CACHE / version / "site", CACHE / version / "deps"


def wanted_version() -> str:
    return os.environ.get("FUZZRUNNER_SGLANG_VERSION") or PINNED


def candidate_paths() -> list[Path] | None:
    """Directories to put on sys.path, or None when no SGLang tree is there."""
    explicit = os.environ.get("FUZZRUNNER_SGLANG_SITE")
    if explicit:
        base = Path(explicit)
        return [base] + ([base / "deps"] if (base / "deps").is_dir() else [])
    site, deps = site_dirs(wanted_version())
    if (site.parent / "ok").exists():
        return [site, deps]
    return None


def _placeholder(module: str, name: str) -> type:
    def refuse(*args, **kwargs):
        raise StubCalled(f"{module}.{name} is a type name the target stubs (targets/sglang_lora/site.py); "
                         f"this SGLang calls it at run time: drive it another way.")
    return type(name, (), {"__new__": staticmethod(refuse), "__module__": module})


def _module(name: str, **names) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__dict__.update(names)
    m.__fuzzrunner_stub__ = True  # type: ignore[attr-defined]
    sys.modules[name] = m
    return m


def _is_stub(module) -> bool:
    return bool(getattr(module, "__fuzzrunner_stub__", False))


def _release_modules() -> list[str]:
    return [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]


def stubbed() -> bool:
    """Whether this target's stubs of the release's modules are in ``sys.modules``."""
    return any(_is_stub(sys.modules.get(n)) for n in STUBS if n.startswith("sglang"))


def imported_whole() -> bool:
    """Whether the release was imported with its real engine modules (by ``sglang_engine``)."""
    return any(n in sys.modules and not _is_stub(sys.modules[n]) for n in STUBS[1:] if n.startswith("sglang"))


def evict_stubs() -> int:
    """Take every module of the release imported under this target's stubs out of ``sys.modules`` (the
    target's ``API`` holds those it runs), so that the release imports again with its real modules; how
    many were taken out. Nothing while no stub is there."""
    if not stubbed():
        return 0
    names = _release_modules()
    for n in names:
        del sys.modules[n]
    return len(names)


def _forward_modes(tree: Path, module: types.ModuleType) -> None:
    """``ForwardMode`` / ``CaptureHiddenMode`` as the release defines them: their class bodies, compiled
    from the release's ``forward_batch_info.py`` (the rest of that file imports the whole engine)."""
    src = (tree / "sglang/srt/model_executor/forward_batch_info.py").read_text(encoding="utf-8")
    body = [n for n in ast.parse(src).body if isinstance(n, ast.ClassDef)
            and n.name in ("ForwardMode", "CaptureHiddenMode")]
    exec("from __future__ import annotations\nfrom enum import IntEnum, auto\n"
         "from functools import total_ordering, lru_cache\n", module.__dict__)
    exec(compile(ast.Module(body=body, type_ignores=[]), str(tree / "sglang/srt/model_executor/forward_batch_info.py"),
                 "exec"), module.__dict__)


def install_stubs(tree: Path) -> None:
    from .batch import ForwardBatch
    pkg = _module("sglang")
    pkg.__path__ = [str(tree / "sglang")]  # a package: its sub-modules import from the tree
    fb = _module("sglang.srt.model_executor.forward_batch_info", ForwardBatch=ForwardBatch)
    _forward_modes(tree, fb)
    _module("sglang.srt.utils.hf_transformers_utils",
            AutoConfig=_placeholder("sglang.srt.utils.hf_transformers_utils", "AutoConfig"))
    _module("sglang.srt.server_args", ServerArgs=_placeholder("sglang.srt.server_args", "ServerArgs"),
            get_global_server_args=_placeholder("sglang.srt.server_args", "get_global_server_args"))
    if not _imports_torchvision_at_load(tree):
        return  # 0.5.2x imports it lazily: a stub would only mislead transformers' availability probe
    try:
        import torchvision.io  # noqa: F401
    except Exception:  # absent, or built for another torch (its operators fail to register)
        for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[k]
        tv = _module("torchvision")
        tv.__path__ = []
        tv.io = _module("torchvision.io", decode_jpeg=_placeholder("torchvision.io", "decode_jpeg"))
        _IMPORT_ONLY.extend([tv, tv.io])


def _imports_torchvision_at_load(tree: Path) -> bool:
    common = tree / "sglang/srt/utils/common.py"
    return common.exists() and any(line.startswith(("from torchvision", "import torchvision"))
                                   for line in common.read_text(encoding="utf-8").splitlines())


# Stubs needed only while SGLang's modules import (they bind the names then): once imported, they leave
# sys.modules, so that nothing else in the process takes them for the real package (vLLM's
# importlib.util.find_spec("torchvision") raised "torchvision.__spec__ is None" on the stub).
_IMPORT_ONLY: list[types.ModuleType] = []


def drop_import_stubs() -> None:
    for m in _IMPORT_ONLY:
        if sys.modules.get(m.__name__) is m:
            del sys.modules[m.__name__]
    _IMPORT_ONLY.clear()


def prepare_environment(device: str) -> None:
    os.environ.setdefault("SGLANG_LOGGING_LEVEL", "ERROR")
    if device == "cpu":
        os.environ.setdefault("SGLANG_IS_IN_CI", "false")


def activate(paths: list[Path]) -> None:
    if "sglang" in sys.modules and not hasattr(sys.modules["sglang"], "__path__"):
        raise RuntimeError("a module named sglang was imported before the tree under test")
    for p in paths:
        if str(p) not in sys.path:
            sys.path.append(str(p))
    if imported_whole():
        return  # sglang_engine imported the release: stubbing over its modules would break it (module doc)
    install_stubs(paths[0])
