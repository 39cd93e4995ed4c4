"""The record of a tracked byte span, and of one bad access to it: what both modes report from.

A span is a tracked byte range ``[start, end)`` with a name, an element size and a shape. The CPU mode's
record (``memory.Allocation``) adds the epoch of each byte's last write in host memory; the device mode's
(``gpu/regions.Region``) a device tensor of epochs per element. Where the epochs live is the back end's;
what a span is, and which element a byte is in, is this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NEVER = -1  # the epoch of a byte never written


@dataclass(eq=False)
class Span:
    start: int
    nbytes: int
    name: str
    per_step: bool               # must be written in the op that reads it (else the read is stale)
    itemsize: int
    shape: tuple

    end: int = field(init=False)  # start + nbytes (read at every lookup: a field, not a property)

    def __post_init__(self) -> None:
        self.end = self.start + self.nbytes

    def element(self, byte_offset: int) -> tuple:
        """The element index (in the span's own shape) holding ``byte_offset``."""
        flat = byte_offset // max(self.itemsize, 1)
        if self.shape and int(np.prod(self.shape)) * self.itemsize == self.nbytes:
            return tuple(int(i) for i in np.unravel_index(flat, self.shape))
        return (flat,)


@dataclass
class BadAccess:
    kind: str
    allocation: Span | None
    address: int
    byte_offset: int   # into the span (or distance to the nearest one for out-of-bounds)
    lane: int          # index into the checked address array
    count: int         # how many lanes of this access were bad this way
    written_epoch: int = NEVER
    offsets: np.ndarray | None = None  # byte offsets (into the span) of every bad lane's bytes
    view: list[str] | None = None      # out of these registered views of its storage (launch_views.py)
