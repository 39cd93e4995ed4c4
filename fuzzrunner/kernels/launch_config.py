"""Block sizes for the LoRA kernels: few programs on the CPU, vLLM-like on a GPU.

The interpreter costs about a millisecond per program instance whatever its size
(docs/background.md), so on the CPU one block covers the whole (small) M and N
and split-K is off. On a GPU we keep vLLM's shapes, split-K included, so that the
atomics path and the multi-block grids are exercised.
"""

from dataclasses import dataclass

import triton


@dataclass(frozen=True)
class BlockSizes:
    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 2


def _cover(n: int, lo: int = 16, hi: int = 128) -> int:
    return max(lo, min(hi, triton.next_power_of_2(max(n, 1))))


@dataclass(frozen=True)
class KernelConfig:
    """``interpreted`` picks the CPU shapes; ``split_k`` > 1 only applies on a GPU."""

    interpreted: bool
    split_k: int = 4

    def shrink(self, M: int, R: int, K: int) -> BlockSizes:
        if self.interpreted:
            return BlockSizes(_cover(M, hi=64), _cover(R, hi=64), _cover(K, hi=256))
        return BlockSizes(32, 16, 32, split_k=self.split_k)

    def expand(self, M: int, N: int, R: int) -> BlockSizes:
        if self.interpreted:
            return BlockSizes(_cover(M, hi=64), _cover(N, hi=256), _cover(R, hi=64))
        return BlockSizes(64, 64, 16)

    def bgmv(self, M: int, N: int, R: int, K: int) -> BlockSizes:
        if self.interpreted:
            return BlockSizes(_cover(M, lo=1, hi=16), _cover(N, hi=256), _cover(K, hi=256))
        return BlockSizes(4, _cover(N, hi=256), _cover(K, hi=256), num_warps=4)
