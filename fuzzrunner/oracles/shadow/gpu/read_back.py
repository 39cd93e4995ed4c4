"""The GPU shadow oracle's read-back: the torch-side log rows, and the op's one copy to the host.

``ReadBack`` is the part of ``GpuShadowOracle`` (oracle.py) that logs each torch-side check to a row of
the device log (``log_read``, ``log_oob``, ``log_bounds``), and at the end of each op copies the violation
ring (kernels) and the log (torch ops) to the host once (``_collect``) and hands what they hold to the
core's ``Reporter``.
"""

from __future__ import annotations

import torch

from ...base import source_location
from ..core import BadAccess, words
from ..threads import locked
from ..torch_effects import has_memory
from . import device_checks as dc
from .internal_launch import launch as launch_internal
from .region_book import RegionBook
from .regions import HEAD, Region
from .torch_mode import GRAPH_ROWS, LOG_ROWS, SCRATCH_ROW, _capturing
from .views import byte_span

_KINDS = {dc.UNINIT: "uninitialized-read", dc.STALE: "stale-read", dc.OOB: "out-of-bounds"}


class ReadBack(RegionBook):
    """The read-back half of ``GpuShadowOracle``; the state is made in its ``__init__``."""

    log: torch.Tensor | None
    _rows: list
    _graph_rows: list
    _oob: list
    _launched: bool
    _captured: bool
    unchecked: dict
    _reported: set

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
