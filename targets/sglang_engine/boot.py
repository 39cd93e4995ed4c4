"""Import an SGLang release whole (its engine modules, not only the LoRA kernels), on a machine without a GPU.

The ``sglang_lora`` target imports only the LoRA backends and kernels, with four engine modules replaced
by stubs. This target drives SGLang's ``LoRAManager``, ``LoRAMemoryPool`` and LoRA layer wrappers, which
import the engine (model configs, parallel state, linear layers, the runtime context); so the release is
imported as the server imports it, with its pure-Python dependencies (transformers at SGLang's pin, set
up by ``scripts/sglang_setup.sh``), in the server's order (``server_args``, then the model runner, then the
LoRA manager: 0.5.5's ``layers.linear`` <-> ``layers.quantization`` import cycle resolves only in that order),
and only two things are not SGLang's:

* ``sglang/__init__.py`` is not run (the front-end language API; no engine code lives there): the package
  object is made with the release's folder as its path, as ``site.install_stubs`` does;
* ``torchvision``, ``sgl_kernel`` and ``vllm`` where none is installed (no CPU build of them for this torch
  here): a finder, after the real ones, serves them and their sub-modules as modules whose every name is a
  placeholder that raises ``StubCalled`` when used (``__version__`` is ``0.0.0``, below any release).
  Multimodal model configs import torchvision at module level; 0.5.5's MoE runner imports
  ``sgl_kernel.silu_and_mul`` at module level; 0.5.6's ``layers/activation.py`` imports vllm's
  ``SiluAndMul`` on a CPU without AMX (on a GPU it takes sgl_kernel's); the LoRA path calls none of them.
  The finder is in place before transformers is imported: from transformers 5.12 (0.5.12 - 0.5.18's pins)
  ``AutoImageProcessor`` is a placeholder without torchvision, and SGLang's configs register image processors
  with it at import.

On the CPU, three adaptations of *where* memory lives, none of *what* SGLang does (``cpu_adapt``): the LoRA
modules and the LogitsProcessor's (``LOGITS_MODULES``) see ``api.cpu_torch()`` (``device("cuda")`` is the CPU,
factories drop ``pin_memory``), as in ``sglang_lora``; ``Tensor.pin_memory()`` returns the tensor (``LoRA
layers`` pin host copies of their offsets); the csgmv kernels' tuned-config lookup names the device ``"cpu"``
(SGLang's default blocks).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from pathlib import Path

import torch

from ..sglang_lora import site
from ..sglang_lora.site import StubCalled

# in the server's order: server_args first (0.5.5's layers.linear <-> quantization cycle resolves only so)
ENGINE_PROBE = ("sglang.srt.server_args", "sglang.srt.model_executor.model_runner", "sglang.srt.lora.lora_manager")
# the adapter-management API's and the scheduler's modules (frontend.py), imported on top where they import
FRONTEND_PROBE = ("sglang.srt.managers.tokenizer_manager", "sglang.srt.managers.scheduler")
LAZY_STUBS = ("torchvision", "sgl_kernel", "vllm")
# the LogitsProcessor's modules (batch.py): they pin host copies of their row indices up to 0.5.2x
LOGITS_MODULES = ("sglang.srt.layers.logits_processor", "sglang.srt.layers.logprob_processor")
PLACEHOLDER_VERSION = "0.0.0"


class _Placeholder(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__module__}.{cls.__name__}.{name}", cls.__module__)


def _placeholder(name: str, module: str) -> type:
    def refuse(*args, **kwargs):
        raise StubCalled(f"{name} belongs to a module the sglang_engine target stubs (targets/sglang_engine/boot.py); "
                         f"this SGLang calls it at run time: drive it another way.")
    return _Placeholder(name.rsplit(".", 1)[-1], (), {"__new__": staticmethod(refuse), "__module__": module})


class LazyStubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``torchvision`` and every sub-module as a module of placeholders (see the module's doc)."""

    def find_spec(self, fullname, path, target=None):
        if any(fullname == p or fullname.startswith(p + ".") for p in LAZY_STUBS):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__version__ = PLACEHOLDER_VERSION  # probes (transformers') parse it: lower than any release

        def attr(name: str):
            if name.startswith("__"):
                raise AttributeError(name)
            return _placeholder(f"{spec.name}.{name}", spec.name)
        m.__getattr__ = attr  # type: ignore[method-assign]
        return m

    def exec_module(self, module) -> None:
        return None


def boot_lines(paths: list[Path]) -> str:
    """Python that puts the release on ``sys.path`` the way ``activate`` does (for the installer's probe)."""
    return (f"sys.path.insert(0, {str(site.ROOT)!r})\nfrom pathlib import Path\n"
            f"from targets.sglang_engine import boot\nboot.activate({[str(p) for p in paths]!r})")


def activate(paths) -> None:
    """The release on ``sys.path``, its package object without ``__init__``, the torchvision finder."""
    paths = [Path(p) for p in paths]
    site.evict_stubs()  # the sglang_lora target's stubbed modules, if it loaded in this process first
    if "sglang" in sys.modules and list(getattr(sys.modules["sglang"], "__path__", [])) != [str(paths[0] / "sglang")]:
        raise RuntimeError("a module named sglang was imported before the tree under test")
    for p in paths:
        if str(p) not in sys.path:
            sys.path.append(str(p))
    if "sglang" not in sys.modules:
        pkg = types.ModuleType("sglang")
        pkg.__path__ = [str(paths[0] / "sglang")]
        sys.modules["sglang"] = pkg
    if not any(isinstance(f, LazyStubFinder) for f in sys.meta_path):
        sys.meta_path.append(LazyStubFinder())  # after the real finders: a real torchvision wins


def cpu_adapt() -> None:
    """The CPU adaptations (module doc): after every LoRA module is imported, so each sees them."""
    from ..sglang_lora.api import cpu_torch
    for pkg in ("sglang.srt.lora", "sglang.kernels.ops.lora"):
        try:
            root = importlib.import_module(pkg)
        except ImportError:
            continue
        base = Path(list(root.__path__)[0])
        for f in sorted(base.rglob("*.py")):  # files, not pkgutil: backend/ is a namespace package
            rel = f.relative_to(base).with_suffix("")
            name = ".".join((pkg, *rel.parts)).removesuffix(".__init__")
            if "trtllm" in name or "marlin" in name:
                continue  # experimental CUDA-only paths the drawn backends never take
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a module of a backend or kernel family not drivable here
                continue
    proxy = cpu_torch()
    for name in LOGITS_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for name, m in list(sys.modules.items()):
        if m is None or not name.startswith(("sglang.srt.lora", "sglang.kernels.ops", *LOGITS_MODULES)):
            continue
        if name.endswith("lora_tuning_config") and hasattr(m, "get_device_name"):
            m.get_device_name = lambda: "cpu"
        if getattr(m, "torch", None) is torch:
            m.torch = proxy
    torch.Tensor.pin_memory = _unpinned  # type: ignore[method-assign]


def adapt(device: str) -> None:
    """Fit the imported release to the device a case runs on (the run's context): the CPU adaptations; on a GPU,
    SGLang's fused ops on their torch backend (``fused_ops_on_torch``)."""
    if device == "cpu":
        cpu_adapt()
        from . import backends
        backends.cpu_adapt()
    else:
        fused_ops_on_torch()


FORCE_FUSED_OP_ENV = "SGLANG_FORCE_FUSED_OP_BACKEND"


def fused_ops_on_torch() -> bool:
    """SGLang's switch ``set_fused_op_backend(KernelBackend.TORCH)`` (``SGLANG_FORCE_FUSED_OP_BACKEND=torch``, the
    release's own debug knob; 0.5.2x ``sglang/kernels/fused_op.py``), unless the user set the variable. Its fused
    ops are base-model ops, none a LoRA one (``clamp_position`` in ``ForwardBatch.init_new``, the logits
    processor's softcaps); their JIT backend compiles CUDA sources with nvcc at the first call, which the GPU
    image cannot (2026-12-07, H100: every step crashed, "Failed to build JIT module
    sgl_kernel_jit_clamp_position_int64_t"); the torch path is the one the CPU runs. False where the release has
    no fused ops or the user chose."""
    if os.environ.get(FORCE_FUSED_OP_ENV):
        return False
    try:
        from sglang.kernels.fused_op import set_fused_op_backend
        from sglang.kernels.spec import KernelBackend
    except ImportError:
        return False
    set_fused_op_backend(KernelBackend.TORCH)
    return True


def _unpinned(self, *args, **kwargs):
    return self


def load() -> types.SimpleNamespace:
    """Import the release in engine mode, the same for every device (``adapt`` then fits it to the run's);
    the modules the runner drives, by name."""
    paths = site.candidate_paths()
    if paths is None:
        raise ImportError("no SGLang tree")
    os.environ.setdefault("SGLANG_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("SGLANG_IS_IN_CI", "false")  # SGLang's default: set as sglang_lora sets it
    os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
    activate(paths)
    for m in ENGINE_PROBE:
        importlib.import_module(m)
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.lora.lora_manager import LoRAManager
    from sglang.srt.lora.lora_registry import LoRARef
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.server_args import ServerArgs

    from . import api
    version = _version(paths[0])
    return types.SimpleNamespace(LoRAManager=LoRAManager, LoRARef=LoRARef, ForwardMode=ForwardMode,
                                 ServerArgs=ServerArgs, LoadConfig=LoadConfig, api=api.load(version),
                                 version=version, tree=paths[0])


def _version(tree: Path) -> str:
    from ..sglang_lora.api import _version as v
    return v(tree)
