"""A case-shape palette: a few shapes a campaign draws from, so that compiled kernel variants repeat.

Compiled Triton specializes a kernel per shape (dtype, constexpr sizes, slice counts, the block sizes an
engine's config table picks for a token count): a campaign whose every case draws a new shape compiles (or
loads) a new variant per case, seconds each on a GPU. With a palette of ``size`` shapes, a campaign's cases
draw their shape from the palette only, so after the first few cases every variant is warm (and, with the
shared Triton cache, warm for every worker and the next campaign). The palette rotates with ``rotation``
(the campaign's seed): palette ``r`` is the window ``[r*size, (r+1)*size)`` of one fixed permutation of the
whole shape space, so ``ceil(len(space) / size)`` consecutive rotations cover every shape, and random seeds
reach each shape at the rate ``size / len(space)`` a campaign. What a target calls its shape is its own
(``targets/vllm_lora/cases.py``: the sizes vLLM's kernels are compiled for); the rest of a case (its ops,
its slots) is drawn in full.

Standard library only: targets import it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from .errors import InvalidArgument

T = TypeVar("T")
_PERMUTATION_SEED = 46  # one fixed permutation for every campaign: rotations tile it


@dataclass(frozen=True)
class Palette:
    size: int        # shapes a campaign draws from
    rotation: int    # which window of the shape space (the campaign's seed)

    def __post_init__(self):
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise InvalidArgument(f"palette size={self.size!r} must be a whole number of shapes, at least 1 "
                                  f"(0 in the settings switches the palette off).")

    def choose(self, space: Sequence[T]) -> list[T]:
        """This rotation's shapes of ``space`` (all of it if it has at most ``size``), in the space's order (the
        first is the smallest there: shrinking moves towards it)."""
        n = len(space)
        if n <= self.size:
            return list(space)
        order = list(range(n))
        random.Random(_PERMUTATION_SEED).shuffle(order)
        start = (self.rotation % -(-n // self.size)) * self.size
        picked = {order[(start + i) % n] for i in range(self.size)}
        return [space[i] for i in sorted(picked)]

    def rotations(self, n: int) -> int:
        """How many consecutive rotations cover a space of ``n`` shapes."""
        return max(1, -(-n // self.size))


def of_settings(size: int, seed: int) -> Palette | None:
    """The campaign's palette (``Settings.shape_palette`` shapes, rotated by the campaign's seed); None: off."""
    return Palette(size, seed) if size else None
