"""``torch.UntypedStorage``: memory that never passes through an aten op.

While an oracle runs, storages made from a byte count are announced to it (a tensor then
set onto one, ``t.set_(storage)``, reads what the storage holds). Storages made from data
(a list, a buffer, another storage) are initialized and need nothing. ``storage.resize_(n)``
is announced with the storage's (address, size) before it: grown bytes are unwritten, and
the storage may have moved.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class StorageHook:
    def __init__(self, on_new: Callable, on_resize: Callable | None = None):
        self.on_new, self.on_resize = on_new, on_resize
        self._had_own = False
        self._orig = None
        self._resize_own = None

    def install(self) -> None:
        cls = torch.UntypedStorage
        self._had_own = "__new__" in cls.__dict__
        self._orig = cls.__dict__.get("__new__", None)
        base_new = cls.__new__
        hook = self

        def new(klass, *args, **kwargs):
            st = base_new(klass, *args, **kwargs)
            if len(args) == 1 and isinstance(args[0], int) and not kwargs.get("data"):
                hook.on_new(st)
            return st

        cls.__new__ = new  # type: ignore[assignment,method-assign]
        if self.on_resize is not None:
            self._resize_own = cls.__dict__.get("resize_")
            base_resize = cls.resize_

            def resize_(st, *args, **kwargs):
                before = (st.data_ptr(), st.nbytes())
                out = base_resize(st, *args, **kwargs)
                if (st.data_ptr(), st.nbytes()) != before:
                    hook.on_resize(st, before)  # type: ignore[misc]
                return out

            cls.resize_ = resize_  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        if self._orig is not None and self._had_own:
            torch.UntypedStorage.__new__ = self._orig
        elif "__new__" in torch.UntypedStorage.__dict__:
            del torch.UntypedStorage.__new__
        self._orig = None
        if self.on_resize is not None:
            if self._resize_own is not None:
                torch.UntypedStorage.resize_ = self._resize_own  # type: ignore[method-assign]
            elif "resize_" in torch.UntypedStorage.__dict__:
                del torch.UntypedStorage.resize_
            self._resize_own = None
