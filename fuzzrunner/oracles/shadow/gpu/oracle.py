"""The shadow oracle on the device: the same reports as the CPU oracle, from device-side shadows.

A back end of the shadow core (core/): ``GpuShadowOracle`` keeps a ``DeviceShadow`` (regions.py) fed by
three paths: the tracking API (``fuzzrunner.track``), torch ops (``torch_mode.py``) and Triton launches,
whose kernels are replaced for the launch by their instrumented twins (``instrument.py``). Nothing is read
back during an op; at the end of each op the violation ring and the torch log are copied to the host once
and handed to the core's ``Reporter``, which the CPU mode reports through too (same kinds, tensor names,
messages, details; the thread of a bad access is not known on the device).
A kernel that cannot be instrumented runs unchecked and is named, once per case, as a
``tool-limitation`` (never silently).
"""

from __future__ import annotations

import threading
import weakref

import torch

from .... import _env, tracking
from ...base import source_location
from ..core import BadAccess, Hooks, ShadowCore, insert_mode, words
from ..locations import caller_line
from ..threads import locked
from ..torch_effects import has_memory
from . import device_checks as dc
from . import dispatch_filter, torch_mode
from .instrument import INSTRUMENTER, NotInstrumentable, python_function
from .internal_launch import launch as launch_internal
from .launch_hook import LaunchHook
from .regions import CAP, HEAD, DeviceShadow, Region, capturing
from .torch_mode import GRAPH_ROWS, LOG_ROWS, SCRATCH_ROW, DeviceTorchMode, _capturing
from .views import byte_span

_KINDS = {dc.UNINIT: "uninitialized-read", dc.STALE: "stale-read", dc.OOB: "out-of-bounds"}


class GpuShadowOracle(ShadowCore):
    mode_class = DeviceTorchMode  # the dispatch mode it runs (benchmarks/shadow_dispatch.py swaps it)

    def __init__(self, device: str | torch.device | None = None, *, auto_track_empty: bool = True):
        """``device``: the device whose memory it checks: the run's (``Context.device``, from ``shadow_oracle``: a
        ``--device cpu`` run on a GPU machine checks the CPU, where its tensors are); by default the process's."""
        super().__init__(names_threads=False)
        dev = torch.device(device or _env.device_type())
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        self.device = dev
        self.cuda = dev.type == "cuda"  # else the CPU (Triton's interpreter): read at every op
        self.bounds_kernel = self.cuda  # index bounds by one launch (``index_bounds``); on the CPU by torch ops
        self.auto_track_empty = auto_track_empty
        self.log: torch.Tensor | None = None   # device rows of torch-side checks
        self.shadow: DeviceShadow = None  # type: ignore[assignment]
        self._rows: list = []                 # per log row: what it checked
        self._graph_rows: list = []           # per graph row (captured checks, for the case): what it checks
        self._oob: list = []                  # this op's index bounds checks: (what, out-of-range mask, indices)
        self._launched = False                # an instrumented kernel ran since the last read-back
        self._captured = False                # one was captured in a CUDA graph: its replays write the ring
        self._tls = threading.local()
        self._hook: LaunchHook | None = None
        self._dead: list = []
        self._deaths: dict = {}                # (address, bytes) -> the finalizer that reports its storage freed
        self.unchecked: dict[str, str] = {}   # kernel -> why it runs unchecked (named in the report)
        self._reported: set = set()           # (region id, element, op): one report per bad element per op
        self._filter = None                    # the dispatch filter's module while this oracle uses it
        self._filter_was = False               # whether this thread had its key included before
        self._skipping: list = []              # regions holding this op's left-out writes (``unstamped``)
        self._pauser = _Pause(self._tls)

    @property
    def epoch(self) -> int:
        return self.shadow.epoch

    # -- protocol -------------------------------------------------------------------------
    def start(self) -> None:
        self.shadow = DeviceShadow(self.device)
        self.log = torch.zeros((SCRATCH_ROW + 1, 4), dtype=torch.int64, device=self.device)
        super().start()  # (its own check kernels run through the interpreter off the GPU: triton_compat first)

    def _install_back_end(self, hooks: Hooks) -> None:
        self._hook = hooks.add(LaunchHook(self._launch, self.pause, self._unchecked_launch, dc.INTERNAL))

    def _mode_entered(self, hooks: Hooks) -> None:
        if self.mode_class is DeviceTorchMode:  # (a mode of another class may do more with an op than it knows)
            self._start_filter(hooks)

    def _start_filter(self, hooks: Hooks) -> None:
        """Ops that the mode would only run skip it on this thread (dispatch_filter.py), where it can be built
        and no other oracle of the process holds it (one mode, one index: that oracle's)."""
        filt = dispatch_filter.get()
        if filt is None or not dispatch_filter.claim(self):
            return
        self._filter, self._filter_was = filt, filt.included()  # from here on, ``_stop_filter`` undoes it all
        hooks.push(self._stop_filter)
        torch_mode.use_filter(filt)
        filt.take_fresh()  # (an earlier case's)
        self.shadow.mirror_to(filt)
        filt.set_mode(self._mode, str(self.device))
        self._pauser.filter = filt
        filt.set_paused(getattr(self._tls, "pause", 0))
        filt.include(True)

    def _stop_filter(self) -> None:
        filt, self._filter = self._filter, None
        if filt is None:
            return
        self._pauser.filter = None
        filt.set_paused(0)
        filt.include(self._filter_was)
        filt.set_mode(None, str(self.device))  # (inactive: the next oracle to hold it sends its own index)
        self.shadow.mirror_to(None)
        dispatch_filter.release(self)

    def begin_op(self, index: int, op: dict) -> None:
        with self.pause():
            self._collect()
            super().begin_op(index, op)
            self.shadow.set_epoch(index + 1)
            for r in self._skipping:  # the writes kept for the op that ended: let go
                r.skipped = None
            self._skipping.clear()

    def end_op(self) -> None:
        with self.pause():
            self._collect()

    def _read_back(self) -> None:
        with self.pause():
            self._collect()

    def _closing_reports(self) -> None:
        for kernel, why in self.unchecked.items():
            self.reporter.add("tool-limitation", kernel, "", "", f"{kernel} ran unchecked on the GPU: {why}",
                              {"op_index": -1}, 1)

    def _uninstall(self) -> None:
        for r in self._skipping:
            r.skipped = None
        self._skipping.clear()
        for watch in self._deaths.values():
            watch.detach()
        self._deaths.clear()
        super()._uninstall()

    def _leave_mode(self) -> None:
        stepped = getattr(self._tls, "stepped_aside", None)
        if stepped is not None:  # finished inside a quiet block: its mode back first, then left in its place
            self._tls.stepped_aside = None
            insert_mode(stepped[0], stepped[1])
        super()._leave_mode()

    # -- pausing (the oracle's own ops) ---------------------------------------------------
    def paused(self) -> bool:
        return getattr(self._tls, "pause", 0) > 0 or tracking.is_quiet()

    def pause(self):
        """A context in which this thread's ops and launches are the oracle's own (reentrant)."""
        return self._pauser

    def quiet_begin(self):
        """``tracking.quiet()`` hides this thread's torch ops: where this oracle's dispatch mode is the
        innermost one, it steps aside for the block, so that those ops (a reference model's, hundreds
        per case) cost nothing rather than a pass through the mode each; else each op passes it quietly
        (``paused``). Kernels launched inside are still checked (``_launch``). The token: (the mode, its
        place on the stack), also kept for this thread, so that ``finish`` inside the block puts it back."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode, _len_torch_dispatch_stack, _pop_mode
        top = _get_current_dispatch_mode()
        if not (isinstance(top, DeviceTorchMode) and top.oracle is self):
            return None
        token = (top, _len_torch_dispatch_stack() - 1)
        _pop_mode()
        self._tls.stepped_aside = token
        return token

    def quiet_end(self, token: tuple | None) -> None:
        """Back in its place (under any mode entered during the block and still on), unless ``finish`` did it."""
        stepped = getattr(self._tls, "stepped_aside", None)
        if token is not None and stepped is token:
            self._tls.stepped_aside = None
            insert_mode(stepped[0], stepped[1])

    # -- regions --------------------------------------------------------------------------
    def _settle(self) -> None:
        """Records of freed memory dropped (``_purge``), if any storage died or the dispatch filter ran an op
        whose result lies where a record does, since the last time."""
        if self._dead or (self._filter is not None and self._filter.has_fresh()):
            self._purge()

    def _purge(self) -> None:
        if self._filter is not None:  # results of ops the mode did not see, in memory a record still names
            for ptr, nbytes in self._filter.take_fresh():
                self._forget(ptr, nbytes)
        while self._dead:
            ptr, nbytes = self._dead.pop()
            for r in self.shadow.overlapping(ptr, nbytes):
                if ptr <= r.start and r.end <= ptr + nbytes:
                    self.shadow.remove(r)

    def _on_death(self, st) -> None:
        """When ``st`` is freed its regions go (``_purge``): one watch per storage, however often it is
        tracked again, and none outlives the case (``finish`` ends them)."""
        key = (st.data_ptr(), st.nbytes())
        watch = self._deaths.get(key)
        if watch is None or not watch.alive:
            self._deaths[key] = weakref.finalize(st, self._dead.append, key)

    @locked
    def tracked_near(self, spans: list) -> list:
        """The tracked regions sharing a byte with any storage ``(address, bytes)`` of ``spans`` (most ops
        touch none: one bisection per storage answers that)."""
        self._settle()
        shadow = self.shadow
        if not shadow.any_overlapping(spans):
            return []
        return [r for start, nbytes in spans for r in shadow.overlapping(start, nbytes)]

    def all_clean(self, regions: list) -> bool:
        """No read of any of ``regions`` can be reported in this op (``Region.clean``), outside a capture."""
        epoch = self.shadow.epoch
        return all(r.clean(epoch) for r in regions)

    @locked
    def regions_of(self, t: torch.Tensor, span: tuple[int, int] | None = None) -> list[Region]:
        """The regions sharing a byte with the view ``t`` (``span``: its ``byte_span``, if known)."""
        lo, hi = span or byte_span(t)
        return self.shadow.overlapping(lo, hi - lo)

    def clean_now(self, region: Region) -> bool:
        """No read of ``region`` can be reported in this op (``Region.clean``)."""
        return region.clean(self.shadow.epoch)

    def stamped_now(self, region: Region) -> bool:
        """A write in this op covered ``region`` whole, outside any capture: every element of its shadow holds
        this op's epoch (a write to it now would stamp the same), and no read of it can be reported."""
        return region.fully_at == self.shadow.epoch

    def unstamped(self, region: Region, t: torch.Tensor) -> bool:
        """Whether an eager write of the view ``t`` leaves ``region``'s shadow as it is: it holds this op's
        epoch already (``stamped_now``), or the region is ``settled`` (the write is kept, for this op, in
        case the region becomes per-step before the op ends: ``_restamp``)."""
        epoch = self.shadow.epoch
        if region.fully_at == epoch:
            return True
        if not region.settled():
            return False
        if region.skipped_at != epoch or region.skipped is None:
            region.skipped, region.skipped_at = [], epoch
            self._skipping.append(region)
        if len(region.skipped) >= _SKIPPED:
            return False  # (a bound on what an op keeps: this write is stamped)
        region.skipped.append(t)
        return True

    def _restamp(self, region: Region) -> None:
        """``region`` became per-step or shared: the stamps left out in this op are made now (those of
        earlier ops give the same verdicts, see ``Region.settled``)."""
        from .views import shadow_parts
        done, region.skipped = region.skipped, None
        if not done or region.skipped_at != self.shadow.epoch:
            return
        with self.pause():
            for t in done:
                for _r, sh, _ in shadow_parts(t, [region], True):
                    sh.fill_(self.shadow.epoch)

    @locked
    def on_track(self, tensor, name: str, per_step: bool, initialized: bool) -> None:
        if self.paused() or tensor.numel() == 0 or not has_memory(tensor) or tensor.device.type != self.device.type:
            return
        self._purge()
        with self.pause():
            lo, hi = byte_span(tensor)
            inner = [r for r in self.shadow.overlapping(lo, hi - lo) if r.start <= lo and hi <= r.end]
            outer = min(inner, key=lambda r: r.nbytes) if inner else None
            if outer is not None and (outer.start, outer.end) != (lo, hi) and outer.itemsize == tensor.element_size():
                self._sub_region(outer, lo, hi, name, per_step)  # a tracked view inside a tracked storage
                return
            r = self.shadow.add(lo, hi - lo, name, per_step=per_step, initialized=initialized,
                                itemsize=tensor.element_size(), shape=tuple(tensor.shape))
            if r.skipped is not None and r.per_step:  # a settled region made per-step
                self._restamp(r)
            if r.name != name and not r.auto and outer is None:
                pass
            if outer is not None and outer is r and outer.auto:
                r.name, r.auto = name, False
            self._on_death(tensor.untyped_storage())

    def _sub_region(self, outer: Region, lo: int, hi: int, name: str, per_step: bool) -> None:
        """A region inside ``outer`` sharing its shadow elements (a view of its shadow): its own name
        and per-step flag, the same epochs."""
        a, b = (lo - outer.start) // outer.itemsize, (hi - outer.start) // outer.itemsize
        self._restamp(outer)  # its shadow is the new region's too from now on: no stamp left out
        outer.shared = True
        for r in self.shadow.regions:
            if r.start == lo and r.end == hi:
                r.per_step = r.per_step or per_step
                r.shared = True
                self._restamp(r)
                return
        sub = Region(lo, hi - lo, name, per_step, outer.itemsize, (b - a,), outer.shadow[a:b],  # type: ignore[index]
                     fully_at=None, maybe_never=outer.maybe_never, shared=True)
        self.shadow.append(sub)
        self.shadow.sort_by_size()  # the launch table lists inner regions last

    @locked
    def on_carry_over(self, tensor) -> None:
        if self.paused() or not has_memory(tensor) or tensor.device.type != self.device.type:
            return
        from .views import shadow_parts
        self._settle()
        with self.pause():
            for _r, sh, _ in shadow_parts(tensor, self.regions_of(tensor), write=True):
                sh.copy_(torch.where(sh != dc.NEVER, self.shadow.epoch_like(sh.shape), sh))

    @locked
    def new_storage(self, st) -> None:
        """``torch.UntypedStorage(n)`` (no aten op sees it): n bytes never written."""
        if self.paused() or not self.auto_track_empty or not st.nbytes() or st.device.type != self.device.type:
            return
        self._purge()
        self.shadow.add(st.data_ptr(), st.nbytes(), words.made_at("UntypedStorage", caller_line()),
                        per_step=False, initialized=False, itemsize=1, shape=(st.nbytes(),), auto=True)
        self._on_death(st)

    def storage_resized(self, st, before: tuple) -> None:
        """``UntypedStorage.resize_`` (no aten op sees it): as a tensor's ``resize_``, byte by byte."""
        if not self.paused() and st.device.type == self.device.type:
            self.resized(st, before, 1, (st.nbytes(),), caller_line())

    @locked
    def resized(self, st, before: tuple, itemsize: int, shape: tuple, where: tuple) -> None:
        """A storage moved or grew: its old bytes keep their epochs, the new ones are never written."""
        self._purge()
        olds = self.shadow.overlapping(*before)
        if not olds and not self.auto_track_empty:
            return
        with self.pause():
            name = olds[0].name if olds else words.made_at("resize_", where)
            for r in olds:
                self._restamp(r)
            kept = [(r, r.shadow) for r in olds if r.shadow is not None]
            for r in olds:
                self.shadow.remove(r)
            if not st.nbytes() or not st.data_ptr():
                return
            new = self.shadow.add(st.data_ptr(), st.nbytes(), name, per_step=any(r.per_step for r, _ in kept),
                                  initialized=False, itemsize=itemsize, shape=shape, auto=not olds)
            self._on_death(st)
            if new.shadow is not None:  # the old bytes (untracked: written) keep their contents
                new.shadow[:min(before[1], st.nbytes()) // itemsize] = self.shadow.epoch
            for r, sh in kept:  # the old bytes' epochs, at their offsets in the new storage
                lo, hi = max(r.start, before[0]), min(r.end, before[0] + min(before[1], st.nbytes()))
                if hi <= lo:
                    continue
                per_byte = sh.repeat_interleave(r.itemsize)[lo - r.start:hi - r.start]
                a, b = (lo - before[0]) // itemsize, (hi - before[0]) // itemsize
                if b > a:  # an element with any never-written byte is never written
                    new.shadow[a:b] = per_byte[:(b - a) * itemsize].view(b - a, itemsize).amin(1)  # type: ignore[index]

    @locked
    def allocated(self, t: torch.Tensor, st, uninitialized: bool, where: tuple | None) -> None:
        """A result ``t`` in fresh storage ``st``: tracked as never written if made by the ``empty``
        family, else its memory is new (a record there is of freed memory)."""
        self._settle()
        if uninitialized and self.auto_track_empty:
            name = words.made_at("torch.empty", where or ("?", 0))
            self.shadow.add(st.data_ptr(), st.nbytes(), name, per_step=False, initialized=False,
                            itemsize=t.element_size(), shape=tuple(t.shape), auto=True)
            self._on_death(st)
        else:
            self._forget(st.data_ptr(), st.nbytes())

    def _forget(self, ptr: int, nbytes: int) -> None:
        """New memory at ``[ptr, ptr+nbytes)``: a record there named freed memory."""
        for r in self.shadow.overlapping(ptr, nbytes):
            self.shadow.remove(r)

    # -- torch-side log -------------------------------------------------------------------
    @locked
    def log_read(self, func, region: Region, t: torch.Tensor, exact: bool, where: tuple) -> int | None:
        """A log row for one torch-side read check (None: the log is full). Inside a CUDA-graph capture
        the row is one of the graph rows, kept for the case: the captured check writes it at every
        replay (adding to what it holds), and every read-back reads and empties it."""
        view = (t.shape, t.stride(), t.storage_offset(), t.untyped_storage().data_ptr(), t.element_size())
        desc = ("read", str(func), region, view if exact else None, where)  # the line is formatted if reported
        if _capturing(t):
            if len(self._graph_rows) >= GRAPH_ROWS:
                return None
            self._graph_rows.append(desc)
            return LOG_ROWS + len(self._graph_rows) - 1
        if len(self._rows) >= LOG_ROWS:
            return None
        self._rows.append(desc)
        return len(self._rows) - 1

    def check_read(self, row: int, epochs: torch.Tensor, elems: torch.Tensor | None, per_step: bool) -> None:
        """Queue the check of a torch op's read of ``epochs`` (int32, contiguous) into log row ``row``;
        ``elems``: the element number of each epoch (else its position)."""
        args = (epochs, epochs if elems is None else elems, epochs.numel(), self.shadow.cell, self.log[row])  # type: ignore[index]
        launch_internal(dc.check_epochs, self.device, args,
                        (per_step, elems is not None, row >= LOG_ROWS, 1024))  # PER_STEP, HAS_ELEM, ACCUM, BLOCK

    @locked
    def log_cancel(self, row: int) -> None:
        if row >= LOG_ROWS:
            self._graph_rows[row - LOG_ROWS] = ("cancelled",)
        else:
            self._rows[row] = ("cancelled",)

    @locked
    def log_oob(self, func, src: torch.Tensor, bad: torch.Tensor, ix: torch.Tensor, n: int, where: tuple) -> None:
        """An indexing op's out-of-range entries (``bad``): counted at the read-back, in its one copy to
        the host; where and which, and the indexed tensor's name, only for an op that had one."""
        if len(self._oob) < LOG_ROWS:  # the indexed tensor's bytes, not the tensor: nothing kept alive
            span = byte_span(src) if has_memory(src) and src.numel() else None
            self._oob.append(((func, span, tuple(src.shape), n, where), bad, ix))

    @locked
    def log_bounds(self, func, src: torch.Tensor, n: int, where: tuple, captured: bool) -> int:
        """The log row of one ``index_bounds`` launch (the scratch row inside a capture, as ``log_oob``
        logs nothing there, or when the op's rows ran out); read back as ``log_oob``'s counts are."""
        if captured or len(self._rows) >= LOG_ROWS:
            return SCRATCH_ROW
        span = byte_span(src) if has_memory(src) and src.numel() else None
        self._rows.append(("bounds", func, span, tuple(src.shape), n, where))
        return len(self._rows) - 1

    def _oob_desc(self, func, span: tuple | None, shape: tuple, n: int, where: tuple) -> tuple:
        """The log description of an indexing op that indexed out of range (made at its read-back)."""
        regions = self.shadow.overlapping(span[0], span[1] - span[0]) if span else []
        name = regions[-1].name if regions else words.unnamed(shape)
        return ("oob", str(func), name, n, where)

    # -- Triton launches ------------------------------------------------------------------
    @locked
    def _launch(self, kernel, args: list):
        """(twin, extra launch arguments) for a user kernel; None: run it as it is. Inside
        ``tracking.quiet()`` too, as the CPU oracle checks it: quiet hides the harness's torch ops, not
        kernels (vLLM's registered ops run there, and their kernels' loads are what is checked)."""
        if getattr(self._tls, "pause", 0) > 0 or kernel in dc.INTERNAL:
            return None
        known = _KERNELS.get(id(kernel))
        if known is None or known[0] is not kernel:
            known = _KERNELS[id(kernel)] = (kernel, *_kernel(kernel))
        _, twin, name, path = known
        if twin is None:  # ``path``: why it cannot be instrumented
            self.unchecked.setdefault(name, path)
            return "unchecked"
        device = self.device.type
        for _, t in args:
            d = getattr(t, "device", None)
            if d is None or d.type != device:
                self.unchecked.setdefault(name, "an argument is a tensor descriptor or on another device")
                return "unchecked"
        self._settle()
        in_capture = capturing(self.device)
        table, nreg, _, _ = self.shadow.table(args, name, path, in_capture)
        self._launched = True
        self._captured = self._captured or in_capture
        return twin, dict(_sh_table=table, _sh_arena=self.shadow.arena, _sh_ring=self.shadow.ring,
                          _sh_cell=self.shadow.cell, _SH_CAP=CAP)

    @locked
    def _unchecked_launch(self, args: list) -> None:
        """Every tracked element of an unchecked kernel's tensor arguments counts as written by it."""
        from .views import shadow_parts
        with self.pause():
            for _, t in args:
                if getattr(t, "device", None) is not None and t.device.type == self.device.type:
                    for _r, sh, _ in shadow_parts(t, self.regions_of(t), write=True):
                        sh.copy_(self.shadow.epoch_like(sh.shape))

    # -- read-back ------------------------------------------------------------------------
    @locked
    def _collect(self) -> None:
        """The op's one read-back: the ring (kernels) and the log (torch ops)."""
        if self.shadow is None:
            return
        if not (self._launched or self._captured or self._rows or self._oob or self._graph_rows):
            return  # nothing since the last read-back can have written the ring or the log: no sync
        self._launched = False
        rows, self._rows = self._rows, []
        graph = len(self._graph_rows)
        oob, self._oob = self._oob, []
        log = self.log
        assert log is not None
        with torch._C._DisableTorchDispatch():  # the oracle's own ops: past every dispatch mode
            parts = [self.shadow.ring[:HEAD]]
            if rows:
                parts.append(log[:len(rows)].reshape(-1))
            if graph:
                parts.append(log[LOG_ROWS:LOG_ROWS + graph].reshape(-1))
            if oob:
                parts.append(torch.stack([bad.sum() for _, bad, _ in oob]))
            host = (torch.cat(parts) if len(parts) > 1 else parts[0]).cpu()  # the op's one synchronisation
            entries = self.shadow.ring_entries(host[:HEAD])
            logged = host[HEAD:host.numel() - len(oob)].view(-1, 4).tolist()
            if graph and any(values[1] for values in logged[len(rows):]):
                log[LOG_ROWS:LOG_ROWS + graph].zero_()  # replays add to them
        for desc, values in zip(rows + self._graph_rows, logged):
            self._torch_row(desc, values)
        for (what, bad, ix), count in zip(oob, host[host.numel() - len(oob):].tolist() if oob else []):
            if count:  # rare: this op indexed out of range; which entry, and its value
                bad, ix = bad.reshape(-1), ix.reshape(-1)
                first = int(bad.to(torch.int8).argmax())
                self._torch_row(self._oob_desc(*what), [count, count, first, int(ix[first])])
        self._kernel_entries(entries)

    def _torch_row(self, desc, values) -> None:
        kind_code, count, where, wep = values
        if desc[0] == "cancelled" or not count:
            return
        if desc[0] == "bounds":  # an index_bounds row that counted out-of-range entries: named now
            desc = self._oob_desc(*desc[1:])
        if desc[0] == "oob":
            _, func, name, n, site = desc
            self.reporter.index_out_of_range(func, name, wep, n, count, source_location(*site))
            return
        _, func, region, view, site = desc
        loc = source_location(*site)
        elem = where if view is None else self._view_element(region, view, where)
        self._bad(_KINDS[kind_code], region, elem, wep, func, loc, {"torch_op": func}, count)

    @staticmethod
    def _view_element(region: Region, view: tuple, flat: int) -> int:
        shape, stride, offset, base, item = view
        idx, rest = [], flat
        for s in reversed(shape):
            idx.append(rest % s)
            rest //= s
        el = offset + sum(i * st for i, st in zip(reversed(idx), stride))
        return (base + el * item - region.start) // region.itemsize

    def _kernel_entries(self, entries: list) -> None:
        launches = self.shadow.launches
        garbage = {e[9] for e in entries if e[0] == dc.UNINIT}
        self._adopt(entries)
        for kind, access, reg, elem, p0, p1, p2, line, wep, launch in entries:
            rec = launches.get(launch)
            if rec is None:  # every launch's record lives for the case: this is the oracle's own fault
                self.unchecked.setdefault("<gpu shadow>", f"a ring entry named launch {launch}, which it never made: "
                                          f"bad reads of this case may be missing (a fuzzrunner bug: please report it)")
                continue
            loc = source_location(self._kernel_file(rec), line)
            details = {"program_id": [p0, p1, p2], "access": ("read", "write", "read")[access]}
            if kind == dc.OOB:
                if not self._adopted(rec, elem) and launch not in garbage:  # after a garbage read: its consequence
                    self._oob_kernel(rec, elem, loc, details)
                continue
            region = rec.regions[reg]
            off = (region.shadow.data_ptr() - self.shadow.arena.data_ptr()) // 4
            self._bad(_KINDS[kind], region, elem - off, wep, rec.kernel, loc, details, 1)

    def _kernel_file(self, rec) -> str:
        return rec.path

    def _oob_kernel(self, rec, address: int, loc: str, details: dict) -> None:
        near = min(rec.regions, default=None,  # a tracked region before the argument storage that holds it
                   key=lambda r: (min(abs(address - r.start), abs(address - r.end)), r.shadow is None, r.auto))
        dist = 0
        if near is not None:
            dist = near.start - address if address < near.start else address - near.end + 1
        details.update(address=hex(address), **self.reporter.op())
        details.update(_driver_range(address))
        self.reporter.bad_access(BadAccess("out-of-bounds", near, address, dist, 0, 1), rec.kernel, loc, details)

    def _adopt(self, entries: list) -> None:
        """Lanes outside their launch's table but inside a live tensor's storage (reached through a pointer
        array) are not out of bounds: that storage is tracked (as written) for the rest of the case, so
        later launches given a pointer array reach it. One walk of the live tensors per read-back, only
        when some lane left its table."""
        import numpy as np

        from ..triton_hook import live_storages
        self._settle()
        addrs = [e[3] for e in entries if e[0] == dc.OOB and self.shadow.containing(e[3]) is None]
        if not addrs:
            return
        for st, t in live_storages(np.array(addrs, dtype=np.uint64)):
            if not self.shadow.overlapping(st.data_ptr(), st.nbytes()):
                self.shadow.add(st.data_ptr(), st.nbytes(), words.unnamed(t.shape), per_step=False,
                                initialized=True, itemsize=t.element_size(), shape=tuple(t.shape), auto=True)

    def _adopted(self, rec, address: int) -> bool:
        """The lane reached a live tensor outside the table: switched off on the device, so the kernel
        is named as checked in part (a tool limitation), never reported out of bounds."""
        if self.shadow.containing(address) is None:
            return False
        self.unchecked.setdefault(rec.kernel, "it reached a tensor that is neither its argument nor tracked (a "
                                  "pointer array?): those lanes were switched off in that launch; track the "
                                  "tensor (fuzzrunner.track) so the GPU shadow follows it from the start")
        return True

    def _bad(self, kind: str, region: Region, elem: int, wep: int, kernel: str, loc: str, extra: dict,
             count: int) -> None:
        key = (region.start, elem, self.op_index)
        if key in self._reported:
            return  # the same bad element read again in this op: one bad read, one report
        self._reported.add(key)
        byte = elem * region.itemsize
        b = BadAccess(kind, region, region.start + byte, byte, 0, count, written_epoch=wep)
        self.reporter.bad_access(b, kernel, loc, self.reporter.at(b.address, **extra))


_SKIPPED = 32  # writes left unstamped per settled region and op (kept until the op ends)

# id(kernel) -> (kernel, *_kernel(kernel)), per process (by id: a JITFunction's hash takes a lock; the kernel
# held, so an id is never another kernel's)
_KERNELS: dict = {}


def _kernel(kernel) -> tuple:
    """(instrumented twin, name, source file) of a kernel; (None, name, why) for one that cannot be."""
    fn = python_function(kernel)
    try:
        return INSTRUMENTER.kernel(kernel), fn.__name__, fn.__code__.co_filename
    except NotInstrumentable as e:
        return None, fn.__name__, str(e)


class _Pause:
    """``GpuShadowOracle.pause()``: one object per oracle, counting per thread (no class made per call). The
    dispatch filter, while the oracle holds it, is told each depth, so that it lets the oracle's own ops run as
    the paused mode would (no result of theirs taken for new memory)."""

    def __init__(self, tls):
        self.tls = tls
        self.filter = None

    def __enter__(self):
        depth = self.tls.pause = getattr(self.tls, "pause", 0) + 1
        if self.filter is not None:
            self.filter.set_paused(depth)

    def __exit__(self, *exc):
        depth = self.tls.pause = self.tls.pause - 1
        if self.filter is not None:
            self.filter.set_paused(depth)


def _driver_range(address: int) -> dict:
    """The device allocation holding ``address`` (``cuMemGetAddressRange``, cuda-python), if any: an
    out-of-bounds lane inside another allocation is named with its range."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return {}
    try:
        err, base, size = driver.cuMemGetAddressRange(address)
    except Exception:  # noqa: BLE001  (no context, or a CPU address: nothing to name)
        return {}
    if err != driver.CUresult.CUDA_SUCCESS:
        return {"driver_allocation": None}
    return {"driver_allocation": [hex(int(base)), int(size)]}
