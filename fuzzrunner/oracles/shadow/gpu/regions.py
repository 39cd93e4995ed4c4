"""The host side of the device shadow: tracked regions, their shadow arrays, launch tables, the ring.

A *region* is a tracked byte range ``[start, end)`` with an element size; its shadow is an int32
device tensor with one epoch per element (``NEVER`` = never written), allocated on the region's
device. Per launch, the host writes a small table (the launch id, then one row per region: start,
end, shadow offset from the arena base, log2 of the itemsize, flags) and copies it to the device
from pinned memory without waiting. A table depends only on the launch's argument storages and the
regions it lists, so it is made once per (kernel, argument storages, those regions and their flags) and
reused: a step that launches the same kernels on the same buffers copies nothing, whatever was
allocated or freed elsewhere since (except a table made inside a CUDA-graph capture, which holds
nothing until its graph replays: it serves that launch only). Tables and their launch records live
for the case (a CUDA graph capturing a launch replays its table, and its ring entries name it).
Bad lanes come back through the ring (``device_checks.py``), read once per op.
"""

from __future__ import annotations

import sys
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

import torch

from ..core import words
from ..core.span import NEVER, Span
from . import device_checks as dc

CAP = 1024  # ring entries kept per op; the counter counts every bad lane
HEAD = 1 + 8 * dc.WORDS  # the ring's words read back at every op: the counter and the first 8 entries
_POOL: torch.Tensor | None = None  # pinned launch tables, shared by the cases of a process
_POOL_AT = 0  # the pool's next free slot (slots are never reused: graphs may replay their copies)
_WIDE = (torch.int64, torch.uint64)  # argument dtypes that may hold pointers


@dataclass(eq=False)
class Region(Span):
    """A span with a device tensor of epochs, one per element."""
    shadow: torch.Tensor | None      # int32 epochs per element; None: written memory (an untracked argument)
    auto: bool = False
    fully_at: int | None = None      # epoch of a write that covered every element (host knowledge, no sync)
    maybe_never: bool = True         # some element may still be never written
    shared: bool = False             # its shadow is (in part) another region's too (a tracked view inside it)
    skipped: list | None = None      # the writes whose stamps were left out in epoch ``skipped_at`` (``settled``)
    skipped_at: int = -1

    shift: int = field(init=False)   # log2 of itemsize (a table row's, made once)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.shift = _log2(self.itemsize)

    def clean(self, epoch: int) -> bool:
        """No read of it can be reported now: every element written, and this op if per-step."""
        if self.per_step:
            return self.fully_at == epoch
        return not self.maybe_never

    def settled(self) -> bool:
        """Written whole, not per-step, its shadow its own: a read of it is never reported and its epochs
        say nothing but "written", so a write to it needs no stamp, unless it becomes per-step later
        (``track(..., per_step=True)``): the oracle then stamps the writes left out in that op
        (``skipped``); those of earlier ops hold older epochs, which give the same verdicts there (every
        one is older than the op that made it per-step), only an earlier "last written" op."""
        return not (self.per_step or self.maybe_never or self.shared)


class Launch:
    """What the ring's entries of one launch refer to: its table's rows as regions (``regions``, made
    at the first read of a ring entry naming the launch: the argument storages' rows then, as written
    memory with no shadow, followed by the tracked regions), and what the table's copy needs alive."""
    __slots__ = ("kernel", "path", "_args", "_tracked", "_regions", "keep")

    def __init__(self, kernel: str, path: str, args: list, tracked: list, keep: list):
        self.kernel, self.path, self._args, self._tracked, self.keep = kernel, path, args, tracked, keep
        self._regions: list | None = None

    @property
    def regions(self) -> list:
        if self._regions is None:
            self._regions = [Region(ptr, nbytes, words.argument(self.kernel, name), False, item,
                                    (nbytes // max(item, 1),), None, auto=True)
                             for name, ptr, nbytes, item, _ in self._args] + self._tracked
        return self._regions


def capturing(device: torch.device) -> bool:
    """Whether launches on ``device`` are being captured into a CUDA graph now (recorded, not run)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # a CUDA build's; None on a CPU build


def _raw_stream(device: torch.device) -> int:
    """The handle of the current stream on ``device`` (0 off CUDA), without making a ``Stream`` object."""
    if device.type != "cuda":
        return 0
    if _RAW_STREAM is not None:
        return _RAW_STREAM(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


def _log2(itemsize: int) -> int:
    """The shift that turns a byte offset into an element number (torch's item sizes are powers of two)."""
    if itemsize <= 0 or itemsize & (itemsize - 1):
        raise ValueError(f"an item size of {itemsize} bytes is not a power of two")
    return itemsize.bit_length() - 1


class DeviceShadow:
    """Regions on one device, the arena base, the ring and the epoch cell."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.regions: list[Region] = []
        self.arena = torch.zeros(1, dtype=torch.int32, device=self.device)   # base of shadow offsets
        self.ring = torch.zeros(1 + CAP * dc.WORDS, dtype=torch.int64, device=self.device)
        self.cell = torch.zeros(1, dtype=torch.int64, device=self.device)
        # The same epoch as shadows hold it (int32): the cell's low word (epochs stay far below 2**31, and
        # the device's byte order is the host's), so one fill sets both.
        self.cell32 = self.cell.view(torch.int32)[:1] if sys.byteorder == "little" else self.cell.view(torch.int32)[1:]
        self._cell0 = self.cell32[0]  # its element, as a 0-d view (expanded for every stamp: made once)
        self.epoch = 0
        self.launches: dict[int, Launch] = {}   # launch id -> record, for the case (graphs replay them)
        self._tables: dict[tuple, tuple] = {}   # (kernel, argument spans, listed regions) -> (table, nreg, id, record)
        self._next = 0
        # The lookup index, kept with ``regions``: the regions by start, their starts, and the running
        # maximum of their ends (every torch op asks it, most of them about untracked memory: a
        # bisection, not a walk of every region).
        self._by_start: list[Region] = []
        self._starts: list[int] = []
        self._max_end: list[int] = []
        self._rank: dict | None = None  # id(region) -> its place in ``regions`` (made again after a change)
        self.mirror = None  # the index's copy in the dispatch filter: told each insertion and removal

    def _pinned(self, n: int, in_capture: bool) -> torch.Tensor:
        """``n`` int64 of pinned host memory from a process-wide pool made outside any graph capture
        (pinning memory during a capture is not allowed). A slot is never handed out twice while its pool
        lives: the cursor belongs to the pool, not to a case, so a graph captured in one case (or by
        another oracle of the process) that replays its copy reads what it captured. A pool that is
        replaced lives on through the records holding its slots. Outside a capture a pool with under a
        quarter left is replaced early, so that a long capture does not run it out."""
        global _POOL, _POOL_AT
        if self.device.type != "cuda":
            return torch.zeros(n, dtype=torch.int64, device="cpu")
        left = 0 if _POOL is None else _POOL.numel() - _POOL_AT
        if _POOL is None or left < n or (left < _POOL.numel() // 4 and not in_capture):
            if in_capture:
                raise RuntimeError("the GPU shadow's pinned pool ran out inside a CUDA-graph capture")
            _POOL = torch.zeros(max(1 << 20, 4 * n), dtype=torch.int64, device="cpu", pin_memory=True)
            _POOL_AT = 0
        out = _POOL[_POOL_AT:_POOL_AT + n]
        _POOL_AT += n
        return out

    def epoch_like(self, shape) -> torch.Tensor:
        """The current epoch as an int32 tensor of ``shape``, read from the device cell: a write stamped
        inside a CUDA graph stamps the epoch of the op that replays it, not of the capture."""
        return self._cell0.expand(shape)  # a view: no kernel

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        with torch._C._DisableTorchDispatch():  # the oracle's own op: past every dispatch mode
            self.cell.fill_(epoch)  # stream-ordered: kernels queued before see the old epoch (cell32 too)

    # -- regions -----------------------------------------------------------------------
    def append(self, r: Region) -> None:
        """Track the region ``r`` (its bytes may lie inside another region's)."""
        self.regions.append(r)
        self._rank = None
        i = bisect_right(self._starts, r.start)
        self._starts.insert(i, r.start)
        self._by_start.insert(i, r)
        self._max_end.insert(i, r.end)
        self._running_max(i)
        if self.mirror is not None:
            self.mirror.insert_region(i, r.start, r.end)

    def remove(self, region: Region) -> None:
        if region in self.regions:
            self.regions.remove(region)
            self._rank = None
            i = next(k for k in range(bisect_left(self._starts, region.start), len(self._by_start))
                     if self._by_start[k] is region)
            del self._starts[i], self._by_start[i], self._max_end[i]
            self._running_max(i)
            if self.mirror is not None:
                self.mirror.erase_region(i)

    def mirror_to(self, mirror) -> None:
        """Keep ``mirror`` (the dispatch filter's module, or None) a copy of the index from now on."""
        self.mirror = mirror
        if mirror is not None:
            mirror.set_regions(self._starts, [r.end for r in self._by_start])

    def _running_max(self, i: int) -> None:
        """Recompute the running maximum of ends from position ``i`` (an insertion or a deletion
        there); once an entry past ``i`` comes out unchanged, the rest are unchanged too."""
        ends, by_start = self._max_end, self._by_start
        for k in range(i, len(ends)):
            m = max(ends[k - 1], by_start[k].end) if k else by_start[k].end
            if k > i and m == ends[k]:
                return
            ends[k] = m

    def overlapping(self, start: int, nbytes: int) -> list[Region]:
        """The regions sharing a byte with ``[start, start+nbytes)`` (at least one byte), in the
        order of ``regions``."""
        end = start + max(nbytes, 1)
        i = bisect_left(self._starts, end) - 1  # regions [0, i] start before ``end``
        max_end, by_start = self._max_end, self._by_start
        found = []
        while i >= 0 and max_end[i] > start:  # none before i ends after ``start``: stop there
            if by_start[i].end > start:
                found.append(by_start[i])
            i -= 1
        if len(found) > 1:
            rank = self._ranks()
            found.sort(key=lambda r: rank[id(r)])
        return found

    def _ranks(self) -> dict:
        rank = self._rank
        if rank is None:
            rank = self._rank = {id(r): k for k, r in enumerate(self.regions)}
        return rank

    def sort_by_size(self) -> None:
        """Larger regions first (a launch table then lists the regions inside others after them)."""
        self.regions.sort(key=lambda r: -r.nbytes)
        self._rank = None

    def any_overlapping(self, spans) -> bool:
        """Whether any ``(start, nbytes)`` of ``spans`` shares a byte with a region."""
        starts, max_end = self._starts, self._max_end
        for start, nbytes in spans:
            i = bisect_left(starts, start + max(nbytes, 1)) - 1
            if i >= 0 and max_end[i] > start:
                return True
        return False

    def containing(self, address: int) -> Region | None:
        return next((r for r in self.regions if r.start <= address < r.end), None)

    def add(self, start: int, nbytes: int, name: str, *, per_step: bool, initialized: bool, itemsize: int,
            shape: tuple, auto: bool = False) -> Region:
        """Track ``[start, start+nbytes)``; an overlapping record (freed memory reused) is dropped,
        except one of exactly these bytes, whose epochs are kept (re-tracking is harmless)."""
        old = self.overlapping(start, nbytes)
        same = next((r for r in old if r.start == start and r.nbytes == nbytes and r.itemsize == itemsize), None)
        for r in old:
            if r is not same:
                self.remove(r)
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
        self.append(r)
        return r

    def table(self, args: list[tuple[str, torch.Tensor]], kernel: str, path: str, in_capture: bool):
        """(device table, its rows, launch id, record): the argument storages as written memory
        first, then the tracked regions inside them (they win), and, when an argument could be a
        pointer array (int64), every other tracked region too (what its pointers may reach)."""
        spans = []
        pointers = False
        for name, t in args:
            st = t.untyped_storage()
            wide = t.dtype in _WIDE
            pointers = pointers or wide
            spans.append((name, st.data_ptr(), st.nbytes(), t.element_size(), wide))
        if pointers:
            selected = list(self.regions)
        else:  # the regions sharing a byte with an argument storage, in the order of ``regions``
            near: dict = {}
            for _, ptr, nbytes, _, _ in spans:
                for r in self.overlapping(ptr, nbytes):
                    near[id(r)] = r
            selected = list(near.values())
            if len(selected) > 1:
                rank = self._ranks()
                selected.sort(key=lambda r: rank[id(r)])
        # What the table holds: the same storages and the same regions with the same flags give the same
        # table (regions tracked or freed elsewhere do not matter). The records keep their regions alive,
        # so an ``id`` here is never another region's.
        # The launching stream too: a table copied on another stream is not ordered before this launch.
        stream = _raw_stream(self.device)
        key = (kernel, path, stream, tuple(spans), tuple([(id(r), r.per_step) for r in selected]))
        hit = self._tables.get(key)
        if hit is not None:
            return hit
        n = len(spans) + len(selected)
        launch = self._next
        self._next += 1
        flat = [launch, n, 0, 0, 0]
        for _, ptr, nbytes, _, _ in spans:
            flat += (ptr, ptr + nbytes, 0, 0, 0)
        base = self.arena.data_ptr()
        for r in selected:
            sh = r.shadow
            if sh is None:
                flat += (r.start, r.end, 0, r.shift, dc.PER_STEP if r.per_step else 0)
            else:
                flat += (r.start, r.end, (sh.data_ptr() - base) >> 2, r.shift,
                         dc.SHADOWED | dc.PER_STEP if r.per_step else dc.SHADOWED)
        with torch._C._DisableTorchDispatch():  # the oracle's own ops: past every dispatch mode
            host = self._pinned(len(flat), in_capture)  # (the kernels read the header's count of rows, no more)
            host.numpy()[:] = flat  # written through numpy: no torch op per field
            table = torch.empty_like(host, device=self.device)
            table.copy_(host, non_blocking=True)  # a CUDA graph capturing the launch replays this copy
        rec = Launch(kernel, path, spans, selected, keep=[host, table])
        self.launches[launch] = rec
        made = (table, n, launch, rec)
        # A table made inside a capture is filled only when its graph replays (a captured copy does not
        # run at capture): no launch outside that graph (an eager one, or another capture of the same
        # step's buffers, before any replay) may use it. A table made outside serves captures on its stream too.
        if not in_capture:
            self._tables[key] = made
        return made

    def ring_entries(self, head: torch.Tensor) -> list[list[int]]:
        """The entries kept in the ring, from ``head`` (its first ``HEAD`` words, read back with the op's
        one synchronisation; the rest is read only when more entries were kept than it holds); the
        device ring is emptied for the next op when it held any.
        In one order whatever order the GPU's programs wrote them in (their atomic appends race): by
        launch, program id (x, then y, then z, as Triton's interpreter runs the programs), kernel line,
        element, then the rest of the entry. So the first report of a bad read (``ViolationLog`` keeps
        it, with a count) is the same in every run of a case; only past ``CAP`` entries in one op does
        which are kept depend on the race. Within a program the order is by line and element, close to
        the CPU oracle's but not always the same (a loop revisits lines; a gather's lanes are not in
        element order)."""
        count = int(head[0])
        if not count:
            return []
        n = min(count, CAP)
        words = head if 1 + n * dc.WORDS <= head.numel() else self.ring[:1 + n * dc.WORDS].cpu()
        self.ring[0:1].zero_()
        entries = [dc.unpack(w) for w in words[1:1 + n * dc.WORDS].view(n, dc.WORDS).tolist()]
        return sorted(entries, key=_program_order)


def _program_order(e: list) -> tuple:
    """A ring entry's place among the reads of its op (``FIELDS``): launch, program id x, y, z, line, element,
    then kind, access, region and written epoch (a total order: two replays of a graph in one op differ there)."""
    return e[9], e[4], e[5], e[6], e[7], e[3], e[0], e[1], e[2], e[8]
