"""A vLLM platform plugin for a GPU machine that has vLLM's Python files but not its compiled extension.

vLLM resolves its platform on first use (inside ``import vllm`` in recent releases). On a CUDA machine it
picks ``vllm.platforms.cuda``, whose first lines import ``vllm._C``: absent from a carried tree (no .so
files; they would not match the machine's torch anyway). vLLM's own extension point,
the ``vllm.platform_plugins`` entry-point group (out-of-tree platforms win over built-in ones), takes
this class instead. The LoRA ops ask the platform only whether PDL may be used (CUDA, capability >= 9.0)
and, for MoE, the SM count: all answered from torch. Registered by the GPU tree's
``deps/fuzzrunner_vllm_platform-0.dist-info/entry_points.txt`` (gpu_tree.py). When the GPU is hidden
(a CPU triage worker on that machine), it answers ``UnspecifiedPlatform``, what vLLM resolves on a
machine with no GPU; vLLM's own probe would count the GPU through NVML and import the absent CUDA platform.

Without ``vllm._C`` the platform still has to answer vLLM's *kernel queries*: ops of ``vllm._C`` that take a
device capability and say whether this build has a compiled kernel for it (``cutlass_scaled_mm_supports_fp8``
...). vLLM asks some at import on a CUDA platform (``w8a8_utils.CUTLASS_BLOCK_FP8_SUPPORTED``, pulled in by
``vllm.lora.layers``), so without an answer no LoRA layer, ``PunicaWrapperGPU`` or adapter manager imports.
``import_kernels`` (vLLM's hook that loads the compiled ops, run by ``vllm._custom_ops`` at import) serves
each absent query with False, "no such kernel in this build": the truth (the tree carries no compiled
kernel), and what vLLM's own wrappers answer where the op is missing (``cutlass_group_gemm_supported``,
``mxfp4_experts_quant_supported``: "Return False on builds where the CUDA helper is not available"). No
kernel is served: a call of one is still vLLM's "no attribute" error.

It also imports ``vllm.vllm_flash_attn`` as vLLM's package is where none of its extensions is built (vLLM's
``__init__`` without its refusal, ``FA2_AVAILABLE = FA3_AVAILABLE = False``): on a CUDA platform
``v1/attention/backends/fa_utils.py`` imports it at import, and ``vllm.lora.layers`` imports fa_utils (through
the model loader and the attention layers). Attention never runs in these targets; a call of a flash-attention
kernel fails on the absent ``torch.ops._vllm_fa2_C`` as in such a build.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys

# vLLM's kernel queries (``torch.ops._C.NAME(int capability) -> bool``) across releases
KERNEL_QUERIES = ("cutlass_scaled_mm_supports_fp8", "cutlass_scaled_mm_supports_block_fp8",
                  "cutlass_scaled_mm_supports_fp4", "cutlass_group_gemm_supported", "mxfp4_experts_quant_supported")
_LIBRARY: list = []  # the fragment serving them (kept alive: a dropped Library unregisters its ops)


def serve_absent_kernel_queries() -> list[str]:
    """Define each of KERNEL_QUERIES that ``torch.ops._C`` lacks, answering False; the names served."""
    import torch
    absent = [n for n in KERNEL_QUERIES if not hasattr(torch.ops._C, n)]
    if not absent:
        return []
    lib = torch.library.Library("_C", "FRAGMENT")  # noqa: TOR901 - vLLM's namespace, absent here
    for name in absent:
        lib.define(f"{name}(int cuda_device_capability) -> bool")
        lib.impl(name, _no_such_kernel, "CompositeExplicitAutograd")
    _LIBRARY.append(lib)
    return absent


def _no_such_kernel(cuda_device_capability: int) -> bool:
    return False


FLASH_ATTN = "vllm.vllm_flash_attn"


def import_flash_attn_without_extensions() -> bool:
    """Import ``vllm.vllm_flash_attn`` from vLLM's own files with its ``if not (FA2_AVAILABLE or FA3_AVAILABLE):
    raise ImportError`` left out, where no extension of it is here; True if it did."""
    if FLASH_ATTN in sys.modules:
        return False
    import vllm
    pkg = os.path.join(os.path.dirname(os.path.abspath(vllm.__file__)), "vllm_flash_attn")
    init = os.path.join(pkg, "__init__.py")
    if not os.path.isfile(init) or any(f.startswith("_vllm_fa") and f.endswith(".so") for f in os.listdir(pkg)):
        return False  # not carried (the import fails as before), or built: vLLM's own import
    with open(init, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    tree.body = [n for n in tree.body if not (isinstance(n, ast.If) and all(isinstance(b, ast.Raise) for b in n.body))]
    spec = importlib.util.spec_from_file_location(FLASH_ATTN, init, submodule_search_locations=[pkg])
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[FLASH_ATTN] = mod
    try:
        exec(compile(tree, init, "exec"), mod.__dict__)  # noqa: S102 - vLLM's own package init
    except BaseException:
        del sys.modules[FLASH_ATTN]
        raise
    return True


def plugin() -> str | None:
    import torch
    if importlib.util.find_spec("vllm._C") is not None:
        return None
    if not torch.cuda.is_available():
        # The target runs on the CPU here (the CPU triage of a GPU finding hides the GPU), but vLLM
        # would still count the GPU through NVML and pick its CUDA platform, absent from the tree:
        # take the platform a machine with no GPU gets.
        return "vllm.platforms.interface.UnspecifiedPlatform"
    return "targets.vllm_lora.platform.CudaFromTorch"


class _CudaAnswers:
    """A CUDA platform's answers from torch (mixed into vLLM's ``Platform`` by ``CudaFromTorch``)."""

    @classmethod
    def import_kernels(cls) -> None:
        super().import_kernels()  # type: ignore[misc]  # vLLM's: vllm._C (absent: a warning), optional extensions
        serve_absent_kernel_queries()
        import_flash_attn_without_extensions()

    @classmethod
    def get_device_capability(cls, device_id: int = 0):
        import torch
        from vllm.platforms.interface import DeviceCapability
        return DeviceCapability(*torch.cuda.get_device_capability(device_id))

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        import torch
        return torch.cuda.get_device_name(device_id)

    @classmethod
    def num_compute_units(cls, device_id: int = 0) -> int:
        import torch
        return torch.cuda.get_device_properties(device_id or 0).multi_processor_count

    # what vLLM's CudaPlatformBase answers (the base Platform raises NotImplementedError), as the engine pieces
    # ask it: the adapter manager's punica wrapper, the distributed set-up, seeding, dtype checks
    @classmethod
    def get_punica_wrapper(cls) -> str:
        return "vllm.lora.punica_wrapper.punica_gpu.PunicaWrapperGPU"

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "vllm.distributed.device_communicators.cuda_communicator.CudaCommunicator"

    @classmethod
    def set_device(cls, device) -> None:
        import torch
        torch.cuda.set_device(device)
        torch.zeros(1, device=device)  # set eagerly, as vLLM does (pytorch/pytorch#155668)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        import torch
        torch.cuda.manual_seed_all(seed)

    @classmethod
    def device_count(cls) -> int:
        import torch
        return torch.cuda.device_count()

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        import torch
        return int(torch.cuda.get_device_properties(device_id or 0).total_memory)

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        import torch
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.max_memory_allocated(device)

    @property
    def supported_dtypes(self) -> list:
        import torch
        if self.has_device_capability(80):  # type: ignore[attr-defined]
            return [torch.bfloat16, torch.float16, torch.float32]
        return [torch.float16, torch.float32] if self.has_device_capability(60) else [torch.float32]  # type: ignore[attr-defined]

    @classmethod
    def check_if_supports_dtype(cls, dtype) -> None:
        import torch
        if dtype == torch.bfloat16 and not cls.has_device_capability(80):  # type: ignore[attr-defined]
            raise ValueError(f"Bfloat16 is only supported on GPUs with compute capability of at least 8.0 (vLLM's "
                             f"CUDA platform); {cls.get_device_name()} has {cls.get_device_capability()}.")


def __getattr__(name: str):
    if name != "CudaFromTorch":
        raise AttributeError(name)
    from vllm.platforms.interface import Platform, PlatformEnum

    class CudaFromTorch(_CudaAnswers, Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"
        ray_device_key = "GPU"
        device_control_env_var = "CUDA_VISIBLE_DEVICES"

    globals()["CudaFromTorch"] = CudaFromTorch
    return CudaFromTorch
