"""The torch side of the shadow checker: a ``TorchDispatchMode`` that sees every aten op.

From each op's schema it knows which tensor arguments are written (``alias_info.is_write``)
and which are read. Reads of tracked storages are checked, writes mark bytes, and
``torch.empty``-family results are tracked automatically as uninitialized, so a user's
runner is watched without edits. Index ops (embedding, index_select, index) read only
the rows they index, and an out-of-range index is reported and redirected to row 0
instead of raising, so the case runs on (vLLM's crash was ``F.embedding`` through a
garbage ``_embeddings_indices``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

EMPTY_OPS = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
             aten.new_empty.default, aten.new_empty_strided.default}
# Ops whose written argument is not also read.
WRITE_ONLY = {aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default,
              aten.normal_.default, aten.uniform_.default, aten.random_.default,
              getattr(aten.random_, "from"), aten.random_.to, aten.bernoulli_.float, aten.exponential_.default}
# Ops that read no tensor data at all.
NO_READ = EMPTY_OPS | {aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor,
                       aten.resize_.default, aten.zeros_like.default, aten.ones_like.default,
                       aten.full_like.default, aten.new_zeros.default, aten.new_ones.default,
                       aten.new_full.default, aten.lift_fresh.default, aten.sym_size.int,
                       aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default}


def element_offsets(t: torch.Tensor) -> np.ndarray:
    """Byte offsets, from the storage base, of every element of the view ``t``."""
    item = t.element_size()
    if t.is_contiguous():
        start = t.storage_offset()
        return (np.arange(start, start + t.numel(), dtype=np.int64) * item)
    offs = np.array([t.storage_offset()], dtype=np.int64)
    for size, stride in zip(t.shape, t.stride()):
        offs = (offs[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    return offs * item


def addresses(t: torch.Tensor, rows=None, dim: int = 0) -> np.ndarray:
    """uint64 addresses of ``t``'s elements, or only of ``rows`` along ``dim``."""
    base = t.untyped_storage().data_ptr()
    if rows is None:
        offs = element_offsets(t)
    else:
        inner = element_offsets(t.select(dim, 0)) - t.select(dim, 0).storage_offset() * t.element_size()
        starts = (t.storage_offset() + np.asarray(rows, dtype=np.int64) * t.stride(dim)) * t.element_size()
        offs = (starts[:, None] + inner[None, :]).ravel()
    return offs.astype(np.uint64) + np.uint64(base)


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def classify(func, args, kwargs) -> tuple[list, list]:
    """(read tensors, written tensors) of one aten call, from its schema."""
    if func in NO_READ or getattr(func, "is_view", False):
        return [], []
    reads, writes = [], []
    for i, a in enumerate(func._schema.arguments):
        value = kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
        ts = _tensors(value)
        if not ts:
            continue
        written = a.alias_info is not None and a.alias_info.is_write
        if written:
            writes += ts
            if not (func in WRITE_ONLY or getattr(a, "is_out", False)):
                reads += ts
        else:
            reads += ts
    return reads, writes


def _index_operands(func, args):
    """(source, index, dim) of a row-gathering op, else None."""
    if func is aten.embedding.default:
        return args[0], args[1], 0
    if func is aten.index_select.default:
        return args[0], args[2], args[1]
    if func is aten.index.Tensor and len(args[1]) == 1 and args[1][0] is not None \
            and args[1][0].dtype in (torch.int64, torch.int32):
        return args[0], args[1][0], 0
    return None


class TorchShadowMode(TorchDispatchMode):
    """Calls ``checker.torch_read(func, tensor, addrs)`` / ``torch_write`` / ``torch_alloc``."""

    def __init__(self, checker):
        super().__init__()
        self.checker = checker

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        c = self.checker
        if c.paused():
            return func(*args, **kwargs)
        reads, writes = classify(func, args, kwargs)
        tracked = [t for t in reads if c.is_tracked(t)]
        if tracked:
            args = self._check_reads(func, args, reads, tracked)
        out = func(*args, **kwargs)
        for t in writes:
            if c.is_tracked(t):
                c.torch_write(func, t, self._written(func, args, t))
        inputs = {t.untyped_storage().data_ptr() for t in reads + writes}
        for t in _tensors(out):
            ptr = t.untyped_storage().data_ptr()
            if ptr in inputs or getattr(func, "is_view", False):
                continue
            c.torch_alloc(func, t, uninitialized=func in EMPTY_OPS)
        return out

    def _check_reads(self, func, args, reads, tracked):
        c = self.checker
        indexed = _index_operands(func, args)
        if indexed is None:
            for t in tracked:
                c.torch_read(func, t, addresses(t))
            return args
        src, idx, dim = indexed
        if idx.is_cuda and torch.cuda.is_current_stream_capturing():
            for t in tracked:  # no host reads of the index inside CUDA-graph capture
                c.torch_read(func, t, addresses(t))
            return args
        if c.is_tracked(idx):
            c.torch_read(func, idx, addresses(idx))
        rows = idx.detach().cpu().numpy().ravel().astype(np.int64)
        n = src.size(dim)
        bad = (rows < -n) | (rows >= n)
        if bad.any():
            c.torch_oob(func, src, int(rows[bad][0]), int(bad.sum()), n)
            safe = idx.clone()
            safe[(safe < -n) | (safe >= n)] = 0
            args = self._replace_index(func, args, safe)
            rows = np.where(bad, 0, rows)
        if c.is_tracked(src):
            c.torch_read(func, src, addresses(src, np.where(rows < 0, rows + n, rows), dim))
        return args

    @staticmethod
    def _replace_index(func, args, safe):
        args = list(args)
        if func is aten.embedding.default:
            args[1] = safe
        elif func is aten.index_select.default:
            args[2] = safe
        else:
            args[1] = [safe]
        return tuple(args)

    @staticmethod
    def _written(func, args, t):
        if func is aten.index_put_.default and t is args[0] and len(args[1]) == 1 and args[1][0] is not None \
                and args[1][0].dtype in (torch.int64, torch.int32):
            rows = args[1][0].detach().cpu().numpy().ravel().astype(np.int64) % max(t.size(0), 1)
            return addresses(t, rows, 0)
        return addresses(t)
