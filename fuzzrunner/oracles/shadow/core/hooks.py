"""The stack of what a shadow oracle's ``start`` installed, and where its torch dispatch mode sits.

``start`` pushes each hook as it installs it; ``finish`` takes them off last first, each once. After a
``start`` that raised halfway, ``finish`` undoes exactly what was installed (``Oracle``'s contract), and an
undo step that raises does not leave the ones below it installed.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode, _pop_mode, _push_mode
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack as _mode_stack
from torch.utils._python_dispatch import _len_torch_dispatch_stack as _len_stack


class Hook(Protocol):
    def install(self) -> None: ...

    def uninstall(self) -> None: ...


H = TypeVar("H", bound=Hook)


class Hooks:
    def __init__(self):
        self._undo: list[Callable[[], None]] = []

    def add(self, hook: H) -> H:
        """Install ``hook``; ``undo`` uninstalls it."""
        hook.install()
        self._undo.append(hook.uninstall)
        return hook

    def enter(self, context: AbstractContextManager) -> None:
        """Enter ``context``; ``undo`` leaves it."""
        context.__enter__()

        def leave() -> None:
            context.__exit__(None, None, None)
        self._undo.append(leave)

    def push(self, undo: Callable[[], None]) -> None:
        """Something installed by other means; ``undo`` calls ``undo()``."""
        self._undo.append(undo)

    def undo(self) -> None:
        """Everything, last installed first; the first exception (if any) is raised once all are undone."""
        failed: BaseException | None = None
        while self._undo:
            try:
                self._undo.pop()()
            except BaseException as e:  # noqa: BLE001  (the rest still undone; this one raised below)
                failed = failed or e
        if failed is not None:
            raise failed


def insert_mode(mode: TorchDispatchMode, index: int) -> None:
    """Put ``mode`` back on this thread's dispatch-mode stack at position ``index`` (from the bottom), under
    the modes entered above it since it was taken off (``tracking.quiet``), or on top if fewer are left."""
    above = []
    while _len_stack() > index:
        above.append(_pop_mode())
    _push_mode(mode)
    for m in reversed(above):
        _push_mode(m)


def exit_mode(mode: TorchDispatchMode) -> None:
    """Leave ``mode`` (``__exit__``) where it sits on this thread's stack, the modes above it staying on;
    nothing when it is not on the stack."""
    stack = _mode_stack()
    if not any(m is mode for m in stack):
        return
    above = []
    while _get_current_dispatch_mode() is not mode:
        above.append(_pop_mode())
    mode.__exit__(None, None, None)
    for m in reversed(above):
        _push_mode(m)
