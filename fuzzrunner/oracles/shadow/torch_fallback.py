"""Ops the shadow has no model of: custom ops and anything outside aten.

Two mechanisms, neither of which can turn a correct program into a report:

* A ``torch.library.custom_op`` has a Python implementation; it runs under the shadow's
  dispatch mode instead of as one opaque call, so its inner ops (and its allocations,
  and the Triton kernels it launches) are checked one by one, at their own lines.

* Any other op is *probed*: it runs on scratch copies of its tracked operands, twice.
  - Written set: each mutated tracked argument is pre-filled with 0xA5 bytes in one run
    and 0x5A in the other; an element that differs from its fill in either run was
    written. An element whose value differs *between* the runs depends on its old
    value: the op read it (``add_``), unlike a plain overwrite.
  - Read set: an input whose view covers bytes the shadow holds as unwritten (or
    stale) is run with those bytes filled both ways; only if the op's outputs or writes
    differ did it read them. An input with no such bytes is read whole, as it is exact
    to say for them and costs nothing.
  Cost: two extra runs of the op, plus two per input holding unwritten bytes, each on a
  copy of the operand's whole storage; only for ops with no model that touch tracked
  memory. A difference is confirmed by a third run, so a nondeterministic op is not
  blamed.
"""

from __future__ import annotations

import numpy as np
import torch

from .torch_effects import Effects, addresses, element_offsets, leaves, raw_bytes

_FILLS = (0xA5, 0x5A)


def custom_op_impl(func, args):
    """The Python implementation of a ``torch.library.custom_op`` for these arguments' device."""
    if func.namespace in ("aten", "prims"):
        return None
    try:
        from torch._library.custom_ops import _maybe_get_opdef
        opdef = _maybe_get_opdef(func)
    except (ImportError, AttributeError, TypeError):
        return None
    if opdef is None:
        return None
    fns = getattr(opdef, "_backend_fns", {}) or {}
    dev = next((t.device.type for t in leaves(args)), None)
    return fns.get(dev) or fns.get(None) or getattr(opdef, "_init_fn", None)




def python_kernel(func, args) -> bool:
    """Whether the op runs a Python function registered with ``Library.impl`` (vLLM's
    ``direct_register_custom_op``) for these arguments' device: its body's ops can be followed.
    A C++ kernel (c10d's collectives) is not: its helper threads and raw copies are not ops."""
    if func.namespace in ("aten", "prims"):
        return False
    try:
        from torch.library import _impls
    except ImportError:
        return False
    ns, name = func._schema.name.split("::")
    names = (name, f"{name}.{func._overloadname}")
    dev = next((t.device.type.upper() for t in leaves(args)), "CPU")
    keys = (dev, "CompositeExplicitAutograd", "CompositeImplicitAutograd")
    return any(f"{ns}/{n}/{k}" in _impls for n in names for k in keys)


def _schema_tensors(func, args, kwargs):
    """(tensor, mutated?) for each tensor argument."""
    for i, a in enumerate(func._schema.arguments):
        value = kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
        mutated = a.alias_info is not None and a.alias_info.is_write
        for t in leaves(value):
            yield t, mutated


def _scratch(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy of ``t``'s whole storage viewed as ``t``, and the same storage as flat bytes."""
    st = t.untyped_storage()
    raw = torch.empty(st.nbytes(), dtype=torch.uint8, device=t.device)
    raw.untyped_storage().copy_(st)
    view = torch.empty(0, dtype=t.dtype, device=t.device).set_(raw.untyped_storage(), t.storage_offset(),
                                                               t.size(), t.stride())
    return view, raw


def _bytes_of(t: torch.Tensor) -> np.ndarray:
    """(elements, itemsize) byte offsets of ``t``'s elements in its storage."""
    return element_offsets(t)[:, None] + np.arange(t.element_size())


def _swap(value, table):
    if isinstance(value, torch.Tensor):
        return table.get(id(value), value)
    if isinstance(value, (list, tuple)):
        return type(value)(_swap(v, table) for v in value)
    return value


class _Run:
    """One run of the op with some operands replaced by filled scratch copies."""

    def __init__(self, func, args, kwargs, fills: dict):
        # fills: id(tensor) -> (tensor, element mask to fill or None for all, byte value)
        self.copies, table = {}, {}
        for key, (t, mask, byte) in fills.items():
            view, raw = _scratch(t)
            b = _bytes_of(t)
            raw[torch.from_numpy((b if mask is None else b[mask]).ravel())] = byte
            self.copies[key] = (view, raw, b)
            table[key] = view
        out = func(*_swap(tuple(args), table), **{k: _swap(v, table) for k, v in kwargs.items()})
        _wait(out)
        self.out = [raw_bytes(o).numpy().copy() if o.numel() else np.zeros(0) for o in leaves(out)]

    def element_bytes(self, key) -> np.ndarray:
        view, raw, b = self.copies[key]
        return raw.cpu().numpy()[b]


def _wait(out) -> None:
    """Finish the asynchronous work an op returned (c10d collectives return a ``Work``): its outputs
    are compared only once they are written."""
    for o in out if isinstance(out, (list, tuple)) else (out,):
        wait = getattr(o, "wait", None)
        if callable(wait) and not isinstance(o, torch.Tensor):
            wait()


def _differs(a: _Run, b: _Run, mutated: list) -> bool:
    if any(not np.array_equal(x, y) for x, y in zip(a.out, b.out)):
        return True
    return any(not np.array_equal(a.element_bytes(k), b.element_bytes(k)) for k in mutated)


def probe_effects(func, args, kwargs, checker) -> Effects:
    eff = _probe_effects(func, args, kwargs, checker)
    eff.probed = True
    return eff


def _probe_effects(func, args, kwargs, checker) -> Effects:
    tensors = list(_schema_tensors(func, args, kwargs))
    every = {id(t): t for t, m in tensors if m}  # the probe's runs write scratch copies of all of them
    mutated = {k: t for k, t in every.items() if checker.is_tracked(t)}
    inputs = {id(t): t for t, m in tensors if not m}
    eff = Effects(reads=[(t, None) for t in inputs.values()])
    if not mutated and not any(checker.unwritten(t).any() for t in inputs.values() if checker.is_tracked(t)):
        eff.writes = [(t, None) for t, m in tensors if m]
        return eff
    try:
        with torch.no_grad(), checker.probing():
            return _probe(func, args, kwargs, checker, mutated, inputs, eff, every)
    except Exception:  # noqa: BLE001  (the op refused scratch copies: the real call will tell)
        return Effects(reads=[(t, None) for t in inputs.values()], writes=[(t, None) for t in mutated.values()])


def _probe(func, args, kwargs, checker, mutated, inputs, eff, every) -> Effects:
    """``mutated``: the tracked operands the op writes (what the effects report on); ``every``: all it writes, each
    replaced by a filled scratch copy in every probe run. An untracked one left in (a layer's output buffer made
    before the case) was written by each run: an accumulating op (vLLM's ``lora_expand`` adding into ``y``) added
    its result once per run, five times in all, where a tracked input held unwritten bytes."""
    fill = lambda byte: {k: (t, None, byte) for k, t in every.items()}  # noqa: E731
    a, b = _Run(func, args, kwargs, fill(_FILLS[0])), _Run(func, args, kwargs, fill(_FILLS[1]))
    for k, t in mutated.items():
        ea, eb = a.element_bytes(k), b.element_bytes(k)
        written = (ea != _FILLS[0]).any(1) | (eb != _FILLS[1]).any(1)
        depends = written & (ea != eb).any(1)
        eff.writes.append((t, addresses(t)[written]))
        if depends.any() and _confirmed(func, args, kwargs, fill(_FILLS[0]), a, [k]):
            eff.reads.append((t, addresses(t)[depends]))
    eff.reads = [r for r in eff.reads if id(r[0]) not in inputs] + _input_reads(func, args, kwargs, checker,
                                                                               inputs, fill(_FILLS[0]), a)
    return eff


def _input_reads(func, args, kwargs, checker, inputs, base_fill, base_run) -> list:
    """Inputs read whole, except that unwritten elements count only if the op's result depends on them."""
    reads = []
    for k, t in inputs.items():
        bad = checker.unwritten(t) if checker.is_tracked(t) else None
        if bad is None or not bad.any():
            reads.append((t, None))
            continue
        reads.append((t, addresses(t)[~bad]))
        runs = [_Run(func, args, kwargs, {**base_fill, k: (t, bad, byte)}) for byte in _FILLS]
        mutated = [m for m in base_fill]
        fills = {**base_fill, k: (t, bad, _FILLS[0])}
        if _differs(runs[0], runs[1], mutated) and _confirmed(func, args, kwargs, fills, runs[0], mutated):
            reads.append((t, addresses(t)[bad]))
    return reads


def _confirmed(func, args, kwargs, fills, first: _Run, keys) -> bool:
    """A third run with the first run's fills gives the same result: the op is deterministic."""
    again = _Run(func, args, kwargs, fills)
    return not _differs(first, again, keys)
