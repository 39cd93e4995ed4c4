"""Torch ops on the device shadow: a ``TorchDispatchMode`` that checks and stamps with device ops.

Read and write sets are the CPU oracle's (``torch_effects.classify``: the schema's whole views);
the indexed reads (``embedding``, ``index``, ``index_select``, ``gather``) read only the indexed
elements, found by running the same op on the source's shadow, and the indexed writes
(``index_put_``, ``masked_fill_``) stamp only what they write, the same way. A read is checked by
one small kernel (``device_checks.check_epochs``) that writes a row of a device log; nothing is
read back before the end of the op. Inside a CUDA-graph capture the checks are captured too, each
with a row of its own that every replay adds to (``GRAPH_ROWS``), so a replay's reads are checked
against the epoch of the op that replays it. Out-of-range indices are counted on the device, logged, and
redirected to 0 before the op runs (a device-side assert would end the process), as the CPU
oracle redirects them. Never-written elements a read saw are set to 0 after the check, so what
follows is the same on every run.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import _pop_mode, _push_mode

from ...dynamo_free import HOOKS, DynamoFreeMode, disabled
from .. import compiled
from .. import torch_effects as fx
from ..locations import caller_line
from ..torch_fallback import custom_op_impl, python_kernel
from ..torch_hook import _keys_below_python
from . import device_checks as dc
from .internal_launch import launch
from .views import byte_span, covers, shadow_parts

aten = torch.ops.aten
_GATHER_READS = {"embedding": 0, "index": 0, "index_select": 0, "gather": 0, "take": 0, "_unsafe_index": 0,
                 "masked_select": 0}
# Indexed writes, modelled by running the op itself on the shadow with every value operand replaced
# by the epoch: in place, exactly the written elements get it; functional, the result's shadow is
# what the op read of ``self`` (overwritten elements carry the current epoch, so they pass).
_SCATTERS = {"index_put", "_index_put_impl", "_unsafe_index_put", "index_copy", "index_fill", "masked_fill",
             "masked_scatter", "scatter", "put", "select_scatter", "slice_scatter", "diagonal_scatter"}
_ACCUMULATE = {"index_add", "scatter_add", "scatter_reduce", "index_reduce"}
_INDEX_ARGS = {"index", "indices", "mask", "dim", "start", "end", "step", "offset", "dim1", "dim2"}
LOG_ROWS = 4096    # torch-side read checks per op
GRAPH_ROWS = 1024  # torch-side read checks captured in CUDA graphs, per case
SCRATCH_ROW = LOG_ROWS + GRAPH_ROWS  # a row nobody reads (index bounds captured in a graph, or past the log's end)


class _Op:
    """What the mode needs to know of one op overload, worked out at its first dispatch."""
    __slots__ = ("name", "base", "aten", "passthrough", "storage", "indexes", "empty")

    def __init__(self, func):
        self.name = func._schema.name.split("::")[-1]
        self.base = self.name.rstrip("_")
        self.aten = func.namespace == "aten"
        self.storage = func in fx.STORAGE_OPS
        self.empty = func in fx.EMPTY_OPS
        self.indexes = self.aten and fx.may_index(self.name)
        # A view or a metadata op reads and writes no bytes and allocates nothing: nothing to do but run it
        # (about a third of a case's ops).
        self.passthrough = (func.namespace in ("aten", "prims") and not self.storage
                            and (getattr(func, "is_view", False) or func in fx.METADATA_ONLY
                                 or fx._is_metadata_inplace(func)))


_OPS: dict = {}


def _op(func) -> _Op:
    info = _OPS.get(func)
    if info is None:
        info = _OPS[func] = _Op(func)
        if FILTER[0] is not None:  # the dispatch filter learns what this mode does with the op
            FILTER[0].categorize(func._schema.name, func._schema.overload_name, category(info))
    return info


PASS, PLAIN, ALWAYS = 1, 2, 3  # the dispatch filter's names for what the mode does with an op (dispatch_filter.cpp)


def category(op: _Op) -> int:
    """What the mode does with an op, for the dispatch filter (dispatch_filter.py): only runs it (a view, a
    metadata op); runs it unless it touches tracked memory (a plain aten op); or always looks at it."""
    if op.passthrough:
        return PASS
    return ALWAYS if op.storage or op.empty or op.indexes or not op.aten else PLAIN


FILTER: list = [None]  # the dispatch filter's module, once an oracle has loaded it (``use_filter``)


def use_filter(module) -> None:
    """From now on name each op's kind to the dispatch filter ``module`` at its first dispatch, and name those
    named before now (an op named twice meanwhile is named the same)."""
    if FILTER[0] is module:
        return
    FILTER[0] = module
    for func, op in list(_OPS.items()):
        module.categorize(func._schema.name, func._schema.overload_name, category(op))


def _flat(args, kwargs) -> list:
    """The tensors among an op's arguments (``torch_effects.leaves`` of both, faster for flat ones)."""
    out = []
    for v in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple, dict)):
            out.extend(fx.leaves(v))
    return out


def _spans(args, kwargs, cuda: bool) -> list:
    """(storage address, bytes) of each tensor argument on the oracle's device (CUDA, or else the CPU)
    that has memory."""
    out = []
    for t in _flat(args, kwargs):
        if (t.is_cuda if cuda else t.is_cpu) and t.layout is _STRIDED:
            try:
                st = t.untyped_storage()
                ptr = st.data_ptr()  # (a wrapper subclass's storage has no data: it raises)
            except (RuntimeError, NotImplementedError):
                continue
            if ptr:
                out.append((ptr, st.nbytes()))
    return out


_STRIDED = torch.strided
_STREAM_CAPTURING = torch._C._cuda_isCurrentStreamCapturing  # torch.cuda.is_current_stream_capturing, unwrapped


def _among(ptr: int, spans: list) -> bool:
    """Whether ``ptr`` starts one of the storages ``spans`` (a handful: a scan, no set made)."""
    for start, _ in spans:
        if start == ptr:
            return True
    return False


def _capturing(t: torch.Tensor) -> bool:
    return t.is_cuda and _STREAM_CAPTURING()


def _no_read_reportable(oracle, regions: list) -> bool:
    """``oracle.all_clean(regions)``, and no capture under way (a captured read is checked at the replays)."""
    return oracle.all_clean(regions) and not (oracle.cuda and _STREAM_CAPTURING())


class DeviceTorchMode(DynamoFreeMode):
    """Calls the oracle's ``regions``, ``log_read``, ``log_oob`` and ``allocated``."""

    def __init__(self, oracle):
        super().__init__()
        self.oracle = oracle

    @property
    def checker(self):
        """``threads.ThreadCoverage`` turns a mode left on another thread inert through this name."""
        return self.oracle

    @checker.setter
    def checker(self, value) -> None:
        self.oracle = value

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let Dynamo compile (and this mode see the compiled graph's ops) while the eager stance holds."""
        return compiled.visible()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if HOOKS is not None and HOOKS[0]() is not None:  # dynamo_free.dynamo_active(), inline: one call less per op
            return disabled(type(self))(self, func, types, args, kwargs)
        op = _OPS.get(func) or _op(func)
        if op.passthrough:  # (as _dispatch: one Python frame fewer for a third of the ops)
            return func(*args, **kwargs) if kwargs else func(*args)
        return self._dispatch(func, types, args, kwargs, op)

    def _dispatch(self, func, types, args=(), kwargs=None, op=None):
        op = op or _OPS.get(func) or _op(func)
        if op.passthrough:
            return func(*args, **kwargs) if kwargs else func(*args)
        kwargs = kwargs or {}
        o = self.oracle
        if o.paused():
            return func(*args, **kwargs)
        if op.storage and args and isinstance(args[0], torch.Tensor):
            return self._storage_change(func, args, kwargs)
        if not op.aten:
            impl = custom_op_impl(func, args)
            if impl is not None:
                with DeviceTorchMode(o):  # a custom op's own body, seen op by op
                    return impl(*args, **kwargs)
            if python_kernel(func, args):  # ``Library.impl`` (vLLM's direct_register_custom_op): its body, op by op
                _push_mode(DeviceTorchMode(o))
                try:
                    return func.redispatch(_keys_below_python(args, kwargs), *args, **kwargs)
                except NotImplementedError:  # no kernel for those keys: nothing ran
                    pass
                finally:
                    _pop_mode()
        spans = _spans(args, kwargs, o.cuda)
        near = o.tracked_near(spans) if spans and not op.storage else None
        if not near:
            if op.indexes and spans:  # an index out of range would end the process
                args = self._bounds(func, op.name, args)
            out = func(*args, **kwargs)
            self._allocations(func, op, spans, out)
            return out
        return self._modelled(func, op, args, kwargs, spans, near)

    def _modelled(self, func, op: _Op, args, kwargs, spans: list, near: list):
        """An op touching tracked memory (the regions ``near`` its storages): check its reads, run it, stamp
        its writes. When no read of those regions can be reported now (every one written whole, in this op
        if per-step; not inside a capture), no read is looked at."""
        name = op.name
        reads, writes = fx.classify(func, args, kwargs)
        if _no_read_reportable(self.oracle, near):
            reads = []
        base = op.base if op.aten else ""
        if (base in _SCATTERS or base in _ACCUMULATE and name.endswith("_")) and args \
                and isinstance(args[0], torch.Tensor):  # self's read, if any, is modelled in _write
            reads = [t for t in reads if t is not args[0]]
            if not name.endswith("_"):
                self._scatter_read(func, args, kwargs)  # (nothing, when every region is clean)
        if base == "embedding_renorm":  # F.embedding(max_norm=): rescales the rows it looks up, in place
            self._gather_read(aten.embedding.default, (args[0], args[1]), {}, args[0])
            reads = [t for t in reads if t is not args[0]]
            writes = [t for t in writes if t is not args[0]]
            self._rows_written(args[0], args[1])
        if base in fx.BAGS and args:  # embedding_bag reads the rows its indices name, but padding_idx
            weight, rows, _ = fx.bag_rows(args, kwargs)
            self._gather_read(func, args, kwargs, weight, lambda x: aten.embedding.default(x, rows))
            reads = [t for t in reads if t is not weight]
        gathered = args[0] if base in _GATHER_READS else None
        picked = self._where_sides(func, base, args)
        for t in reads:
            if gathered is not None and t is gathered:
                self._gather_read(func, args, kwargs, t)
            elif id(t) in picked:
                self._picked_read(func, t, picked[id(t)])
            else:
                self._read(func, t)
        if op.indexes:
            args = self._bounds(func, name, args)
        out = func(*args, **kwargs)
        for t in writes:
            self._write(func, name, args, t, kwargs, near)
        self._allocations(func, op, spans, out)
        return out

    # -- reads -----------------------------------------------------------------------------
    def _read(self, func, t: torch.Tensor) -> None:
        o = self.oracle
        captured = _capturing(t)  # checked at every replay: what the host knows at capture does not hold then
        span = byte_span(t)
        for r, sh, exact in shadow_parts(t, o.regions_of(t, span), False, span, None if captured else o.clean_now):
            row = o.log_read(func, r, t, exact, caller_line(3))
            if row is None:
                return
            flat = sh.reshape(-1) if sh.is_contiguous() else sh.contiguous().reshape(-1)
            o.check_read(row, flat, None, r.per_step)
            if r.maybe_never and exact and 0 not in t.stride():  # it saw garbage: make what follows deterministic
                t.masked_fill_(sh == dc.NEVER, 0)

    def _gather_read(self, func, args, kwargs, src: torch.Tensor, pick=None) -> None:
        """``embedding(W, idx)`` reads the rows ``idx`` of ``W``: the same op on ``W``'s shadow (and on
        its element numbers, to name the element) gives exactly the epochs read. ``pick(x)``: what
        the op reads of ``x`` when that is not the op itself on ``x`` (``embedding_bag``)."""
        o = self.oracle
        captured = _capturing(src)
        for r, sh, exact in shadow_parts(src, o.regions_of(src), write=False):
            if r.clean(o.epoch) and not captured:
                continue
            if not exact:
                self._read(func, src)
                continue
            row = o.log_read(func, r, src, False, caller_line(3))
            if row is None:
                return
            n = r.shadow.numel()  # type: ignore[union-attr]
            numbers = torch.arange(n, device=sh.device).as_strided(sh.shape, sh.stride(), sh.storage_offset())
            try:
                pick = pick or (lambda x: func(x, *args[1:], **kwargs))
                epochs = pick(sh).contiguous().reshape(-1)
                elems = pick(numbers).contiguous().reshape(-1)
            except (RuntimeError, IndexError):  # an index out of range: read whole (the bounds check reports it)
                o.log_cancel(row)
                self._read(func, src)
                continue
            o.check_read(row, epochs, elems, r.per_step)

    def _rows_written(self, t: torch.Tensor, rows: torch.Tensor) -> None:
        o = self.oracle
        for _r, sh, exact in shadow_parts(t, o.regions_of(t), write=True):
            if exact:
                sh.index_fill_(0, rows.reshape(-1).to(torch.int64), o.epoch)

    @staticmethod
    def _where_sides(func, base: str, args) -> dict:
        """``torch.where(c, a, b)`` reads ``a`` only where ``c`` holds and ``b`` only where it does not."""
        if base != "where" or len(args) != 3 or not all(isinstance(a, torch.Tensor) for a in args):
            return {}
        shape = torch.broadcast_shapes(args[0].shape, args[1].shape, args[2].shape)
        return {id(args[1]): (args[0], shape, True), id(args[2]): (args[0], shape, False)}

    def _picked_read(self, func, t: torch.Tensor, pick) -> None:
        """A read of ``t``'s elements where the condition picks it: the others pass (the current epoch)."""
        o = self.oracle
        cond, shape, side = pick
        captured = _capturing(t)
        for r, sh, exact in shadow_parts(t, o.regions_of(t), write=False):
            if r.clean(o.epoch) and not captured:
                continue
            if not exact or sh.shape != shape:
                self._read(func, t)
                return
            c = cond.expand(shape) if side else ~cond.expand(shape)
            seen = torch.where(c, sh, o.shadow.epoch_like(shape)).contiguous().reshape(-1)
            row = o.log_read(func, r, t, True, caller_line(3))
            if row is None:
                return
            o.check_read(row, seen, None, r.per_step)

    def _scatter_read(self, func, args, kwargs) -> None:
        """A functional indexed write (``index_put``, ``scatter``) reads ``self`` except what it overwrites."""
        o = self.oracle
        captured = _capturing(args[0])
        for r, sh, exact in shadow_parts(args[0], o.regions_of(args[0]), write=False):
            if (r.clean(o.epoch) and not captured) or not exact:
                continue
            try:
                after = func(*self._on_shadow(func, args, kwargs, sh)).contiguous().reshape(-1)
            except (RuntimeError, IndexError, TypeError):
                continue
            row = o.log_read(func, r, args[0], True, caller_line(3))
            if row is None:
                return
            o.check_read(row, after, None, r.per_step)

    def _on_shadow(self, func, args, kwargs, sh: torch.Tensor) -> list:
        """The op's arguments with ``self`` replaced by its shadow and every value by the epoch."""
        o = self.oracle
        out: list = [sh]
        schema = func._schema.arguments
        for i, a in enumerate(args[1:], start=1):
            name = schema[i].name if i < len(schema) else ""
            if name in _INDEX_ARGS or name == "accumulate" or name == "reduce" or name == "include_self":
                out.append(False if name == "accumulate" else a)
            elif isinstance(a, torch.Tensor):  # materialized: CUDA's masked_scatter_ refuses an expanded source
                out.append(o.shadow.epoch_like(a.shape).contiguous())
            elif isinstance(a, (int, float, bool)):  # a Scalar operand: CUDA takes no device tensor there
                out.append(o.epoch)
            else:
                out.append(a)
        return out

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
            lo = -n if neg else 0
            if o.bounds_kernel and ix.device.type == o.device.type:  # one kernel: redirect, count, first bad one
                ix = ix.contiguous()
                fixed = torch.empty_like(ix)
                row = o.log_bounds(func, src, n, caller_line(3), _capturing(ix))
                launch(dc.index_bounds, o.device, (ix, fixed, ix.numel(), lo, n, o.log[row]), (1024,))  # type: ignore[index]
                args = fx.replace_index(args, where, fixed)
                continue
            bad = (ix < lo) | (ix >= n)  # (torch ops: on the CPU a kernel launch is the interpreter's, far dearer)
            if not _capturing(ix):  # inside a capture: redirected, not logged (replays rewrite the row)
                o.log_oob(func, src, bad, ix, n, caller_line(3))
            args = fx.replace_index(args, where, ix.masked_fill(bad, 0))
        return args

    # -- writes ----------------------------------------------------------------------------
    def _write(self, func, name: str, args, t: torch.Tensor, kwargs=None, near=None) -> None:
        o = self.oracle
        captured = _capturing(t)
        if near and not captured and all(o.unstamped(r, t) for r in near):
            return  # every region near the op's storages needs no stamp: not even looked up (``unstamped``)
        base = name.rstrip("_")
        span = byte_span(t)
        # A region a write covered whole in this op holds this op's epoch in every element already, and a
        # settled one's epochs say only "written" (``Region.settled``): no stamp (not for a captured
        # write, which happens at the replays).
        skip = None if captured else (lambda r: o.unstamped(r, t))
        for r, sh, exact in shadow_parts(t, o.regions_of(t, span), True, span, skip):
            if exact and t is args[0] and name.endswith("_") and base in _SCATTERS | _ACCUMULATE:
                try:
                    if base in _ACCUMULATE:  # reads what it adds to: check those, then stamp them
                        self._accumulated(func, args, r, sh, (kwargs or {}).get("include_self", True))
                    else:
                        self._accumulating_put(func, name, args, kwargs or {}, r, sh)
                        func(*self._on_shadow(func, args, {}, sh))
                    continue
                except (RuntimeError, IndexError, TypeError):
                    pass  # the model failed: the whole view counts as written (a possible miss)
            if captured:  # the epoch of the op that replays it: read from the device cell
                sh.copy_(o.shadow.epoch_like(sh.shape))
            else:
                sh.fill_(o.epoch)
            if not captured and covers(t, r, span):  # a captured write happens at the replays, not now
                r.fully_at, r.maybe_never = o.epoch, False

    def _accumulating_put(self, func, name: str, args, kwargs: dict, r, sh) -> None:
        """``index_put_(..., accumulate=True)`` and ``put_(..., accumulate=True)`` read what they add to."""
        if name not in ("index_put_", "_index_put_impl_", "put_"):
            return
        acc = kwargs.get("accumulate", args[3] if len(args) > 3 else False)  # (self, index, values, accumulate)
        if not acc or (r.clean(self.oracle.epoch) and not _capturing(sh)):
            return
        picked = (sh.take(args[1]) if name == "put_" else aten.index.Tensor(sh, list(args[1]))).contiguous()
        o = self.oracle
        row = o.log_read(func, r, sh, False, caller_line(4))
        if row is not None:
            o.check_read(row, picked, None, r.per_step)

    def _accumulated(self, func, args, r, sh, include_self: bool = True) -> None:
        """``index_add_``/``scatter_add_``/``*_reduce_``: the elements they add into are read, then written."""
        o = self.oracle
        marked = torch.zeros_like(sh)
        name = func._schema.name.split("::")[-1].rstrip("_")
        if name in ("index_add", "index_reduce"):
            marked.index_fill_(args[1], args[2], 1)
        else:
            marked.scatter_(args[1], args[2], 1)
        if include_self and (not r.clean(o.epoch) or _capturing(sh)):  # without self: an overwrite
            picked = sh[marked.bool()].contiguous()
            row = o.log_read(func, r, sh, False, caller_line(4))
            if row is not None:
                o.check_read(row, picked, None, r.per_step)
        sh.masked_scatter_(marked.bool(), o.shadow.epoch_like(sh.shape))

    # -- storages --------------------------------------------------------------------------
    def _storage_change(self, func, args, kwargs):
        """``resize_`` may move and grow the storage (the new bytes unwritten); ``set_`` swaps it."""
        o, where = self.oracle, caller_line(3)

        def changed(t, before, resized):
            if resized and t.device.type == o.device.type:
                o.resized(t.untyped_storage(), before, t.element_size(), tuple(t.shape), where)
        return fx.run_storage_op(func, args, kwargs, changed)

    # -- allocations -----------------------------------------------------------------------
    def _allocations(self, func, op: _Op, spans: list, out) -> None:
        """Results in storage none of the inputs has: fresh memory (``allocated``). Most are neither
        made by the ``empty`` family nor where a record lies: those are let go here."""
        o = self.oracle
        cuda = o.cuda
        for t in (out,) if isinstance(out, torch.Tensor) else fx._tensors(out):
            if not (t.is_cuda if cuda else t.is_cpu) or t.layout is not _STRIDED:
                continue
            try:
                st = t.untyped_storage()
                ptr = st.data_ptr()
            except (RuntimeError, NotImplementedError):
                continue
            if not ptr:
                continue
            if _among(ptr, spans):  # an input's storage (an in-place op, out=, a view): not fresh
                continue
            if not op.empty and not o._dead:
                with o.lock:  # the index's lists change together under it (other threads' ops)
                    if not o.shadow.any_overlapping(((ptr, st.nbytes()),)):
                        continue
            where = caller_line(4) if op.empty else None  # named only for what the ``empty`` family made
            o.allocated(t, st, op.empty, where)


