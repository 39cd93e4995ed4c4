"""The torch side of the shadow checker: a ``TorchDispatchMode`` that sees every aten op.

Each op's read and write sets come from ``torch_effects``: exact for the indexed ops
(``buf[idx] = v`` writes only the indexed rows and reads none of them), the schema's
whole views for the rest, nothing for metadata ops (``is_pinned``, ``unsqueeze_``).
``torch.empty``-family results are tracked automatically as uninitialized, so a user's
runner is watched without edits. An out-of-range index is reported and redirected to
0 instead of raising, so the case runs on (vLLM's crash was ``F.embedding`` through a
garbage ``_embeddings_indices``).

Ops with no model (custom ops, other namespaces): a ``torch.library.custom_op`` runs its
own implementation under this mode, so its inner ops and allocations are seen one by
one; any other op goes through the differential fallback of ``torch_fallback``. Such an op
(``Library.impl`` with a Python body, vLLM's ``direct_register_custom_op``) is blamed at its
call only if nothing inside it reported first: a Triton kernel it launches is checked by the
interpreter hook at its own line, the more precise report of the same read.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import _pop_mode, _push_mode

from ..dynamo_free import DynamoFreeMode
from . import compiled
from . import torch_effects as fx
from .torch_effects import EMPTY_OPS, NO_READ, WRITE_ONLY, addresses, classify, element_offsets  # noqa: F401
from .torch_fallback import custom_op_impl, probe_effects, python_kernel

aten = torch.ops.aten
_RESIZE = fx.STORAGE_OPS




_BELOW_PYTHON = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)


def _keys_below_python(args, kwargs):
    """The dispatch keys of the op's tensors below the Python key (where a mode's op goes next)."""
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)  # an op with no tensor argument (a factory)
    tensors = list(fx.leaves((args, kwargs)))
    if tensors:
        keys = torch._C._dispatch_keys(tensors[0])
        for t in tensors[1:]:
            keys = keys | torch._C._dispatch_keys(t)
    return keys & _BELOW_PYTHON


def _capturing(t: torch.Tensor) -> bool:
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


class TorchShadowMode(DynamoFreeMode):
    """Calls the checker's ``torch_read`` / ``torch_write`` / ``torch_alloc`` / ``torch_oob``."""

    def __init__(self, checker):
        super().__init__()
        self.checker = checker

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let Dynamo compile (and see the compiled graph's ops) while the eager stance holds."""
        return compiled.visible()

    def _dispatch(self, func, types, args=(), kwargs=None):  # (DynamoFreeMode.__torch_dispatch__ calls it)
        kwargs = kwargs or {}
        c = self.checker
        if c.paused():
            return func(*args, **kwargs)
        if func in _RESIZE:
            return self._storage_change(func, args, kwargs)
        impl = custom_op_impl(func, args)
        if impl is not None:
            with TorchShadowMode(c):  # the op's own body, seen op by op
                return impl(*args, **kwargs)
        with c.lock:  # other threads' ops wait for the bookkeeping, never for an op's run
            args, swapped = self._bounds(func, args)
            fast = not any(c.watched(t) for t in fx.leaves((args, kwargs, list(swapped.values()))))
        body = python_kernel(func, args)
        since = c.memory.added if body else None  # a Python body's own allocations are seen inside it
        if fast:
            out = self._call(func, args, kwargs, body)  # fast path: nothing here can be unwritten or stale
            with c.lock:
                self._allocations(func, args, kwargs, out, since)
            return out
        effects = self._effects(func, args, kwargs)  # a probe runs the op: not under the lock
        with c.lock:
            pending = self._reads(func, effects, swapped)
            seen = c.reported
        out = self._call(func, args, kwargs, body)
        with c.lock:
            self._after(func, args, kwargs, out, effects, pending, seen, since)
        return out

    def _call(self, func, args, kwargs, body: bool):
        """Run the op; one with a Python kernel (``Library.impl``, vLLM's ``direct_register_custom_op``)
        runs below the Python key with this mode pushed again, so the ops of its body are checked at
        their own lines (a read there is reported instead of the op's probed read at its call)."""
        if not body:
            return func(*args, **kwargs)
        _push_mode(TorchShadowMode(self.checker))
        try:
            return func.redispatch(_keys_below_python(args, kwargs), *args, **kwargs)
        except NotImplementedError:  # no kernel for those keys: the dispatcher refused, nothing ran
            pass
        finally:
            _pop_mode()
        return func(*args, **kwargs)

    def _reads(self, func, effects: fx.Effects, swapped: dict) -> list:
        c = self.checker
        effects.reads = [(swapped.get(id(t), t), a) for t, a in effects.reads]  # a redirected index is still read
        pending = []
        for t, addrs in effects.reads:
            if c.is_tracked(t):
                pending += c.torch_read(func, t, addresses(t) if addrs is None else addrs, report=not effects.probed)
        return pending

    def _after(self, func, args, kwargs, out, effects: fx.Effects, pending: list, seen: int, since) -> None:
        c = self.checker
        if pending and c.reported == seen:  # the op's body (a Triton kernel it launched) said nothing more precise
            c.flush(pending)
        for t, addrs in effects.writes:
            if c.is_tracked(t):
                c.torch_write(func, t, addresses(t) if addrs is None else addrs)
        if effects.probed:  # an operand returned as an output was written in place, unannotated (c10d)
            for o in self._returned_operands(args, kwargs, out):
                c.torch_write(func, o, addresses(o))
        self._allocations(func, args, kwargs, out, since)

    def _effects(self, func, args, kwargs) -> fx.Effects:
        name = func._schema.name.split("::")[-1]
        if name in fx.INDEXED and not any(_capturing(t) for t in fx._tensors(args[0])):
            try:
                return fx.exact_effects(func, args, kwargs) or self._whole(func, args, kwargs)
            except (RuntimeError, IndexError, TypeError, ValueError):
                pass  # the real op raises the program's own error
        if func.namespace not in ("aten", "prims") and func not in NO_READ:
            return probe_effects(func, args, kwargs, self.checker)
        return self._whole(func, args, kwargs)

    def _returned_operands(self, args, kwargs, out) -> list:
        ins = {t.untyped_storage().data_ptr() for t in fx.leaves((args, kwargs)) if fx.has_memory(t)}
        return [o for o in fx.leaves(out) if fx.has_memory(o) and o.untyped_storage().data_ptr() in ins
                and self.checker.is_tracked(o)]

    @staticmethod
    def _whole(func, args, kwargs) -> fx.Effects:
        reads, writes = classify(func, args, kwargs)
        return fx.Effects(reads=[(t, None) for t in reads], writes=[(t, None) for t in writes])

    def _bounds(self, func, args):
        """Report out-of-range indices and redirect them to 0 before torch (or the device) sees them."""
        name = func._schema.name.split("::")[-1]
        swapped = {}
        for where, ix, src, dim, neg in fx.index_slots(name, args):
            if ix.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8) or _capturing(ix):
                continue
            try:
                n = src.size(dim) if src.dim() else 1
                bad = fx.out_of_range(ix, n, neg)
            except (IndexError, RuntimeError):
                continue  # a malformed call: torch raises the program's own error
            if bad is None:
                continue
            if not self._garbage(ix, bad):  # an unwritten index is reported as such, once
                first = int(ix[bad].reshape(-1)[0])
                self.checker.torch_oob(func, src, first, int(bad.sum()), n)
            safe = ix.masked_fill(bad, 0)
            swapped[id(safe)] = ix
            args = fx.replace_index(args, where, safe)
        return args, swapped

    def _garbage(self, ix, bad) -> bool:
        """Whether every out-of-range entry is an unwritten (or stale) one: its read is the bug."""
        if not self.checker.is_tracked(ix):
            return False
        return bool(self.checker.unwritten(ix)[bad.reshape(-1).numpy()].all())

    def _allocations(self, func, args, kwargs, out, since=None) -> None:
        """Results in fresh storage: tracked if uninitialized (``torch.empty``), else their memory is new."""
        if getattr(func, "is_view", False):
            return
        inputs = {t.untyped_storage().data_ptr() for t in fx.leaves((args, kwargs)) if fx.has_memory(t)}
        for t in fx._tensors(out):
            if fx.has_memory(t) and t.untyped_storage().data_ptr() not in inputs:
                self.checker.torch_alloc(func, t, uninitialized=func in EMPTY_OPS, since=since)

    def _storage_change(self, func, args, kwargs):
        """``resize_`` may move and grow the storage (new bytes unwritten); ``set_`` swaps it."""
        return fx.run_storage_op(func, args, kwargs, self.checker.torch_storage_changed)
