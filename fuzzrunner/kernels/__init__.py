"""Triton LoRA kernels and their float64 references. Imports nothing from fuzzrunner but ``_env``.

Triton reads TRITON_INTERPRET when a kernel is decorated: the device is decided first,
whatever path led here (``fuzzrunner/__init__.py`` no longer does it on import).
"""

from .. import _env

_env.configure()

from .launch_config import BlockSizes, KernelConfig  # noqa: E402
from .lora_bgmv import lora_bgmv  # noqa: E402
from .lora_expand import lora_expand  # noqa: E402
from .lora_shrink import lora_shrink  # noqa: E402

__all__ = ["BlockSizes", "KernelConfig", "lora_bgmv", "lora_expand", "lora_shrink"]
