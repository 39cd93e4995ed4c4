"""The device shadow's records of the GPU shadow oracle: which memory is tracked, under which name.

``RegionBook`` is the part of ``GpuShadowOracle`` (oracle.py) that keeps its ``DeviceShadow`` (regions.py)
up to date: regions added by the tracking API, by ``torch.empty``-family results (``allocated``), by
``UntypedStorage`` and ``resize_``; dropped when their storage dies or new memory lands on them; and the
questions the torch mode asks of them before an op (``tracked_near``, ``clean_now``, ``unstamped``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from ..core import ShadowCore, words
from ..locations import caller_line
from ..threads import locked
from ..torch_effects import has_memory
from . import device_checks as dc
from .regions import DeviceShadow, Region
from .views import byte_span

_SKIPPED = 32  # writes left unstamped per settled region and op (kept until the op ends)


class RegionBook(ShadowCore):
    """The records half of ``GpuShadowOracle``; the state is made in its ``__init__``."""

    shadow: DeviceShadow
    device: torch.device
    auto_track_empty: bool
    _dead: list
    _deaths: dict
    _filter: Any
    _skipping: list
    pause: Callable[[], Any]     # (GpuShadowOracle.pause: this thread's ops are the oracle's own)
    paused: Callable[[], bool]   # (GpuShadowOracle.paused)

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

