"""The host side of the device shadow: tracked regions, their shadow arrays, launch tables, the ring.

A *region* is a tracked byte range ``[start, end)`` with an element size; its shadow is an int32
device tensor with one epoch per element (``NEVER`` = never written), allocated on the region's
device. Per launch, the host writes a small table (the launch id, then one row per region: start,
end, shadow offset from the arena base, itemsize, flags) and copies it to the device from pinned
memory without waiting (a CUDA graph capturing the launch keeps the pinned rows alive). Bad lanes
come back through the ring (``device_checks.py``), read once per op.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..memory import NEVER, Allocation
from . import device_checks as dc

CAP = 1024  # ring entries kept per op; the counter counts every bad lane
_POOL: torch.Tensor | None = None  # pinned launch tables, shared by the cases of a process


@dataclass(eq=False)
class Region:
    start: int
    nbytes: int
    name: str
    per_step: bool
    itemsize: int
    shape: tuple
    shadow: torch.Tensor | None      # int32 epochs per element; None: written memory (an untracked argument)
    auto: bool = False
    fully_at: int | None = None      # epoch of a write that covered every element (host knowledge, no sync)
    maybe_never: bool = True         # some element may still be never written

    @property
    def end(self) -> int:
        return self.start + self.nbytes

    def allocation(self) -> Allocation:
        """The CPU oracle's record of the same bytes, for its report words (``report.describe``)."""
        return Allocation(self.start, self.nbytes, self.name, self.per_step, self.itemsize, self.shape, self.auto)

    def clean(self, epoch: int) -> bool:
        """No read of it can be reported now: every element written, and this op if per-step."""
        if self.per_step:
            return self.fully_at == epoch
        return not self.maybe_never


@dataclass
class Launch:
    """What the ring's entries of one launch refer to."""
    kernel: str
    path: str
    regions: list
    op_index: int
    keep: list = field(default_factory=list)


class DeviceShadow:
    """Regions on one device, the arena base, the ring and the epoch cell."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.regions: list[Region] = []
        self.arena = torch.zeros(1, dtype=torch.int32, device=self.device)   # base of shadow offsets
        self.ring = torch.zeros(1 + CAP * dc.FIELDS, dtype=torch.int64, device=self.device)
        self.cell = torch.zeros(1, dtype=torch.int64, device=self.device)
        self.epoch = 0
        self.launches: dict[int, Launch] = {}
        self.tables: list[torch.Tensor] = []
        self._next = 0
        self._pool_at = 0  # the pinned pool's slots are never reused within a case (graphs replay them)

    def _pinned(self, n: int) -> torch.Tensor:
        """``n`` int64 of pinned host memory from a process-wide pool made outside any graph capture
        (pinning memory during a capture is not allowed); a slot is used once per case."""
        global _POOL
        if self.device.type != "cuda":
            return torch.zeros(n, dtype=torch.int64, device="cpu")
        if _POOL is None or self._pool_at + n > _POOL.numel():
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError("the GPU shadow's pinned pool ran out inside a CUDA-graph capture")
            _POOL = torch.zeros(max(1 << 20, 2 * n), dtype=torch.int64, device="cpu", pin_memory=True)
            self._pool_at = 0
        out = _POOL[self._pool_at:self._pool_at + n]
        self._pool_at += n
        return out

    def epoch_like(self, shape) -> torch.Tensor:
        """The current epoch as an int32 tensor of ``shape``, read from the device cell: a write stamped
        inside a CUDA graph stamps the epoch of the op that replays it, not of the capture."""
        return self.cell[0].to(torch.int32).expand(shape)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.cell.fill_(epoch)  # stream-ordered: kernels queued before see the old epoch

    # -- regions -----------------------------------------------------------------------
    def overlapping(self, start: int, nbytes: int) -> list[Region]:
        end = start + max(nbytes, 1)
        return [r for r in self.regions if r.start < end and start < r.end]

    def containing(self, address: int) -> Region | None:
        return next((r for r in self.regions if r.start <= address < r.end), None)

    def add(self, start: int, nbytes: int, name: str, *, per_step: bool, initialized: bool, itemsize: int,
            shape: tuple, auto: bool = False) -> Region:
        """Track ``[start, start+nbytes)``; an overlapping record (freed memory reused) is dropped,
        except one of exactly these bytes, whose epochs are kept (re-tracking is harmless)."""
        old = [r for r in self.overlapping(start, nbytes)]
        same = next((r for r in old if r.start == start and r.nbytes == nbytes and r.itemsize == itemsize), None)
        for r in old:
            if r is not same:
                self.regions.remove(r)
        if same is not None:
            if not same.auto or auto:
                same.per_step = same.per_step or per_step
            else:
                same.name, same.auto, same.per_step = name, False, per_step
            return same
        n = max(nbytes // itemsize, 1)
        shadow = torch.full((n,), self.epoch if initialized else NEVER, dtype=torch.int32, device=self.device)
        r = Region(start, nbytes, name, per_step, itemsize, tuple(shape), shadow, auto,
                   fully_at=self.epoch if initialized else None, maybe_never=not initialized)
        self.regions.append(r)
        return r

    def remove(self, region: Region) -> None:
        if region in self.regions:
            self.regions.remove(region)

    # -- launches ----------------------------------------------------------------------
    def table(self, args: list[tuple[str, torch.Tensor]], kernel: str, path: str, op_index: int):
        """(device table, rows allocated, launch id, record): the argument storages as written memory
        first, then the tracked regions inside them (they win), and, when an argument could be a
        pointer array (int64), every other tracked region too (what its pointers may reach)."""
        rows: list[tuple] = []
        regions: list[Region | None] = []
        base = self.arena.data_ptr()
        spans = []
        for name, t in args:
            st = t.untyped_storage()
            spans.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
            rows.append((st.data_ptr(), st.data_ptr() + st.nbytes(), 0, 1, 0))
            regions.append(Region(st.data_ptr(), st.nbytes(), f"{kernel}:{name}", False, t.element_size(),
                                  (st.nbytes() // max(t.element_size(), 1),), None, auto=True))
        pointers = any(t.dtype in (torch.int64, torch.uint64) for _, t in args)
        for r in self.regions:
            if not pointers and not any(lo < r.end and r.start < hi for lo, hi in spans):
                continue
            off = (r.shadow.data_ptr() - base) // 4 if r.shadow is not None else 0
            flags = (dc.PER_STEP if r.per_step else 0) | (dc.SHADOWED if r.shadow is not None else 0)
            rows.append((r.start, r.end, off, r.itemsize, flags))
            regions.append(r)
        nreg = 4
        while nreg < len(rows):
            nreg *= 2
        launch = self._next
        self._next += 1
        host = self._pinned((1 + nreg) * dc.ROW)
        host.zero_()
        host[0], host[1] = launch, len(rows)
        if rows:
            host[dc.ROW:dc.ROW * (1 + len(rows))] = torch.tensor(rows, dtype=torch.int64, device="cpu").reshape(-1)
        host[dc.ROW * (1 + len(rows)) + 3::dc.ROW] = 1  # padding rows: itemsize 1 (never matched)
        table = torch.empty_like(host, device=self.device)
        table.copy_(host, non_blocking=True)  # a CUDA graph capturing the launch replays this copy
        self.tables.append(table)  # alive for the case: a captured launch reads it at every replay
        rec = Launch(kernel, path, regions, op_index, keep=[host])
        self.launches[launch] = rec
        return table, nreg, launch, rec

    def read_ring(self) -> tuple[int, list[list[int]]]:
        """(bad lanes counted, entries kept): one copy to the host, then the ring is emptied."""
        host = self.ring.cpu()  # the op's one synchronisation
        count = int(host[0])
        if not count:
            return 0, []
        self.ring[0:1].zero_()
        n = min(count, CAP)
        entries = host[1:1 + n * dc.FIELDS].view(n, dc.FIELDS).tolist()
        return count, entries
