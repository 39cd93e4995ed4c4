"""Hooks into Triton's interpreter: every load, store and atomic passes through here.

Under ``TRITON_INTERPRET=1`` the interpreter routes memory ops through
``triton.runtime.interpreter.interpreter_builder.create_masked_load`` /
``create_masked_store`` / ``create_atomic_rmw`` / ``create_atomic_cas``. Their
signatures differ between Triton 3.6 and 3.9 after the first few arguments, and
3.9's descriptor loads pass some by keyword, so the wrappers take ``*args, **kwargs``
and find the pointer and mask by position or name. Tensor descriptors and block
pointers are materialized into these same masked loads and stores. Each active lane is checked *before* the
real access; out-of-bounds lanes are masked off, since the interpreter would
otherwise dereference a raw host address and segfault.

``GridExecutor.__call__`` is wrapped to know which kernel is running and to pause
the torch-side hook: the interpreter copies every tensor argument back with
``copy_`` after a launch, which must not count as a write.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager
from types import FrameType

import numpy as np

from .sub_buffers import tag_of

_HOOKED = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")


class LaunchInfo:
    """The kernel running now and its tensor arguments (name -> tensor)."""

    def __init__(self, name: str, args: dict):
        self.name, self.args = name, args


class TritonHook:
    """Installs wrappers that call ``on_read(addrs, itemsize[, load]) -> mask of lanes to switch off``
    and ``on_write``; an atomic's read passes ``load=False`` (its lanes cannot be switched off for
    being unwritten: the atomic writes them)."""

    def __init__(self, on_read: Callable, on_write: Callable, on_launch: Callable, on_launch_end: Callable,
                 on_view: Callable | None = None, on_loaded: Callable | None = None):
        self.on_read, self.on_write = on_read, on_write
        self.on_loaded = on_loaded  # (value, lanes checked): a load's result, after its check (discards.py)
        self.on_view = on_view  # (addrs, itemsize, view tag, access): a pointer derived from a registered view
        self.on_launch, self.on_launch_end = on_launch, on_launch_end
        self._saved: dict = {}
        self._tls = threading.local()  # the launch running on each thread

    @property
    def launch(self) -> LaunchInfo | None:
        return getattr(self._tls, "launch", None)

    @launch.setter
    def launch(self, value: LaunchInfo | None) -> None:
        self._tls.launch = value

    def install(self) -> None:
        from triton.runtime import interpreter as itp
        b = itp.interpreter_builder
        self._saved = {name: getattr(b, name) for name in _HOOKED}
        self._saved["__call__"] = itp.GridExecutor.__call__
        orig = self._saved
        b.create_masked_load = lambda *a, **k: self._call(orig["create_masked_load"], a, k, _LOAD, self.on_read)
        b.create_masked_store = lambda *a, **k: self._call(orig["create_masked_store"], a, k, _STORE, self.on_write)
        b.create_atomic_rmw = lambda *a, **k: self._call(orig["create_atomic_rmw"], a, k, _RMW, None)
        b.create_atomic_cas = lambda *a, **k: self._call(orig["create_atomic_cas"], a, k, _CAS, None)
        hook = self

        def call(executor, *args, **kwargs):
            return hook._launch(orig["__call__"], executor, args, kwargs)

        itp.GridExecutor.__call__ = call

    def uninstall(self) -> None:
        if not self._saved:
            return
        from triton.runtime import interpreter as itp
        itp.GridExecutor.__call__ = self._saved.pop("__call__")
        for name, fn in self._saved.items():
            setattr(itp.interpreter_builder, name, fn)
        self._saved = {}

    # -- launches ---------------------------------------------------------------------
    def _launch(self, orig, executor, args, kwargs):
        import inspect
        params = inspect.signature(executor.fn).parameters
        known = {k: v for k, v in kwargs.items() if k in params}  # drop num_warps & co., as Triton does
        try:
            bound = inspect.signature(executor.fn).bind_partial(*args, **known).arguments
        except TypeError:
            bound = {}
        tensors = dict(_flatten(bound))
        self.launch = LaunchInfo(executor.fn.__name__, tensors)
        token = self.on_launch(self.launch)
        try:
            return orig(executor, *args, **kwargs)
        finally:
            self.on_launch_end(token)
            self.launch = None

    # -- memory ops -------------------------------------------------------------------
    @staticmethod
    def _itemsize(ptrs) -> int:
        return max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)

    def _active(self, ptrs, mask_handle):
        addrs = np.asarray(ptrs.data, dtype=np.uint64)
        if mask_handle is None:
            mask = np.ones(addrs.shape, dtype=bool)
        else:
            mask = np.broadcast_to(np.asarray(mask_handle.data, dtype=bool), addrs.shape)
        return addrs, mask

    def _call(self, orig, args, kwargs, names, check):
        """Check the active lanes of one memory op, switch off the out-of-bounds ones, run it.

        ``names`` are the (pointer, mask) parameter names; each may come by position or keyword
        (Triton 3.9's descriptor loads pass ``cache_policy=``/``is_volatile=`` as keywords)."""
        op = _Args(args, kwargs, names)
        ptrs, mask_h = op.get(0), op.get(1)
        addrs, mask = self._active(ptrs, mask_h)
        checked = mask  # the lanes the check saw (a deferred read's lanes are theirs: discards.py)
        if mask.any():
            size = self._itemsize(ptrs)
            access = "read" if check is self.on_read else "write"
            tag = tag_of(ptrs) if self.on_view is not None else None
            act = addrs[mask]
            # a pointer of an argument's own storage (sub_buffers.py): lanes that left it into another allocation
            # are out of bounds of it, reported now and switched off, never checked against what they ran into
            escaped = self.on_view(act, size, tag, access) if tag is not None and len(tag) > 3 else None
            if escaped is None:
                oob = self._check(check, act, size)
            else:
                oob = escaped.copy()
                checked = mask.copy()
                checked[mask] = ~escaped
                if (~escaped).any():
                    oob[~escaped] = self._check(check, act[~escaped], size)
            if tag is not None and len(tag) == 3:
                self.on_view(act[~oob], size, tag, access)
            if oob.any():
                if names[1] is None:
                    raise MemoryError("out-of-bounds atomic_cas (no mask to switch the lane off)")
                op.set(1, self._new_mask(mask, oob))
        out = orig(*op.args, **op.kwargs)
        if check is self.on_read and self.on_loaded is not None and mask.any():
            self.on_loaded(out, checked)
        return out

    def _check(self, check, addrs, size):
        if check is None:  # atomics read and write
            return self.on_read(addrs, size, False) | self.on_write(addrs, size)
        return check(addrs, size)

    @staticmethod
    def _new_mask(mask, oob):
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle
        new = mask.copy()
        new[mask] &= ~oob
        return TensorHandle(new, tl.int1)


# (pointer, mask): (position, name) of each memory op's operands, the same in Triton 3.6 and 3.9.
_LOAD = ((0, "ptrs"), (1, "mask"))
_STORE = ((0, "ptrs"), (2, "mask"))
_RMW = ((1, "ptr"), (3, "mask"))
_CAS = ((0, "ptr"), None)


class _Args:
    """Positional-or-keyword access to a call's operands."""

    def __init__(self, args, kwargs, names):
        self.args, self.kwargs, self.names = list(args), dict(kwargs), names

    def get(self, i):
        if self.names[i] is None:
            return None
        pos, name = self.names[i]
        return self.args[pos] if pos < len(self.args) else self.kwargs.get(name)

    def set(self, i, value):
        pos, name = self.names[i]
        if pos < len(self.args):
            self.args[pos] = value
        else:
            self.kwargs[name] = value


def _flatten(bound: dict, descriptor=lambda d: d.base):
    """(name, tensor) for tensor arguments, including those inside tuples (``name[i]``); a host
    TensorDescriptor gives ``descriptor(it)`` (its base tensor by default)."""
    for k, v in bound.items():
        if hasattr(v, "data_ptr") and hasattr(v, "untyped_storage"):
            yield k, v
        elif isinstance(v, (tuple, list)):
            yield from _flatten({f"{k}[{i}]": x for i, x in enumerate(v)}, descriptor)
        elif hasattr(v, "base") and hasattr(v.base, "data_ptr"):  # a host TensorDescriptor
            yield k, descriptor(v)


def live_storages(addrs: np.ndarray):
    """(storage, a tensor on it) of every live torch CPU storage holding one of ``addrs``.

    Walks the garbage collector's objects: slow, so called only for lanes that are outside
    every tracked storage, just before they would be reported and masked."""
    import gc

    import torch
    seen, out = set(), []
    lo, hi = int(addrs.min()), int(addrs.max())
    fake_mod = sys.modules.get("torch._subclasses.fake_tensor")
    fake = fake_mod.FakeTensor if fake_mod is not None else ()
    for obj in gc.get_objects():
        # type(), not isinstance: no proxy's __class__ runs; fake tensors (Dynamo's) have no memory
        if not issubclass(type(obj), torch.Tensor) or issubclass(type(obj), fake):
            continue
        try:
            st = obj.untyped_storage()
            ptr, n = st.data_ptr(), st.nbytes()
        except (RuntimeError, NotImplementedError):  # no storage, or no real memory (Dynamo's fake tensors)
            continue
        if n and ptr not in seen and ptr <= hi and lo < ptr + n:
            seen.add(ptr)
            if ((addrs >= ptr) & (addrs < ptr + n)).any():
                out.append((st, obj))
    return out


def grid_idx() -> tuple:
    from triton.runtime.interpreter import interpreter_builder
    return tuple(getattr(interpreter_builder, "grid_idx", None) or ())


_ORACLES = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SKIP = (os.sep + "triton" + os.sep, _ORACLES,
         os.sep + "numpy" + os.sep)


def kernel_source_line() -> tuple[str, int]:
    """The innermost frame of kernel code (not Triton, numpy or this package's oracles)."""
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename
        if not any(s in path for s in _SKIP) and "<" not in path:
            return path, f.f_lineno
        f = f.f_back
    return "?", 0


@contextmanager
def installed(hook: TritonHook):
    hook.install()
    try:
        yield hook
    finally:
        hook.uninstall()
