"""Shadow memory: tracked allocations with the epoch of each byte's last write.

An allocation is a storage (base address, size) with a name. For each byte we keep
the epoch (op number) of its last write, -1 for never written. Reads are checked
per lane, vectorized with numpy:
  - a byte never written                               -> uninitialized-read
  - a per-step buffer's byte written before this epoch -> stale-read
  - an address outside every tracked allocation        -> out-of-bounds
Python-level loops run per allocation touched by an access, never per lane.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from .core.span import NEVER, BadAccess, Span

__all__ = ["NEVER", "Allocation", "BadAccess", "ShadowMemory"]


@dataclass(eq=False)
class Allocation(Span):
    """A span with the epoch of each of its bytes' last write, in host memory."""
    auto: bool = False            # tracked automatically (torch.empty in a watched region, kernel arg)
    epochs: np.ndarray = field(default=None, repr=False)  # type: ignore[arg-type]
    fully_written: bool = False   # every byte written at least once: a persistent read needs no gather
    reported: np.ndarray | None = field(default=None, repr=False)  # per byte: epoch its bad read was reported
    serial: int = 0               # order of registration (ShadowMemory.added when it was made)

    def element_view(self, itemsize: int) -> np.ndarray | None:
        """Epochs viewed one row per element of ``itemsize`` bytes, when the size divides evenly."""
        return self.epochs.reshape(-1, itemsize) if self.nbytes % itemsize == 0 else None


class ShadowMemory:
    def __init__(self):
        self.epoch = 0
        self.saw_never = False  # the last check_read met never-written bytes
        self.added = 0  # registrations so far
        self._starts: list[int] = []
        self._allocs: list[Allocation] = []
        self._starts_np = np.zeros(0, dtype=np.uint64)
        self._ends_np = np.zeros(0, dtype=np.uint64)

    # -- registry ---------------------------------------------------------------------
    def add(self, start: int, nbytes: int, name: str, *, per_step: bool = False, initialized: bool = True,
            itemsize: int = 1, shape: tuple = (), auto: bool = False) -> Allocation:
        """Register [start, start+nbytes); an overlapping older registration is dropped (memory reuse)."""
        for old in self.overlapping(start, nbytes):
            self._remove(old)
        alloc = Allocation(start, nbytes, name, per_step, itemsize, tuple(shape), auto,
                           np.full(nbytes, self.epoch if initialized else NEVER, dtype=np.int64),
                           fully_written=initialized)
        return self._insert(alloc)

    def remove(self, alloc: Allocation) -> None:
        if alloc in self._allocs:
            self._remove(alloc)

    def _remove(self, alloc: Allocation) -> None:
        i = self._allocs.index(alloc)
        del self._starts[i], self._allocs[i]
        self._reindex()

    def _reindex(self) -> None:
        self._starts_np = np.array(self._starts, dtype=np.uint64)
        self._ends_np = np.array([a.end for a in self._allocs], dtype=np.uint64)

    def overlapping(self, start: int, nbytes: int) -> list[Allocation]:
        """Allocations intersecting [start, start+nbytes): an interval lookup, not exact starts."""
        end = start + max(nbytes, 1)
        i = bisect.bisect_left(self._starts, end)  # allocations are disjoint and sorted
        out = []
        while i > 0 and self._allocs[i - 1].end > start:
            i -= 1
            out.append(self._allocs[i])
        return out[::-1]

    def gaps(self, start: int, nbytes: int) -> list[tuple[int, int]]:
        """The sub-ranges [lo, hi) of [start, start+nbytes) that no allocation covers."""
        out, at = [], start
        for a in self.overlapping(start, nbytes):
            if a.start > at:
                out.append((at, a.start))
            at = max(at, a.end)
        if at < start + nbytes:
            out.append((at, start + nbytes))
        return out

    def containing(self, address: int) -> Allocation | None:
        i = bisect.bisect_right(self._starts, address) - 1
        return self._allocs[i] if i >= 0 and address < self._allocs[i].end else None

    def retrack(self, start: int, nbytes: int, name: str, *, per_step: bool, initialized: bool,
                itemsize: int, shape: tuple) -> Allocation:
        """Track a region again, keeping what is known of its bytes.

        Idempotent (re-tracking each step changes nothing), never turns a never-written byte
        into a written one (``track(torch.empty(n))`` after auto-tracking), and a view of an
        already tracked storage keeps the rest of the storage's record (name, per_step)."""
        olds = self.overlapping(start, nbytes)
        fresh = self.epoch if initialized else NEVER
        epochs = np.full(nbytes, fresh, dtype=np.int64)
        for o in olds:
            lo, hi = max(o.start, start), min(o.end, start + nbytes)
            epochs[lo - start:hi - start] = o.epochs[lo - o.start:hi - o.start]
            if o.start == start and o.end == start + nbytes and not o.auto:
                name, per_step = o.name, per_step or o.per_step
            elif o.start <= start and start + nbytes <= o.end:
                per_step = per_step or o.per_step
        for o in olds:
            self._split_off(o, start, start + nbytes)
        return self._insert(Allocation(start, nbytes, name, per_step, itemsize, tuple(shape), False, epochs,
                                       fully_written=bool(epochs.min() != NEVER) if nbytes else True))

    def _split_off(self, o: Allocation, lo: int, hi: int) -> None:
        """Drop [lo, hi) from ``o``, keeping the parts of it outside as their own records."""
        self._remove(o)
        for a, b in ((o.start, min(lo, o.end)), (max(hi, o.start), o.end)):
            if b > a:
                part = o.epochs[a - o.start:b - o.start].copy()
                self._insert(Allocation(a, b - a, o.name, o.per_step, o.itemsize, (), o.auto, part,
                                        fully_written=bool(part.min() != NEVER)))

    def _insert(self, alloc: Allocation) -> Allocation:
        self.added += 1
        alloc.serial = self.added
        i = bisect.bisect_left(self._starts, alloc.start)
        self._starts.insert(i, alloc.start)
        self._allocs.insert(i, alloc)
        self._reindex()
        return alloc

    def at(self, start: int) -> Allocation | None:
        i = bisect.bisect_left(self._starts, start)
        return self._allocs[i] if i < len(self._starts) and self._starts[i] == start else None

    def nearest(self, address: int) -> tuple[Allocation | None, int]:
        best, dist = None, None
        for a in self._allocs:
            d = a.start - address if address < a.start else address - a.end + 1
            if dist is None or d < dist:
                best, dist = a, d
        return best, dist or 0

    # -- accesses ---------------------------------------------------------------------
    def _locate(self, addrs: np.ndarray, itemsize: int) -> np.ndarray:
        """Index of the allocation holding each lane's whole access, -1 if none."""
        if addrs.size > 64 and len(self._starts):  # fast path: one allocation holds every lane
            lo, hi = int(addrs.min()), int(addrs.max())
            i = bisect.bisect_right(self._starts, lo) - 1
            if i >= 0 and hi + itemsize <= self._allocs[i].end:
                return np.full(addrs.shape, i, dtype=np.int64)
        idx = np.searchsorted(self._starts_np, addrs, side="right").astype(np.int64) - 1
        ok = idx >= 0
        safe = np.where(ok, idx, 0)
        if len(self._ends_np):
            ok &= (addrs + np.uint64(itemsize)) <= self._ends_np[safe]
        else:
            ok[:] = False
        return np.where(ok, idx, -1)

    def _byte_epochs(self, alloc: Allocation, addrs: np.ndarray, itemsize: int) -> tuple[np.ndarray, np.ndarray]:
        """Per lane, the oldest epoch among the bytes it reads."""
        offs = (addrs - np.uint64(alloc.start)).astype(np.int64)
        if itemsize == 1:
            return offs, alloc.epochs[offs]
        return offs, alloc.epochs[offs[:, None] + np.arange(itemsize)].min(axis=1)

    def outside(self, addrs: np.ndarray, itemsize: int) -> np.ndarray:
        """Per lane: is its access outside every allocation? (No check, no mark.)"""
        return self._locate(addrs, itemsize) < 0

    @staticmethod
    def _groups(where: np.ndarray, oob: np.ndarray):
        """(allocation index, lane indices) for each allocation the in-bounds lanes touch."""
        if where.size and not oob.any() and where[0] == where[-1] and (where == where[0]).all():
            yield int(where[0]), np.arange(where.size)  # the common case: one allocation
            return
        for i in np.unique(where[~oob]):
            yield int(i), np.flatnonzero(where == i)

    def check_read(self, addrs: np.ndarray, itemsize: int) -> tuple[list[BadAccess], np.ndarray]:
        """Bad accesses among ``addrs`` (uint64), and the boolean mask of out-of-bounds lanes.
        ``saw_never`` tells whether a lane read never-written bytes (reported now or before)."""
        self.saw_never = False
        where = self._locate(addrs, itemsize)
        oob = where < 0
        bad: list[BadAccess] = []
        if oob.any():
            lane = int(np.flatnonzero(oob)[0])
            near, dist = self.nearest(int(addrs[lane]))
            bad.append(BadAccess("out-of-bounds", near, int(addrs[lane]), dist, lane, int(oob.sum())))
        for i, lanes in self._groups(where, oob):
            alloc = self._allocs[i]
            if alloc.fully_written and not alloc.per_step:
                continue  # written once, never per step: nothing to find
            offs, ep = self._byte_epochs(alloc, addrs[lanes], itemsize)
            fresh = None if alloc.reported is None else self._not_reported(alloc, offs, itemsize)
            never = ep == NEVER
            if never.any():
                self.saw_never = True
                if fresh is not None:
                    never &= fresh
            if never.any():
                j = int(np.flatnonzero(never)[0])
                bad.append(BadAccess("uninitialized-read", alloc, int(addrs[lanes[j]]), int(offs[j]),
                                     int(lanes[j]), int(never.sum()), offsets=self._bytes(offs[never], itemsize)))
            if alloc.per_step:
                stale = (ep != NEVER) & (ep < self.epoch)
                if fresh is not None:
                    stale &= fresh
                if stale.any():
                    j = int(np.flatnonzero(stale)[0])
                    bad.append(BadAccess("stale-read", alloc, int(addrs[lanes[j]]), int(offs[j]),
                                         int(lanes[j]), int(stale.sum()), int(ep[j]),
                                         offsets=self._bytes(offs[stale], itemsize)))
        return bad, oob

    @staticmethod
    def _bytes(offs: np.ndarray, itemsize: int) -> np.ndarray:
        return (offs[:, None] + np.arange(itemsize)).ravel()

    def _not_reported(self, alloc: Allocation, offs: np.ndarray, itemsize: int) -> np.ndarray:
        """Per lane: not already reported in this op (a second read of the same bad bytes, by the
        next kernel or line, is the same root cause: one bad read, one report)."""
        seen = alloc.reported[offs[:, None] + np.arange(itemsize)] == self.epoch  # type: ignore[index]
        return ~seen.all(axis=1)

    def mark_reported(self, bad: BadAccess) -> None:
        """The bytes of a reported bad read: not reported again in this op."""
        alloc = bad.allocation
        if not isinstance(alloc, Allocation) or bad.offsets is None or bad.kind == "out-of-bounds":
            return
        if alloc.reported is None:
            alloc.reported = np.full(alloc.nbytes, NEVER, dtype=np.int64)
        ok = bad.offsets[(bad.offsets >= 0) & (bad.offsets < alloc.nbytes)]
        alloc.reported[ok] = self.epoch

    def mark_write(self, addrs: np.ndarray, itemsize: int) -> np.ndarray:
        """Mark written bytes with the current epoch; returns the out-of-bounds lane mask."""
        where = self._locate(addrs, itemsize)
        for i in np.unique(where[where >= 0]):
            alloc = self._allocs[int(i)]
            offs = (addrs[where == i] - np.uint64(alloc.start)).astype(np.int64)
            rows = alloc.element_view(itemsize)
            if rows is not None and not (offs % itemsize).any():
                rows[offs // itemsize] = self.epoch  # aligned whole elements: one row each
            else:
                alloc.epochs[(offs[:, None] + np.arange(itemsize)).ravel()] = self.epoch
            if not alloc.fully_written:
                alloc.fully_written = bool(alloc.epochs.min() != NEVER)
        return where < 0


    def carry_over(self, alloc: Allocation, addrs: np.ndarray | None = None, itemsize: int = 1) -> None:
        """Declare a per-step buffer's written bytes (all, or those of ``addrs``) current in this epoch."""
        if addrs is None:
            alloc.epochs[alloc.epochs != NEVER] = self.epoch
            return
        offs = (addrs.astype(np.int64) - alloc.start)[:, None] + np.arange(itemsize)
        offs = offs[(offs >= 0) & (offs < alloc.nbytes)]
        ep = alloc.epochs[offs]
        alloc.epochs[offs[ep != NEVER]] = self.epoch

    def never_written(self, addrs: np.ndarray, itemsize: int) -> tuple[np.ndarray, np.ndarray]:
        """(per lane: does it read a never-written byte?, the addresses of those bytes)."""
        where = self._locate(addrs, itemsize)
        lanes_out = np.zeros(addrs.shape, dtype=bool)
        byte_addrs = []
        for i, lanes in self._groups(where, where < 0):
            alloc = self._allocs[i]
            if alloc.fully_written:
                continue
            offs = (addrs[lanes] - np.uint64(alloc.start)).astype(np.int64)[:, None] + np.arange(itemsize)
            never = alloc.epochs[offs] == NEVER
            lanes_out[lanes] = never.any(axis=1)
            byte_addrs.append((offs[never] + alloc.start).astype(np.uint64))
        return lanes_out, (np.concatenate(byte_addrs) if byte_addrs else np.zeros(0, dtype=np.uint64))

    def unwritten(self, addrs: np.ndarray, itemsize: int) -> np.ndarray:
        """Per lane: would a read of it be reported (never written, or stale in a per-step buffer)?"""
        where = self._locate(addrs, itemsize)
        out = np.zeros(addrs.shape, dtype=bool)
        for i, lanes in self._groups(where, where < 0):
            alloc = self._allocs[i]
            if alloc.fully_written and not alloc.per_step:
                continue
            _, ep = self._byte_epochs(alloc, addrs[lanes], itemsize)
            out[lanes] = (ep == NEVER) | ((ep < self.epoch) if alloc.per_step else False)
        return out
