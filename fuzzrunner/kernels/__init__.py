"""Triton LoRA kernels and their float64 references. Imports nothing from fuzzrunner."""

from .launch_config import BlockSizes, KernelConfig
from .lora_bgmv import lora_bgmv
from .lora_expand import lora_expand
from .lora_shrink import lora_shrink

__all__ = ["BlockSizes", "KernelConfig", "lora_bgmv", "lora_expand", "lora_shrink"]
