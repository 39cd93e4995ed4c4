"""vLLM's platform as the GPU machine resolves it with a carried tree, on a machine with no GPU: for imports only.

On the GPU machine vLLM's platform is the tree's plugin ``platform.CudaFromTorch`` (a CUDA platform: vLLM's
modules take their CUDA branches at import, e.g. ``fa_utils`` imports ``vllm.vllm_flash_attn``), with neither
``vllm._C`` nor any other compiled extension. ``install()`` makes vLLM resolve the same class here, its
``torch.cuda`` queries answered from constants, so that what the GPU machine imports can be measured
(``gpu_tree``: the files to carry) and tested (``tests/integration/test_vllm_target.py``) without a GPU. Not for
running kernels: nothing here has CUDA. Capability 9.0 (the H100's). Set ``CUDA_VISIBLE_DEVICES=""`` as the CPU
set-up does (``site.prepare_environment``): vLLM then takes Triton as present with no active driver, as on a
machine whose GPUs are not yet initialized, instead of its placeholders (whose configs a Mamba op reads at import
on 9.0).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

SITE = "from targets.vllm_lora import cuda_like\ncuda_like.install()\n"  # a sitecustomize.py that installs it


def platform_class():
    from vllm.platforms.interface import DeviceCapability

    from .platform import CudaFromTorch

    class CudaLikeHere(CudaFromTorch):
        get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(9, 0))
        get_device_name = classmethod(lambda cls, device_id=0: "no GPU here (targets.vllm_lora.cuda_like)")
        num_compute_units = classmethod(lambda cls, device_id=0: 132)
    return CudaLikeHere


class _Platforms(importlib.abc.MetaPathFinder):
    """Sets ``vllm.platforms``' current platform as soon as that module has run (before anything asks it)."""

    def find_spec(self, name, path=None, target=None):
        if name != "vllm.platforms":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module._current_platform = platform_class()()
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    if "vllm.platforms" in sys.modules:
        raise RuntimeError("cuda_like.install(): vllm.platforms is already imported; install it first")
    sys.meta_path.insert(0, _Platforms())
