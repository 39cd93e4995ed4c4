"""``torch.UntypedStorage(n)``: uninitialized memory that never passes through an aten op.

While an oracle runs, storages made from a byte count are announced to it (a tensor then
set onto one, ``t.set_(storage)``, reads what the storage holds). Storages made from data
(a list, a buffer, another storage) are initialized and need nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class StorageHook:
    def __init__(self, on_new: Callable):
        self.on_new = on_new
        self._had_own = False
        self._orig = None

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

    def uninstall(self) -> None:
        if self._orig is not None and self._had_own:
            torch.UntypedStorage.__new__ = self._orig
        elif "__new__" in torch.UntypedStorage.__dict__:
            del torch.UntypedStorage.__new__
        self._orig = None
