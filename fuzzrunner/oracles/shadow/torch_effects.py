"""Exact read and write sets of torch ops: which elements an aten call reads and writes.

Most aten ops read every element of each input view and write every element of each
mutated argument; the schema says which argument is which (``classify``). The indexed
ops do not: ``buf[idx] = v`` writes only the indexed rows of ``buf`` and reads none of
them, ``gather`` reads only the gathered elements, ``torch.where`` reads each side only
where the condition picks it. For those, the table below computes the exact set by
running the *same* indexing on a tensor of element addresses shaped like the operand:
``index(addr(buf), idx)`` is the addresses that ``buf[idx]`` touches, for any index
shape, dim, negative index or boolean mask, because torch itself does the indexing.

An index out of range is found before the real op runs (``Effects.oob``); the caller
reports it and the op runs with those indices redirected to 0, so the case goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

aten = torch.ops.aten

EMPTY_OPS = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
             aten.new_empty.default, aten.new_empty_strided.default, aten.empty_permuted.default}
# Ops whose written argument is not also read.
WRITE_ONLY = {aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default,
              aten.normal_.default, aten.uniform_.default, aten.random_.default,
              getattr(aten.random_, "from"), aten.random_.to, aten.bernoulli_.float, aten.bernoulli_.Tensor,
              aten.exponential_.default, aten.cauchy_.default, aten.log_normal_.default, aten.geometric_.default,
              aten._foreach_zero_.default, aten._foreach_copy_.default}
# Storage swaps and resizes: no data read or written (the shadow hook handles them first).
STORAGE_OPS = {aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor, aten.set_.source_Storage,
               aten.set_.default, aten.resize_.default, aten.resize_as_.default}
RESIZES = {aten.resize_.default, aten.resize_as_.default}


def run_storage_op(func, args, kwargs, on_change):
    """Run a ``STORAGE_OPS`` op on ``args[0]``; if its storage moved or changed size, call
    ``on_change(tensor, (old address, old size), resized)`` (``resized``: a ``resize_``, whose grown bytes
    are unwritten; else a ``set_``, which swaps the storage)."""
    t = args[0]
    old = t.untyped_storage()
    before = (old.data_ptr(), old.nbytes())
    out = func(*args, **kwargs)
    st = t.untyped_storage()
    if (st.data_ptr(), st.nbytes()) != before:
        on_change(t, before, func in RESIZES)
    return out


# Ops that read and write no tensor data and allocate nothing: metadata queries and no-op lifts.
METADATA_ONLY = {
    aten.lift_fresh.default, aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
    aten.sym_storage_offset.default, aten.is_pinned.default, aten.is_same_size.default, aten.record_stream.default,
    aten.is_set_to.default, aten.is_coalesced.default, aten._nested_tensor_size.default,
}


# Ops that read no tensor data at all: allocation, shape and storage metadata.
NO_READ = EMPTY_OPS | STORAGE_OPS | METADATA_ONLY | {
    aten.zeros_like.default, aten.ones_like.default, aten.full_like.default, aten.new_zeros.default,
    aten.new_ones.default, aten.new_full.default, aten.rand_like.default, aten.randn_like.default,
    aten.randint_like.default,
}


def has_memory(t: torch.Tensor) -> bool:
    """Whether ``t`` has a storage of real bytes: not a meta tensor (shapes only, address 0),
    not a sparse or other layout with no single storage."""
    if t.layout != torch.strided or t.device.type == "meta":
        return False
    try:
        return t.untyped_storage().data_ptr() != 0
    except (RuntimeError, NotImplementedError):
        return False


def element_offsets(t: torch.Tensor) -> np.ndarray:
    """Byte offsets, from the storage base, of every element of the view ``t`` (row-major)."""
    item = t.element_size()
    if t.is_contiguous():
        start = t.storage_offset()
        return np.arange(start, start + t.numel(), dtype=np.int64) * item  # type: ignore[arg-type]
    offs = np.array([t.storage_offset()], dtype=np.int64)
    for size, stride in zip(t.shape, t.stride()):
        offs = (offs[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    return offs * item


def addresses(t: torch.Tensor) -> np.ndarray:
    """uint64 addresses of every element of ``t``."""
    if t.numel() == 0:
        return np.zeros(0, dtype=np.uint64)
    return element_offsets(t).astype(np.uint64) + np.uint64(t.untyped_storage().data_ptr())


def addr_tensor(t: torch.Tensor) -> torch.Tensor:
    """An int64 CPU tensor shaped like ``t`` holding each element's address."""
    return torch.from_numpy(addresses(t).astype(np.int64)).view(t.shape)


def rows_addresses(t: torch.Tensor, dim: int, rows: torch.Tensor) -> np.ndarray:
    """Addresses of the slices ``t.select(dim, r)`` for ``r`` in ``rows`` (in range), without
    touching the other rows: embedding tables are large and a step reads a few rows."""
    r = rows.detach().reshape(-1).cpu().numpy().astype(np.int64)
    if r.size == 0 or t.numel() == 0:
        return np.zeros(0, dtype=np.uint64)
    dim = dim % t.dim()
    first = t.select(dim, 0)
    inner = element_offsets(first) - first.storage_offset() * t.element_size()
    starts = (t.storage_offset() + r * t.stride(dim)) * t.element_size()
    return ((starts[:, None] + inner[None, :]).ravel()).astype(np.uint64) + np.uint64(t.untyped_storage().data_ptr())  # type: ignore[index]


def _flat(a: torch.Tensor) -> np.ndarray:
    return a.reshape(-1).numpy().astype(np.uint64)


@dataclass
class Effects:
    """Per tensor argument: (tensor, addresses or None for its whole view)."""
    reads: list = field(default_factory=list)
    writes: list = field(default_factory=list)
    oob: list = field(default_factory=list)   # (tensor, index value, count, dim size, fix)
    probed: bool = False  # found by the differential probe (an op with no model): see torch_hook


def raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements in logical order as bytes (on the CPU), copied only where its last stride is not 1: a view
    whose last dimension has one element passes as contiguous with another stride (``.contiguous()`` keeps it;
    a one-element view of stride 3 came from vLLM on an H100), a strided 1-D view stays strided through
    ``reshape(-1)``, and ``view(torch.uint8)`` refuses both."""
    flat = t.detach().cpu().reshape(-1)
    if flat.numel() and flat.stride(-1) != 1:
        flat = flat.clone(memory_format=torch.contiguous_format)
    return flat.view(torch.uint8)


def leaves(value, kind: type = torch.Tensor):
    """Every ``kind`` object inside ``value``, through nested lists, tuples and dicts."""
    if isinstance(value, kind):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from leaves(v, kind)
    elif isinstance(value, dict):
        for v in value.values():
            yield from leaves(v, kind)


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _is_metadata_inplace(func) -> bool:
    """``unsqueeze_``, ``transpose_``, ``as_strided_``...: in-place ops whose out-of-place twin is a view."""
    name = func._schema.name.split("::")[-1]
    if not name.endswith("_") or name.endswith("__"):
        return False
    twin = getattr(aten, name[:-1], None)
    ov = getattr(twin, func._overloadname, None) if twin is not None else None
    return bool(getattr(ov, "is_view", False))


_READ, _WRITE_READ, _WRITE = 0, 1, 2
_PLANS: dict = {}  # op -> ((position, name, keyword only, how it is used), ...): its schema, read once


def _plan(func) -> tuple:
    """What each schema argument of ``func`` is to ``classify``: read, written and read, or only written
    (``()``: the op reads and writes nothing). The schema's Python objects are made once per op."""
    plan: tuple = ()
    if not (func in NO_READ or getattr(func, "is_view", False) or _is_metadata_inplace(func)):
        rows = []
        for i, a in enumerate(func._schema.arguments):
            how = _READ
            if a.alias_info is not None and a.alias_info.is_write:
                how = _WRITE if func in WRITE_ONLY or getattr(a, "is_out", False) else _WRITE_READ
            rows.append((i, a.name, a.kwarg_only, how))
        plan = tuple(rows)
    _PLANS[func] = plan
    return plan


def classify(func, args, kwargs) -> tuple[list, list]:
    """(read tensors, written tensors) of one aten call, from its schema (whole views)."""
    plan = _PLANS.get(func)
    if plan is None:
        plan = _plan(func)
    reads: list = []
    writes: list = []
    n = len(args)
    for i, name, kw_only, how in plan:
        ts = _tensors(kwargs.get(name) if kw_only or i >= n else args[i])
        if not ts:
            continue
        if how == _READ:
            reads += ts
        else:
            writes += ts
            if how == _WRITE_READ:
                reads += ts
    return reads, writes


def arg(func, args, kwargs, name: str, default=None):
    """The value of the schema argument ``name``, positional or keyword."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            if i < len(args) and not a.kwarg_only:
                return args[i]
            return kwargs.get(name, a.default_value if a.has_default_value() else default)
    return default


# -- index bounds ---------------------------------------------------------------------------
def _list_slots(src, indices):
    """(position in the list, index, dim) of each integer index of an ``aten.index``-style list."""
    out, dim = [], 0
    for k, ix in enumerate(indices):
        if ix is None:
            dim += 1
        elif ix.dtype in (torch.bool, torch.uint8):
            dim += ix.dim()  # a mask covers as many dims as it has, and cannot be out of range
        else:
            out.append((k, ix, dim))
            dim += 1
    return out


_DIM_INDEXED = {"index_select": (0, 1, 2), "gather": (0, 1, 2), "scatter": (0, 1, 2), "scatter_": (0, 1, 2),
                "scatter_add": (0, 1, 2), "scatter_add_": (0, 1, 2), "scatter_reduce": (0, 1, 2),
                "scatter_reduce_": (0, 1, 2), "index_copy": (0, 1, 2), "index_copy_": (0, 1, 2),
                "index_add": (0, 1, 2), "index_add_": (0, 1, 2), "index_fill": (0, 1, 2),
                "index_fill_": (0, 1, 2), "index_reduce": (0, 1, 2), "index_reduce_": (0, 1, 2)}
_LISTED = {"index", "_unsafe_index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index_put"}
# Dim-indexed ops that wrap a negative index (``index_fill_(1, tensor([-1]), v)`` fills the last column).
_WRAPS = {"index_fill", "index_fill_"}


def may_index(name: str) -> bool:
    """Whether ``index_slots`` can find an index operand in an op of this name."""
    return name in _EMBEDDINGS or name in ("take", "put_", "put") or name in _DIM_INDEXED or name in _LISTED


def index_slots(name: str, args) -> list:
    """(where, index tensor, source, dim, negatives allowed) for each integer index operand.

    ``where`` is (argument position, list position or None), to put a corrected index back.
    Negative indices are legal only where torch wraps them (advanced indexing, ``take``)."""
    if name in _EMBEDDINGS:
        return [((1, None), args[1], args[0], 0, False)]
    if name in ("take", "put_", "put"):
        return [((1, None), args[1], args[0].reshape(-1), 0, True)]
    if name in _DIM_INDEXED and len(args) > 2 and isinstance(args[2], torch.Tensor):
        return [((2, None), args[2], args[0], args[1], name in _WRAPS)]
    if name in _LISTED:
        return [((1, k), ix, args[0], d, True) for k, ix, d in _list_slots(args[0], args[1])]
    return []


def out_of_range(ix: torch.Tensor, n: int, negatives: bool) -> torch.Tensor | None:
    """Boolean mask of the entries of ``ix`` outside the dim of size ``n``, or None when all fit."""
    if ix.numel() == 0:
        return None
    lo = -n if negatives else 0
    if int(ix.min()) >= lo and int(ix.max()) < n:
        return None
    return (ix < lo) | (ix >= n)


def replace_index(args, where, new):
    """``args`` with the index at ``where`` replaced by ``new``."""
    pos, k = where
    args = list(args)
    if k is None:
        args[pos] = new
    else:
        lst = list(args[pos])
        lst[k] = new
        args[pos] = lst
    return tuple(args)


# -- exact read and write sets ----------------------------------------------------------------
def _minus(t, written: np.ndarray) -> np.ndarray:
    """``t``'s addresses except ``written``: a functional op copies ``self`` but for what it overwrites."""
    return np.setdiff1d(addresses(t), written, assume_unique=False)


def _prefix(t, shape) -> np.ndarray:
    """Addresses of ``t[:shape[0], :shape[1], ...]``: what ``scatter`` reads of ``src``."""
    return _flat(addr_tensor(t)[tuple(slice(0, s) for s in shape)])


def _where(cond, a, b):
    shape = torch.broadcast_shapes(*(x.shape for x in (cond, a, b) if isinstance(x, torch.Tensor)))
    c = cond.expand(shape)
    out = [(cond, None)]
    for x, pick in ((a, c), (b, ~c)):
        if isinstance(x, torch.Tensor):
            out.append((x, _flat(addr_tensor(x).expand(shape)[pick])))
    return Effects(reads=out)


def _gathers(name, args, kwargs):
    """Read-only indexed ops: (source, addresses it reads) plus the index operands read whole."""
    s = args[0]
    if name == "embedding":
        return [(s, rows_addresses(s, 0, args[1])), (args[1], None)]
    if name in _BAGS:
        return _bag_reads(args, kwargs)
    if name == "index_select":
        return [(s, rows_addresses(s, args[1], args[2])), (args[2], None)]
    if name == "gather":
        return [(s, _flat(addr_tensor(s).gather(args[1], args[2]))), (args[2], None)]
    if name == "take":
        return [(s, _flat(addr_tensor(s).take(args[1]))), (args[1], None)]
    if name == "masked_select":
        return [(s, _flat(addr_tensor(s).masked_select(args[1]))), (args[1], None)]
    ixs = [i for i in args[1] if i is not None]
    return [(s, _flat(aten.index.Tensor(addr_tensor(s), list(args[1]))))] + [(i, None) for i in ixs]


def bag_rows(func_args, kwargs) -> tuple:
    """``embedding_bag``'s (weight, the rows of it that it reads: its indices but ``padding_idx``, which
    is skipped, the indices, offsets and per-sample weights, read whole)."""
    a = list(func_args) + [None] * (9 - len(func_args))
    weight, indices, pad = a[0], a[1], kwargs.get("padding_idx", a[8])
    rows = indices.reshape(-1)
    if pad is not None and pad >= 0:
        rows = rows[rows != pad]
    whole = [indices, kwargs.get("offsets", a[2]), kwargs.get("per_sample_weights", a[6])]
    return weight, rows, [x for x in whole if isinstance(x, torch.Tensor)]


def _bag_reads(func_args, kwargs) -> list:
    """``embedding_bag``: the rows its indices name, and its other tensors whole (``bag_rows``)."""
    weight, rows, whole = bag_rows(func_args, kwargs)
    return [(weight, rows_addresses(weight, 0, rows))] + [(x, None) for x in whole]


BAGS = _BAGS = {"embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"}
_EMBEDDINGS = {"embedding", "embedding_renorm_"} | _BAGS
_GATHERS = {"embedding", "index_select", "gather", "take", "masked_select", "index", "_unsafe_index"} | _BAGS
# Indexed writes: name -> (reads what it overwrites, written set of self from (A(self), args))
_SCATTERS = {
    "index_put": lambda a, args, kw: aten.index.Tensor(a, list(args[1])),
    "scatter": lambda a, args, kw: a.gather(args[1], args[2]),
    "index_copy": lambda a, args, kw: a.index_select(args[1], args[2]),
    "masked_fill": lambda a, args, kw: a.masked_select(args[1]),
    "masked_scatter": lambda a, args, kw: a.masked_select(args[1]),
    "put": lambda a, args, kw: a.take(args[1]),
    "slice_scatter": lambda a, args, kw: aten.slice.Tensor(a, *_slice_args(args)),
    "select_scatter": lambda a, args, kw: a.select(args[2], args[3]),
}


def _slice_args(args):
    """(dim, start, end, step) of ``slice_scatter(self, src, dim=0, start=None, end=None, step=1)``."""
    rest = list(args[2:]) + [0, None, None, 1][len(args) - 2:]
    return rest[:4]
_SCATTERS.update({"_index_put_impl": _SCATTERS["index_put"], "_unsafe_index_put": _SCATTERS["index_put"],
                  "scatter_add": _SCATTERS["scatter"], "scatter_reduce": _SCATTERS["scatter"],
                  "index_add": _SCATTERS["index_copy"],
                  "index_fill": lambda a, args, kw: a.index_select(args[1], _wrapped(args[2], a.size(args[1]))),
                  "index_reduce": _SCATTERS["index_copy"]})


def _wrapped(ix: torch.Tensor, n: int) -> torch.Tensor:
    """A negative index counted from the end, as the ops in ``_WRAPS`` count it."""
    return torch.where(ix < 0, ix + n, ix) if ix.numel() else ix


def _accumulates(base, func, args, kwargs) -> bool:
    """Whether the indexed write also reads the elements it writes (add / reduce variants)."""
    if base in ("scatter_add", "index_add"):
        return True
    if base in ("index_put", "_index_put_impl", "_unsafe_index_put", "put"):
        return bool(arg(func, args, kwargs, "accumulate", False))
    if base in ("scatter_reduce", "index_reduce"):
        return bool(arg(func, args, kwargs, "include_self", True))
    if base == "scatter":
        return arg(func, args, kwargs, "reduce", None) is not None
    return False


def _operand_reads(base, args, written: np.ndarray) -> list:
    """Reads of the non-self operands of an indexed write: indices, masks, values, sources."""
    out = []
    if base in ("index_put", "_index_put_impl", "_unsafe_index_put"):
        out += [(i, None) for i in args[1] if i is not None] + [(args[2], None)]
    elif base.startswith("scatter"):
        out.append((args[2], None))
        if len(args) > 3 and isinstance(args[3], torch.Tensor):
            out.append((args[3], _prefix(args[3], args[2].shape)))  # type: ignore[arg-type]
    elif base.startswith("index_"):
        out += [(x, None) for x in args[2:4] if isinstance(x, torch.Tensor)]
    elif base == "put":
        out += [(x, None) for x in args[1:3]]
    elif base in ("slice_scatter", "select_scatter"):
        out.append((args[1], None))
    elif base == "masked_fill":
        out += [(x, None) for x in args[1:3] if isinstance(x, torch.Tensor)]
    elif base == "masked_scatter":
        out += [(args[1], None), (args[2], _flat(addr_tensor(args[2]).reshape(-1)[:written.size]))]  # type: ignore[list-item]
    return out


def _scatter(base, inplace, func, args, kwargs):
    s = args[0]
    written = _flat(_SCATTERS[base](addr_tensor(s), args, kwargs))
    acc = _accumulates(base, func, args, kwargs)
    eff = Effects(reads=_operand_reads(base, args, written))
    if inplace:
        eff.writes.append((s, written))
        if acc:
            eff.reads.append((s, written))
    else:
        eff.reads.append((s, None if acc else _minus(s, written)))
    return eff


def _out_writes(func, args, kwargs) -> list:
    """The ``out=`` arguments of an op, written whole (``torch.where(c, a, b, out=buf[:n])``)."""
    out = []
    for i, a in enumerate(func._schema.arguments):
        if getattr(a, "is_out", False):
            value = kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
            out += [(t, None) for t in _tensors(value)]
    return out


def exact_effects(func, args, kwargs) -> Effects | None:
    """Exact effects of an indexed op (index already in range), or None for ops read and written whole."""
    eff = _exact(func, args, kwargs)
    if eff is not None:
        eff.writes += _out_writes(func, args, kwargs)
    return eff


def _exact(func, args, kwargs) -> Effects | None:
    name = func._schema.name.split("::")[-1]
    if name in _GATHERS:
        return Effects(reads=_gathers(name, args, kwargs))
    if name == "where" and len(args) == 3:
        return _where(*args)
    if name == "embedding_renorm_":  # F.embedding(max_norm=): rescales the rows it looks up, in place
        rows = rows_addresses(args[0], 0, args[1])
        return Effects(reads=[(args[0], rows), (args[1], None)], writes=[(args[0], rows)])
    base, inplace = (name[:-1], True) if name.endswith("_") and name != "_index_put_impl_" else (name, False)
    if name == "_index_put_impl_":
        base, inplace = "_index_put_impl", True
    if base in _SCATTERS:
        return _scatter(base, inplace, func, args, kwargs)
    return None


INDEXED = _GATHERS | {"where", "embedding_renorm_"} | set(_SCATTERS) | {n + "_" for n in _SCATTERS}
