"""The shadow-memory oracle's CPU mode: uninitialized, stale and out-of-bounds accesses, checked as they run.

A back end of the shadow core (core/): the shadow is a ``ShadowMemory`` in host memory; Triton kernels are
checked through the interpreter hook (triton_hook.py), torch ops through a dispatch mode (torch_hook.py),
numpy views and lists through host_views.py. Each op of a case is an epoch: per-step buffers must be
written in the epoch that reads them. What a bad access is reported as is the core's ``Reporter``.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from ... import _env, tracking
from ..base import source_location
from .core import BadAccess, Hooks, ShadowCore, words
from .discards import Discards, Pending
from .host_views import HostViews
from .launch_views import LaunchViews, span
from .locations import caller_line
from .memory import ShadowMemory
from .sub_buffers import OWN_STORAGE, Provenance, SubBuffers
from .threads import ACTIVE, PerThread, locked
from .torch_effects import addresses, has_memory
from .torch_hook import TorchShadowMode
from .triton_hook import TritonHook, grid_idx, kernel_source_line, live_storages

_MAX_RUNS = 256


def _runs(addrs: np.ndarray, itemsize: int, contiguous: bool) -> list[tuple[int, int]]:
    """The contiguous byte runs [lo, hi) that a view's elements cover (one for a contiguous view)."""
    if contiguous:
        return [(int(addrs[0]), int(addrs[-1]) + itemsize)]
    a = np.unique(addrs)
    breaks = np.flatnonzero(np.diff(a) > itemsize)
    if len(breaks) >= _MAX_RUNS:
        return [(int(a[0]), int(a[-1]) + itemsize)]
    starts = a[np.r_[0, breaks + 1]]
    ends = a[np.r_[breaks, len(a) - 1]] + np.uint64(itemsize)
    return [(int(lo), int(hi)) for lo, hi in zip(starts, ends)]


class ShadowOracle(ShadowCore):
    mode_class = TorchShadowMode

    def __init__(self, *, auto_track_empty: bool = True, check_triton: bool | None = None,
                 check_views: bool = False):
        super().__init__(names_threads=True)
        self.auto_track_empty = auto_track_empty
        self.check_views = check_views  # out-of-view reads (launch_views.py)
        self.check_triton = _env.interpreted() if check_triton is None else check_triton
        self.memory = ShadowMemory()
        self._hook: TritonHook | None = None
        self._dead: list = []
        self._finalized: set = set()
        self.subs = SubBuffers()  # registered views with bounds of their own (sub_buffers.py)
        self._tls = PerThread()
        self.forked = False  # this process is a fork of the one the oracle started in
        self.discards = Discards()  # unwritten lanes a kernel loads, reported when used (discards.py)
        self.host = HostViews(self)

    @property
    def reported(self) -> int:
        """Reports made so far (whether an op's inner checks found something: torch_hook.py)."""
        return self.reporter.reported

    def _register(self, tensor: torch.Tensor, name: str, **kw):
        """Track ``tensor``'s storage until the storage dies (its memory may then be reused)."""
        if not has_memory(tensor):
            return None
        st = tensor.untyped_storage()
        if st.nbytes() == 0:
            return None
        self._purge()
        alloc = self.memory.add(st.data_ptr(), st.nbytes(), name, itemsize=tensor.element_size(),
                                shape=tuple(tensor.shape), **kw)
        self._on_death(st)
        return alloc

    def _on_death(self, st) -> None:
        if st.data_ptr() not in self._finalized:
            self._finalized.add(st.data_ptr())
            weakref.finalize(st, self._dead.append, (st.data_ptr(), st.nbytes()))

    def _purge(self) -> None:
        while self._dead:
            ptr, nbytes = self._dead.pop()
            self._finalized.discard(ptr)
            self.subs.drop_storage(ptr)
            for a in self.memory.overlapping(ptr, nbytes):
                if ptr <= a.start and a.end <= ptr + nbytes:
                    self.memory.remove(a)

    # -- protocol -----------------------------------------------------------------------
    def start(self) -> None:
        self.reporter.owner = threading.get_ident()
        super().start()
        ACTIVE.add(self)  # (a fork of this process from here on runs unchecked: threads.py)
        self.hooks.push(lambda: ACTIVE.discard(self))

    def _install_back_end(self, hooks: Hooks) -> None:
        if self.check_triton:
            self._hook = hooks.add(TritonHook(self._kernel_read, self._kernel_write, self._launch, self._launch_end,
                                              self._sub_buffer_access, self.discards.loaded))
        hooks.add(self.host)

    def begin_op(self, index: int, op: dict) -> None:
        super().begin_op(index, op)
        self.memory.epoch = index + 1

    def observe(self, index: int, op: dict, result: Any) -> None:
        pass

    # -- tracking.Watcher ---------------------------------------------------------------
    @locked
    def on_track(self, tensor, name: str, per_step: bool, initialized: bool) -> None:
        """Track the bytes of the view ``tensor``; re-tracking keeps what is known (see retrack).

        A view with gaps (``table[:, :4]``) is tracked run by run, so the bytes between its runs
        (the other columns) keep their own record; past ``_MAX_RUNS`` runs, its whole span."""
        if tensor.numel() == 0 or not has_memory(tensor) or tensor.untyped_storage().nbytes() == 0:
            return
        self._purge()
        item = tensor.element_size()
        runs = _runs(addresses(tensor), item, tensor.is_contiguous())
        for lo, hi in runs:
            self.memory.retrack(lo, hi - lo, name, per_step=per_step, initialized=initialized, itemsize=item,
                                shape=tuple(tensor.shape) if len(runs) == 1 else ((hi - lo) // item,))
        self._on_death(tensor.untyped_storage())
        self.subs.add(tensor, name)

    @locked
    def on_carry_over(self, tensor) -> None:
        """Carry over exactly the view given (vLLM carries a mapping's active prefix)."""
        if tensor.numel() == 0 or not has_memory(tensor):
            return
        addrs = addresses(tensor)
        for a in self.memory.overlapping(int(addrs.min()), int(addrs.max()) - int(addrs.min()) + 1):
            self.memory.carry_over(a, addrs, tensor.element_size())

    def on_kernel_launch(self, kernel: str, meta: dict) -> None:
        pass

    # -- torch side (TorchShadowMode's checker interface) -------------------------------
    def paused(self) -> bool:
        return self._tls.pause > 0 or self._tls.probing > 0 or self.forked or tracking.is_quiet()

    @contextmanager
    def probing(self):
        """The fallback's scratch runs of an op: neither checked nor tracked."""
        self._tls.probing += 1
        try:
            yield
        finally:
            self._tls.probing -= 1

    @locked
    def is_tracked(self, t: torch.Tensor) -> bool:
        self._purge()
        try:
            st = t.untyped_storage()
            return bool(self.memory.overlapping(st.data_ptr(), st.nbytes()))
        except (RuntimeError, NotImplementedError):
            return False

    @locked
    def watched(self, t: torch.Tensor) -> bool:
        """Tracked, and not a storage every byte of which is written and not per-step (no read of it
        can be reported, and writes to it change nothing)."""
        self._purge()
        try:
            st = t.untyped_storage()
            allocs = self.memory.overlapping(st.data_ptr(), st.nbytes())
        except (RuntimeError, NotImplementedError):
            return False
        return any(a.per_step or not a.fully_written for a in allocs)

    @locked
    def unwritten(self, t: torch.Tensor) -> np.ndarray:
        """Per element of ``t``: would reading it be reported?"""
        return self.memory.unwritten(addresses(t), t.element_size())

    @locked
    def host_read(self, what: str, addrs: np.ndarray, itemsize: int) -> None:
        """A read through a numpy view or ``tolist``: checked only where the bytes are tracked."""
        inside = self.memory.unwritten(addrs, itemsize)
        if inside.any():
            bad, _ = self.memory.check_read(addrs[inside], itemsize)
            path, line = caller_line()
            for b in bad:
                self._report(b, what, source_location(path, line), {"host": what})

    @locked
    def host_write(self, addrs: np.ndarray, itemsize: int) -> None:
        self.memory.mark_write(addrs, itemsize)

    @locked
    def torch_read(self, func, t: torch.Tensor, addrs: np.ndarray, report: bool = True) -> list:
        """Check a torch op's read; report it now, or (``report=False``) return the reports for
        ``flush`` (an op with no model is blamed only if nothing inside it was: see torch_hook)."""
        if addrs.size == 0:
            return []
        bad, _ = self.memory.check_read(addrs, t.element_size())
        if self.memory.saw_never:  # reported now or earlier in this op: garbage either way
            self._zero_never_written(t, addrs)
        # A torch view never leaves its storage (torch checks): a lane outside every tracked record is
        # in an untracked part of a storage tracked only in part (``track(pool[8:16])``, then ``pool``).
        bad = [b for b in bad if b.kind != "out-of-bounds"]
        if not bad:
            return []
        path, line = caller_line()
        pending = [(b, str(func), source_location(path, line), {"torch_op": str(func)}) for b in bad]
        if not report:
            return pending
        self.flush(pending)
        return []

    @locked
    def flush(self, pending: list) -> None:
        for b, kernel, location, extra in pending:
            self._report(b, kernel, location, extra)

    def _zero_never_written(self, t: torch.Tensor, addrs: np.ndarray) -> None:
        """Fill the never-written bytes this read is about to see with zeros (they stay never
        written to the shadow). The read is reported; what follows it is then the same on every
        run: a garbage index becomes row 0 instead of a wild access reported a second time
        (``table[mapping.long()]``), or a crash. A correct program never gets here."""
        _, never = self.memory.never_written(addrs, t.element_size())
        st = t.untyped_storage()
        offs = never.astype(np.int64) - st.data_ptr()
        offs = offs[(offs >= 0) & (offs < st.nbytes())]
        if offs.size and not (t.is_cuda and torch.cuda.is_current_stream_capturing()):
            with self.probing(), torch.no_grad():
                raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st, 0, (st.nbytes(),), (1,))
                raw[torch.from_numpy(offs).to(t.device)] = 0

    @locked
    def torch_write(self, func, t: torch.Tensor, addrs: np.ndarray) -> None:
        if addrs.size:
            self.memory.mark_write(addrs, t.element_size())

    @locked
    def torch_oob(self, func, src: torch.Tensor, index: int, count: int, size: int) -> None:
        self._purge()  # the record holding the table's first element: the table may be a tracked view
        alloc = self.memory.containing(src.data_ptr()) if src.numel() else None
        alloc = alloc or self.memory.at(src.untyped_storage().data_ptr())
        name = alloc.name if alloc else words.unnamed(src.shape)
        self.reporter.index_out_of_range(str(func), name, index, size, count, source_location(*caller_line()))

    @locked
    def torch_alloc(self, func, t: torch.Tensor, uninitialized: bool, since: int | None = None) -> None:
        """A result in fresh storage: tracked if uninitialized, else its memory is new (a record there is
        of freed memory), except records made since ``since`` (by the op's own body, seen op by op)."""
        if not has_memory(t):
            return
        st = t.untyped_storage()
        ptr, nbytes = st.data_ptr(), st.nbytes()
        if nbytes == 0:
            return
        if uninitialized and self.auto_track_empty:
            self._register(t, words.made_at("torch.empty", caller_line()), initialized=False, auto=True)
        else:
            self._purge()
            for a in self.memory.overlapping(ptr, nbytes):  # freed memory reused by a fresh tensor
                if since is None or a.serial <= since:
                    self.memory.remove(a)

    @locked
    def new_storage(self, st) -> None:
        """``torch.UntypedStorage(n)``: n bytes never written."""
        if self.paused() or not self.auto_track_empty or st.nbytes() == 0:
            return
        path, line = caller_line()
        self._purge()
        self.memory.add(st.data_ptr(), st.nbytes(), words.made_at("UntypedStorage", (path, line)),
                        initialized=False, itemsize=1, shape=(st.nbytes(),), auto=True)
        self._on_death(st)

    @locked
    def torch_storage_changed(self, t: torch.Tensor, before: tuple, resized: bool) -> None:
        """``resize_`` moved or grew a storage: the old bytes keep their state, the new ones are unwritten."""
        if resized:
            self._resized(t.untyped_storage(), before, t.element_size(), tuple(t.shape))

    @locked
    def storage_resized(self, st, before: tuple) -> None:
        """``UntypedStorage.resize_`` (no aten op sees it): as a tensor's ``resize_``."""
        if not self.paused():
            self._resized(st, before, 1, (st.nbytes(),))

    def _resized(self, st, before: tuple, itemsize: int, shape: tuple) -> None:
        self._purge()
        olds = self.memory.overlapping(*before)
        if not olds and not self.auto_track_empty:
            return
        path, line = caller_line()
        name = olds[0].name if olds else words.made_at("resize_", (path, line))
        epochs = np.full(before[1], self.memory.epoch, dtype=np.int64)
        for o in olds:
            lo, hi = max(o.start, before[0]), min(o.end, sum(before))
            epochs[lo - before[0]:hi - before[0]] = o.epochs[lo - o.start:hi - o.start]
            self.memory.remove(o)
        if not st.nbytes() or not st.data_ptr():
            return
        alloc = self.memory.add(st.data_ptr(), st.nbytes(), name, per_step=any(o.per_step for o in olds),
                                initialized=False, itemsize=itemsize, shape=shape, auto=not olds)
        self._on_death(st)
        n = min(before[1], st.nbytes())
        alloc.epochs[:n] = epochs[:n]
        alloc.fully_written = bool(alloc.epochs.min() != -1)

    # -- Triton side --------------------------------------------------------------------
    @locked
    def _launch(self, launch):
        added = []
        for name, t in launch.args.items():
            st = t.untyped_storage()
            self._purge()
            if st.nbytes() and not self.memory.overlapping(st.data_ptr(), st.nbytes()):
                added.append(self._register(t, words.argument(launch.name, name), auto=True))
            elif st.nbytes():  # tracked in part: the rest of an argument's storage is its memory too
                added += self._fill_gaps(st, t, words.argument(launch.name, name))
        views = LaunchViews(launch.args) if self.check_views else None
        self._tls.views = views if views is not None and views.storages else None
        self._tls.pause += 1  # the interpreter's own copy-back of arguments is not a write
        self._tls.garbage_read = False
        bases = self.subs.bases(launch.args)
        self._own_storages(launch, bases)
        provenance = Provenance(bases) if bases else None
        if provenance is not None:
            provenance.install()
        return added, provenance

    def _launch_end(self, token) -> None:
        self.discards.launch_end()  # a pending read whose value nothing consumed is reported, before ...
        self._launch_ended(token)   # ... the launch's own tracking goes

    @locked
    def _launch_ended(self, token) -> None:
        added, provenance = token
        if provenance is not None:
            provenance.uninstall()
        self._tls.pause -= 1
        self._tls.garbage_read = False
        self._tls.views = None
        for a in added + self._tls.adopted:
            self.memory.remove(a)
        self._tls.adopted = []

    def _own_storages(self, launch, bases: dict) -> None:
        """Each tensor argument not inside a registered view is bounded by its own storage (sub_buffers.py): a
        pointer computed from it that lands in another allocation is out of bounds of this argument, wherever the
        allocator happened to put that neighbour."""
        for name, t in launch.args.items():
            st = t.untyped_storage()
            if not t.numel() or not st.nbytes():
                continue
            key = (st.data_ptr(), *span(t))
            if key not in bases:
                rec = self.memory.containing(t.data_ptr())
                bases[key] = (st.data_ptr(), st.data_ptr() + st.nbytes(),
                              rec.name if rec is not None else words.argument(launch.name, name), OWN_STORAGE)

    @locked
    def _sub_buffer_access(self, addrs: np.ndarray, itemsize: int, view: tuple, access: str) -> np.ndarray | None:
        """Lanes through a pointer derived from a registered view (sub_buffers.py) that left its span,
        inside memory (a lane outside all memory is reported, and masked, as out-of-bounds already).
        For an argument's own storage (``OWN_STORAGE``), called before the lanes are checked: the lanes that
        left it into another tracked allocation, reported here, for the hook to switch off."""
        if len(view) > 3:
            return self._escaped(addrs, itemsize, view, access)
        lo, hi, name = view
        out = (addrs < np.uint64(lo)) | (addrs + np.uint64(itemsize) > np.uint64(hi))
        if not out.any():
            return None
        lane = int(np.flatnonzero(out)[0])
        into = self.memory.containing(int(addrs[lane]))
        path, line = kernel_source_line()
        kernel = self._hook.launch.name if self._hook and self._hook.launch else "?"
        details = {**self.reporter.op(), "program_id": list(grid_idx()), "access": access}
        msg = words.describe_sub_buffer(int(addrs[lane]), itemsize, view, into.name if into else None, kernel, details)
        self.reporter.add("out-of-bounds", kernel, source_location(path, line), name, msg, details, int(out.sum()))
        return None

    def _escaped(self, addrs: np.ndarray, itemsize: int, view: tuple, access: str) -> np.ndarray | None:
        if self._tls.probing:
            return None
        lo, hi, name, _ = view
        out = (addrs < np.uint64(lo)) | (addrs + np.uint64(itemsize) > np.uint64(hi))
        if not out.any():
            return None
        lanes = np.flatnonzero(out)
        wild = self.memory.outside(addrs[lanes], itemsize)
        if wild.any() and self._adopt(addrs[lanes[wild]]):  # a live torch storage nobody tracked is memory too
            wild = self.memory.outside(addrs[lanes], itemsize)
        landed = lanes[~wild]  # outside all memory: the address check's (reported out of bounds, switched off)
        if not len(landed):
            return None
        escaped = np.zeros(addrs.shape, dtype=bool)
        escaped[landed] = True
        if not self._tls.garbage_read:  # a wild access after a garbage read in this launch is its consequence
            lane = int(landed[0])
            into = self.memory.containing(int(addrs[lane]))
            path, line = kernel_source_line()
            kernel = self._hook.launch.name if self._hook and self._hook.launch else "?"
            details = {**self.reporter.op(), "program_id": list(grid_idx()), "access": access}
            msg = words.describe_sub_buffer(int(addrs[lane]), itemsize, view[:3], into.name if into else None,
                                            kernel, details, whole=True)
            self.reporter.add("out-of-bounds", kernel, source_location(path, line), name, msg, details, len(landed))
        return escaped

    def _out_of_view(self, addrs: np.ndarray, itemsize: int) -> list[BadAccess]:
        hit = self._tls.views.outside(addrs, itemsize)  # type: ignore[union-attr]
        if hit is None:
            return []
        lanes, names = hit
        lane = int(np.flatnonzero(lanes)[0])
        alloc = self.memory.containing(int(addrs[lane]))
        return [BadAccess("out-of-bounds", alloc, int(addrs[lane]), 0, lane, int(lanes.sum()), view=names)]

    def _adopt(self, addrs: np.ndarray) -> bool:
        """Lanes outside every tracked storage may still be inside a live torch storage (a tensor
        reached through a pointer array): track those storages, as written, for this launch."""
        found = False
        for st, t in live_storages(addrs):
            if not self.memory.overlapping(st.data_ptr(), st.nbytes()):
                self._tls.adopted.append(self.memory.add(st.data_ptr(), st.nbytes(), words.unnamed(t.shape),
                                                     itemsize=t.element_size(), shape=tuple(t.shape), auto=True))
                found = True
            else:
                gaps = self._fill_gaps(st, t, words.unnamed(t.shape))
                self._tls.adopted += gaps
                found = found or bool(gaps)
        return found

    def _fill_gaps(self, st, t, name: str) -> list:
        """Track the untracked parts of a storage tracked in part, as written (for one launch)."""
        return [self.memory.add(lo, hi - lo, name, itemsize=t.element_size(), auto=True)
                for lo, hi in self.memory.gaps(st.data_ptr(), st.nbytes())]

    @locked
    def _kernel_read(self, addrs: np.ndarray, itemsize: int, load: bool = True) -> np.ndarray:
        """Lanes to switch off: out of bounds, and (for a load) never written, so that the load gives
        ``other`` (0 by default) there instead of garbage; the read is reported either way."""
        if self._tls.probing:
            return self._probe_access(addrs, itemsize)
        self._purge()
        bad, oob = self.memory.check_read(addrs, itemsize)
        if oob.any() and self._adopt(addrs[oob]):
            bad, oob = self.memory.check_read(addrs, itemsize)
        if self._tls.views is not None:
            bad += self._out_of_view(addrs, itemsize)
        deferred = self._defer(bad, addrs, itemsize) if load else []
        if len(bad) > len(deferred):
            self._report_kernel([b for b in bad if all(b is not d for d in deferred)], "read")
        if load and self.memory.saw_never:  # reported now, or already in this op, or when its value is used
            self._tls.garbage_read = self._tls.garbage_read or not deferred
            oob = oob | self.memory.never_written(addrs, itemsize)[0]
        return oob

    def _defer(self, bad: list[BadAccess], addrs: np.ndarray, itemsize: int) -> list[BadAccess]:
        """A load's unwritten (never written, stale) reads, reported when the kernel uses the value, not if it
        drops it (discards.py); those it defers."""
        later = [b for b in bad if b.kind in ("uninitialized-read", "stale-read")]
        if not later:
            return []
        path, line = kernel_source_line()
        kernel = self._hook.launch.name if self._hook and self._hook.launch else "?"
        location, extra = source_location(path, line), {"program_id": list(grid_idx()), "access": "read"}
        never = self.memory.saw_never  # a never-written read, not only a stale one (as _kernel_read decides)

        def report() -> None:
            with self.lock:
                # a wild access after a never-written read in this launch is its consequence; after a stale read
                # it is not (a stale index's out-of-bounds access is its own finding, as before deferral)
                self._tls.garbage_read = self._tls.garbage_read or never
                for b in later:
                    self._report(b, kernel, location, dict(extra))
        self.discards.defer(Pending(report), self.memory.unwritten(addrs, itemsize))
        return later

    def _probe_access(self, addrs: np.ndarray, itemsize: int) -> np.ndarray:
        """A kernel run by the fallback's probe (on scratch copies, with filled bytes that may be wild
        indices): neither checked nor marked, but a lane outside all memory is still switched off
        (the interpreter would dereference it and segfault)."""
        oob = self.memory.outside(addrs, itemsize)
        if oob.any() and self._adopt(addrs[oob]):
            oob = self.memory.outside(addrs, itemsize)
        return oob

    @locked
    def _kernel_write(self, addrs: np.ndarray, itemsize: int) -> np.ndarray:
        if self._tls.probing:
            return self._probe_access(addrs, itemsize)
        self._purge()
        oob = self.memory.mark_write(addrs, itemsize)
        if oob.any() and self._adopt(addrs[oob]):
            oob = self.memory.mark_write(addrs, itemsize)
        if oob.any():
            lane = int(np.flatnonzero(oob)[0])
            near, dist = self.memory.nearest(int(addrs[lane]))
            self._report_kernel([BadAccess("out-of-bounds", near, int(addrs[lane]), dist, lane,
                                           int(oob.sum()))], "write")
        return oob

    def _report_kernel(self, bad: list[BadAccess], access: str) -> None:
        if self._tls.garbage_read:  # a wild access after a garbage read in this launch is its consequence
            bad = [b for b in bad if b.kind != "out-of-bounds"]
        path, line = kernel_source_line()
        kernel = self._hook.launch.name if self._hook and self._hook.launch else "?"
        for b in bad:
            self._report(b, kernel, source_location(path, line),
                         {"program_id": list(grid_idx()), "access": access})

    def _report(self, b: BadAccess, kernel: str, location: str, extra: dict) -> None:
        self.memory.mark_reported(b)
        self.reporter.bad_access(b, kernel, location, self.reporter.at(b.address, **extra))
