"""Hooks into Triton's interpreter: every load, store and atomic passes through here.

Under ``TRITON_INTERPRET=1`` the interpreter routes memory ops through
``triton.runtime.interpreter.interpreter_builder.create_masked_load`` /
``create_masked_store`` / ``create_atomic_rmw`` / ``create_atomic_cas``. Their
signatures differ between Triton 3.6 and 3.9 after the first few positional
arguments, so the wrappers take ``*args``. Each active lane is checked *before* the
real access; out-of-bounds lanes are masked off, since the interpreter would
otherwise dereference a raw host address and segfault.

``GridExecutor.__call__`` is wrapped to know which kernel is running and to pause
the torch-side hook: the interpreter copies every tensor argument back with
``copy_`` after a launch, which must not count as a write.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Callable

import numpy as np

_HOOKED = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")


class LaunchInfo:
    """The kernel running now and its tensor arguments (name -> tensor)."""

    def __init__(self, name: str, args: dict):
        self.name, self.args = name, args


class TritonHook:
    """Installs wrappers that call ``on_read(addrs, itemsize) -> oob mask`` and ``on_write``."""

    def __init__(self, on_read: Callable, on_write: Callable, on_launch: Callable, on_launch_end: Callable):
        self.on_read, self.on_write = on_read, on_write
        self.on_launch, self.on_launch_end = on_launch, on_launch_end
        self._saved: dict = {}
        self.launch: LaunchInfo | None = None

    def install(self) -> None:
        from triton.runtime import interpreter as itp
        b = itp.interpreter_builder
        self._saved = {name: getattr(b, name) for name in _HOOKED}
        self._saved["__call__"] = itp.GridExecutor.__call__
        orig = self._saved
        b.create_masked_load = lambda *a: orig["create_masked_load"](*self._access(a, 0, 1, self.on_read))
        b.create_masked_store = lambda *a: orig["create_masked_store"](*self._access(a, 0, 2, self.on_write))
        b.create_atomic_rmw = lambda *a: orig["create_atomic_rmw"](*self._rmw(a, 1, 3))
        b.create_atomic_cas = lambda *a: orig["create_atomic_cas"](*self._rmw(a, 0, None))
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
        tensors = {k: v for k, v in bound.items() if hasattr(v, "data_ptr")}
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

    def _masked(self, args, mask_pos, mask, oob):
        from triton.runtime.interpreter import TensorHandle
        import triton.language as tl
        new = mask.copy()
        new[mask] &= ~oob
        args = list(args)
        args[mask_pos] = TensorHandle(new, tl.int1)
        return tuple(args)

    def _access(self, args, ptr_pos, mask_pos, check):
        """Check the active lanes of a load or store; switch off the out-of-bounds ones."""
        ptrs, mask_h = args[ptr_pos], args[mask_pos]
        addrs, mask = self._active(ptrs, mask_h)
        if not mask.any():
            return args
        oob = check(addrs[mask], self._itemsize(ptrs))
        return self._masked(args, mask_pos, mask, oob) if oob.any() else args

    def _rmw(self, args, ptr_pos, mask_pos):
        ptrs = args[ptr_pos]
        addrs, mask = self._active(ptrs, args[mask_pos] if mask_pos is not None else None)
        if not mask.any():
            return args
        size = self._itemsize(ptrs)
        oob = self.on_read(addrs[mask], size) | self.on_write(addrs[mask], size)
        if oob.any():
            if mask_pos is None:
                raise MemoryError("out-of-bounds atomic_cas (no mask to switch the lane off)")
            return self._masked(args, mask_pos, mask, oob)
        return args


def grid_idx() -> tuple:
    from triton.runtime.interpreter import interpreter_builder
    return tuple(getattr(interpreter_builder, "grid_idx", None) or ())


_SKIP = (os.sep + "triton" + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep,
         os.sep + "numpy" + os.sep)


def kernel_source_line() -> tuple[str, int]:
    """The innermost frame of kernel code (not Triton, numpy or this package's oracles)."""
    f = sys._getframe(1)
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
