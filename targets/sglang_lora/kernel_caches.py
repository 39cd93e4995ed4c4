"""SGLang's per-process caches of compiled kernels, emptied when a case starts: one case is one server.

``cached_triton_kernel`` (``sglang/srt/utils/common.py``, class ``CachedKernel``; installed on CUDA only, so the
interpreter never sees it) keeps the compiled kernel of a key's first launch and launches it for every later
hit, and its keys hold only what one server fixes: the csgmv shrink's is ``(K, NUM_SLICES, BLOCK_M)``
(``kernels/ops/lora/dense/chunked_sgmv_shrink.py:11-13`` in 0.5.23), not ``N`` (slices x the pool's
``max_lora_rank``: the kernel's weight and output strides) nor the dtype. One SGLang process has one pool,
one ``max_lora_rank`` and one dtype; a fuzz worker runs cases of several in one process, so a case would run
the kernel compiled for an earlier case's rank (strides of the other rank: rows of the output left
``torch.empty``, another slot's weights, stores past the output). Both SGLang targets empty every such cache
when a case starts, as a fresh server process starts with none.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import ModuleType


def kernel_modules() -> list[ModuleType]:
    """The loaded SGLang modules that decorate kernels with ``cached_triton_kernel`` (they import it)."""
    return [m for name, m in list(sys.modules.items())
            if (name == "sglang" or name.startswith("sglang.")) and isinstance(m, ModuleType)
            and "cached_triton_kernel" in vars(m)]


def empty(modules: Iterable[ModuleType] | None = None) -> int:
    """Empty every ``CachedKernel`` of ``modules`` (by default ``kernel_modules()``); how many were emptied."""
    emptied = 0
    for module in kernel_modules() if modules is None else modules:
        for obj in list(vars(module).values()):
            clear = getattr(obj, "_clear_cache", None)  # SGLang's CachedKernel (every 0.5.x release here)
            if isinstance(getattr(obj, "kernel_cache", None), dict) and callable(clear):
                clear()
                emptied += 1
    return emptied
