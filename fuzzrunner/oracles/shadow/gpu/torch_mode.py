"""Torch ops on the device shadow: a ``TorchDispatchMode`` that checks and stamps with device ops.

Read and write sets are the CPU oracle's (``torch_effects.classify``: the schema's whole views);
the indexed reads (``embedding``, ``index``, ``index_select``, ``gather``) read only the indexed
elements, found by running the same op on the source's shadow, and the indexed writes
(``index_put_``, ``masked_fill_``) stamp only what they write, the same way. A read is checked by
one small kernel (``device_checks.check_epochs``) that writes a row of a device log; nothing is
read back before the end of the op. Out-of-range indices are counted on the device, logged, and
redirected to 0 before the op runs (a device-side assert would end the process), as the CPU
oracle redirects them. Never-written elements a read saw are set to 0 after the check, so what
follows is the same on every run.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import torch_effects as fx
from ..locations import caller_line
from . import device_checks as dc
from .views import covers, shadow_parts

aten = torch.ops.aten
_GATHER_READS = {"embedding": 0, "index": 0, "index_select": 0, "gather": 0}
LOG_ROWS = 4096


class DeviceTorchMode(TorchDispatchMode):
    """Calls the oracle's ``regions``, ``log_read``, ``log_oob`` and ``allocated``."""

    def __init__(self, oracle):
        super().__init__()
        self.oracle = oracle

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        o = self.oracle
        if o.paused():
            return func(*args, **kwargs)
        tensors = [t for t in fx.leaves((args, kwargs)) if fx.has_memory(t) and t.device.type == o.device.type]
        if not any(o.tracked(t) for t in tensors) or func in fx.STORAGE_OPS:
            out = func(*args, **kwargs)
            self._allocations(func, args, kwargs, out)
            return out
        name = func._schema.name.split("::")[-1]
        reads, writes = fx.classify(func, args, kwargs)
        gathered = args[0] if name in _GATHER_READS and func.namespace == "aten" else None
        for t in reads:
            if t is gathered:
                self._gather_read(func, args, kwargs, t)
            else:
                self._read(func, t)
        args = self._bounds(func, name, args)
        out = func(*args, **kwargs)
        for t in writes:
            self._write(func, name, args, t)
        self._allocations(func, args, kwargs, out)
        return out

    # -- reads -----------------------------------------------------------------------------
    def _read(self, func, t: torch.Tensor) -> None:
        o = self.oracle
        for r, sh, exact in shadow_parts(t, o.regions_of(t), write=False):
            if r.clean(o.epoch):
                continue
            row = o.log_read(func, r, t, exact, caller_line(3))
            if row is None:
                return
            flat = sh.reshape(-1) if sh.is_contiguous() else sh.contiguous().reshape(-1)
            dc.check_epochs[(1,)](flat, flat, flat.numel(), o.shadow.cell, o.log[row], PER_STEP=r.per_step,
                                  HAS_ELEM=False, BLOCK=1024)
            if r.maybe_never and exact:  # the read saw garbage: make what follows it deterministic
                t.masked_fill_(sh == dc.NEVER, 0)

    def _gather_read(self, func, args, kwargs, src: torch.Tensor) -> None:
        """``embedding(W, idx)`` reads the rows ``idx`` of ``W``: the same op on ``W``'s shadow (and on
        its element numbers, to name the element) gives exactly the epochs read."""
        o = self.oracle
        for r, sh, exact in shadow_parts(src, o.regions_of(src), write=False):
            if r.clean(o.epoch) or not exact:
                if not exact and not r.clean(o.epoch):
                    self._read(func, src)
                continue
            row = o.log_read(func, r, src, False, caller_line(3))
            if row is None:
                return
            n = r.shadow.numel()  # type: ignore[union-attr]
            numbers = torch.arange(n, device=sh.device).as_strided(sh.shape, sh.stride(), sh.storage_offset())
            try:
                epochs = func(sh, *args[1:], **kwargs).contiguous().reshape(-1)
                elems = func(numbers, *args[1:], **kwargs).contiguous().reshape(-1)
            except (RuntimeError, IndexError):  # an index out of range: read whole (the bounds check reports it)
                o.log_cancel(row)
                self._read(func, src)
                continue
            dc.check_epochs[(1,)](epochs, elems, epochs.numel(), o.shadow.cell, o.log[row], PER_STEP=r.per_step,
                                  HAS_ELEM=True, BLOCK=1024)

    # -- index bounds ----------------------------------------------------------------------
    def _bounds(self, func, name: str, args):
        o = self.oracle
        for where, ix, src, dim, neg in fx.index_slots(name, args):
            if ix.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8) or ix.numel() == 0:
                continue
            try:
                n = src.size(dim) if src.dim() else 1
            except (IndexError, RuntimeError):
                continue
            bad = (ix < (-n if neg else 0)) | (ix >= n)
            o.log_oob(func, src, bad, ix, n, caller_line(3))
            args = fx.replace_index(args, where, ix.masked_fill(bad, 0))
        return args

    # -- writes ----------------------------------------------------------------------------
    def _write(self, func, name: str, args, t: torch.Tensor) -> None:
        o = self.oracle
        for r, sh, exact in shadow_parts(t, o.regions_of(t), write=True):
            if exact and name in ("index_put_", "_index_put_impl_", "index_put") and t is args[0]:
                sh.index_put_(args[1], torch.full((), o.epoch, dtype=torch.int32, device=sh.device))
            elif exact and name == "masked_fill_" and t is args[0]:
                sh.masked_fill_(args[1], o.epoch)
            else:
                sh.fill_(o.epoch)
                if covers(t, r):
                    r.fully_at, r.maybe_never = o.epoch, False

    # -- allocations -----------------------------------------------------------------------
    def _allocations(self, func, args, kwargs, out) -> None:
        if getattr(func, "is_view", False):
            return
        inputs = {t.untyped_storage().data_ptr() for t in fx.leaves((args, kwargs)) if fx.has_memory(t)}
        for t in fx._tensors(out):
            if fx.has_memory(t) and t.untyped_storage().data_ptr() not in inputs:
                self.oracle.allocated(t, func in fx.EMPTY_OPS, caller_line(4))
