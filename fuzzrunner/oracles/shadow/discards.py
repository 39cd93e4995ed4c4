"""Reads whose value a kernel discards: reported only when the value is used (the CPU mode, Triton's interpreter).

SGLang's ``triton_v2`` expand kernel (``_grouped_lora_b_kernel``, 0.5.23 ``kernels/ops/lora/common/lora_b.py``)
loads a block of its workspace under the pool's static rank mask and then keeps only the slot's live rank:

    lhs = tl.load(lhs_ptrs, mask=lhs_mask, other=0.0)
    lhs = tl.where(k_mask[None, :], lhs, 0.0)   # "Select, not multiply: the unselected lanes may hold anything"

The lanes past a smaller adapter's rank were never written, and are read and dropped, by design. Reported at
the load, every fault-free ``sglang_engine`` campaign on that backend ended in a finding (exit 1). So a load's
never-written or stale lanes are *pending*: the loaded value carries them (its taint), through the kernel's
element-wise ops and shape ops (casts, arithmetic, comparisons, reshape, broadcast, ...) lane by lane; a
``tl.where`` keeps only the lanes it selects. The load's bad reads are reported (as they were, at the load's
line) the first time a tainted lane reaches anything else (a dot, a store, an address, a mask, a reduction),
and at the launch's end if a tainted value was never consumed or went where this cannot follow (``bool()``,
an index, ``.T``). Only a value whose every tainted lane a ``tl.where`` dropped is silent. Out-of-bounds
lanes are reported at once, as before (their addresses are wild whatever the value).

While a launch holds pending reads (and only then), every ``create_*`` of the interpreter's builder and its
reductions and scans pass through here. The device mode (gpu/) reports these reads at the load, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

_CASTS = ("si_to_fp", "ui_to_fp", "fp_to_si", "fp_to_ui", "fp_ext", "fp_trunc", "int_cast", "fp_to_fp", "bitcast")
_ARITH = ("fadd", "fmul", "fdiv", "frem", "fsub", "fneg", "mul", "precise_divf", "approx_divf", "sdiv", "udiv",
          "idiv", "srem", "urem", "add", "sub", "shl", "lshr", "ashr", "minsi", "minui", "minimumf", "minnumf",
          "maxsi", "maxui", "maximumf", "maxnumf", "and", "xor", "or", "umulhi", "fma", "clampf", "fabs", "cos",
          "exp", "exp2", "iabs", "floor", "ceil", "log", "log2", "precise_sqrt", "sqrt", "sin", "erf", "rsqrt")
_COMPARE = tuple(f"icmp{c}" for c in ("SLE", "SLT", "SGE", "SGT", "ULE", "ULT", "UGE", "UGT", "EQ", "NE")) + tuple(
    f"fcmp{o}{c}" for o in "OU" for c in ("LT", "GT", "LE", "GE", "EQ", "NE"))
ELEMENTWISE = frozenset(f"create_{n}" for n in _CASTS + _ARITH + _COMPARE)
SHAPES = {"create_reshape": lambda t, arg, shape, *_: t.reshape(shape),
          "create_expand_dims": lambda t, arg, axis: np.expand_dims(t, axis),
          "create_broadcast": lambda t, arg, shape: np.broadcast_to(t, shape),
          "create_trans": lambda t, arg, perm: np.transpose(t, perm)}


class Pending:
    """One load's bad reads, reported (``report``) the first time its value is used, or never."""

    def __init__(self, report: Callable[[], None]):
        self._report, self.fired = report, False

    def fire(self) -> None:
        if not self.fired:
            self.fired = True
            self._report()


class _Taint:
    __slots__ = ("handle", "lanes", "pending", "consumed")

    def __init__(self, handle, lanes: np.ndarray, pending: set):
        self.handle, self.lanes, self.pending, self.consumed = handle, lanes, pending, False


class Discards:
    """Which values of the launch running on each thread hold unwritten lanes; the builder's hooks."""

    def __init__(self):
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._users = 0
        self._saved: dict = {}

    def _taints(self) -> dict:
        t = getattr(self._tls, "taints", None)
        if t is None:
            t = self._tls.taints = {}
        return t

    # -- the oracle's side ----------------------------------------------------------------
    def defer(self, pending: Pending, lanes: np.ndarray) -> None:
        """The load being checked now (its active lanes' ``lanes`` unwritten) reports through ``pending``."""
        self._tls.next_load = (pending, lanes)

    def loaded(self, handle, active: np.ndarray) -> None:
        """The load just checked returned ``handle``; ``active``: its lanes that were checked."""
        deferred = getattr(self._tls, "next_load", None)
        self._tls.next_load = None
        if deferred is None:
            return
        pending, lanes = deferred
        full = np.zeros(active.shape, dtype=bool)
        full[active] = lanes
        if not self._taints():
            self._use_builder(True)
        self._taints()[id(handle)] = _Taint(handle, full.reshape(np.shape(handle.data)), {pending})

    def launch_end(self) -> None:
        """Report the pending reads whose value was never consumed where this could see it."""
        taints = self._taints()
        if not taints:
            return
        self._tls.taints = {}
        self._use_builder(False)
        for t in taints.values():
            if not t.consumed:
                for p in t.pending:
                    p.fire()

    # -- the builder's side ---------------------------------------------------------------
    def _use_builder(self, on: bool) -> None:
        with self._lock:
            self._users += 1 if on else -1
            if on and self._users == 1:
                self._install()
            elif not on and self._users == 0:
                self._uninstall()

    def _install(self) -> None:
        from triton.runtime import interpreter as itp
        b = itp.interpreter_builder
        for name in dir(type(b)):
            if name.startswith("create_") and callable(getattr(b, name)):
                self._saved[name] = b.__dict__.get(name)
                setattr(b, name, self._wrap(name, getattr(b, name)))
        base = itp.ReduceScanOpInterface
        self._saved["<apply>"] = base.apply
        apply = base.apply

        def checked(op, input):
            self._fire_inputs(input if isinstance(input, tuple) else (input,))
            return apply(op, input)
        base.apply = checked  # type: ignore[method-assign]

    def _uninstall(self) -> None:
        from triton.runtime import interpreter as itp
        b = itp.interpreter_builder
        itp.ReduceScanOpInterface.apply = self._saved.pop("<apply>")  # type: ignore[method-assign]
        for name, before in self._saved.items():
            if before is None:
                b.__dict__.pop(name, None)
            else:
                setattr(b, name, before)
        self._saved = {}

    def _wrap(self, name: str, fn: Callable) -> Callable:
        def call(*args, **kwargs):
            taints = getattr(self._tls, "taints", None)
            if not taints:
                return fn(*args, **kwargs)
            found = [taints[id(a)] for a in _handles(args, kwargs) if id(a) in taints]
            out = fn(*args, **kwargs)
            if found:
                self._follow(name, found, args, out)
            return out
        return call

    def _fire_inputs(self, tensors) -> None:
        taints = getattr(self._tls, "taints", None)
        for x in tensors if taints else ():
            t = taints.get(id(getattr(x, "handle", None)))  # type: ignore[union-attr]
            if t is not None and t.lanes.any():
                t.consumed = True
                for p in t.pending:
                    p.fire()

    def _follow(self, name: str, found: list, args: tuple, out) -> None:
        """Carry the inputs' taint into ``out`` (element-wise, shape, select ops), else report it: used."""
        try:
            lanes = self._lanes(name, found, args, out)
        except (ValueError, TypeError, IndexError, AttributeError):  # an output that is no value: a use
            lanes = None
        for t in found:
            t.consumed = True
        if lanes is None:  # a use: every pending read behind a tainted lane of the inputs is reported
            for t in found:
                if t.lanes.any():
                    for p in t.pending:
                        p.fire()
            return
        if lanes.any():
            pending = set().union(*(t.pending for t in found))
            self._taints()[id(out)] = _Taint(out, lanes, pending)

    @staticmethod
    def _lanes(name: str, found: list, args: tuple, out) -> np.ndarray | None:
        shape = np.shape(out.data)  # a TensorHandle (else the caller reports the use: AttributeError)
        by_id = {id(t.handle): t.lanes for t in found}

        def of(h) -> np.ndarray:
            return np.broadcast_to(by_id.get(id(h), np.zeros((), dtype=bool)), shape)
        if name == "create_select":
            cond, lhs, rhs = args[:3]
            c = np.broadcast_to(np.asarray(cond.data, dtype=bool), shape)
            return of(cond) | (c & of(lhs)) | (~c & of(rhs))
        if name in ELEMENTWISE:
            return np.logical_or.reduce([of(h) for h in _handles(args, {})]) if args else None
        if name in SHAPES and id(args[0]) in by_id and len(found) == 1:
            return np.array(SHAPES[name](by_id[id(args[0])], *args), dtype=bool).reshape(shape)
        if name == "create_splat" and len(args) == 2 and id(args[1]) in by_id:
            return np.full(shape, bool(by_id[id(args[1])].any()))
        return None


def _handles(args: tuple, kwargs: dict) -> list:
    """The interpreter's values among a builder call's arguments (one level into lists and tuples)."""
    from triton.runtime.interpreter import TensorHandle
    out = []
    for a in (*args, *kwargs.values()):
        for x in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(x, TensorHandle):
                out.append(x)
    return out
