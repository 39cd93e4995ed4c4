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
"""

from __future__ import annotations

import importlib.util


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


def __getattr__(name: str):
    if name != "CudaFromTorch":
        raise AttributeError(name)
    import torch
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    class CudaFromTorch(Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"
        ray_device_key = "GPU"
        device_control_env_var = "CUDA_VISIBLE_DEVICES"

        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return DeviceCapability(*torch.cuda.get_device_capability(device_id))

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return torch.cuda.get_device_name(device_id)

        @classmethod
        def num_compute_units(cls, device_id: int = 0) -> int:
            return torch.cuda.get_device_properties(device_id or 0).multi_processor_count

    globals()["CudaFromTorch"] = CudaFromTorch
    return CudaFromTorch
