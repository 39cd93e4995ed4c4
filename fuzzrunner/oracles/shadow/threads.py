"""Torch ops on the other Python threads of a case.

A ``TorchDispatchMode`` is thread-local in torch: the mode the shadow oracle enters on the
thread that runs the case sees nothing that a worker thread does (a ``ThreadPoolExecutor``
filling a buffer, an overlap scheduler preparing the next batch). While the oracle is active
this module enters a mode of the same oracle, for exactly the work the case hands to
another thread:

* every callable submitted to any ``concurrent.futures.ThreadPoolExecutor`` (``submit``, and
  ``map``, which submits), whenever its pool was made: the mode is entered for that one call
  on the worker thread, and left when it returns;
* the ``run`` of every ``threading.Thread`` started during the case (a subclass's own ``run``
  too), for the thread's whole life.

Nothing leaks past the case: a pool's later work items run bare, and a thread started during
the case that outlives it keeps an inert mode (it calls the op and nothing else, holding no
reference to the shadow memory) until its ``run`` returns. The modes are pushed with torch's
``_push_mode``/``_pop_mode`` rather than ``__enter__``: those keep process-wide flags that
threads entering and leaving out of order would leave set.

Not covered: a thread started *before* the case that is not a pool worker (an engine's own
loop thread made at start-up), and other processes (see docs/shadow.md, "Threads and
processes").
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import thread as _pool_thread
from contextlib import contextmanager

from torch.utils._python_dispatch import _pop_mode, _push_mode

from .locations import ORIGIN, caller_line


class PerThread(threading.local):
    """What one thread is doing: a Triton launch pauses the torch hook on its own thread only."""

    def __init__(self):
        self.pause = 0       # inside a Triton launch: the interpreter's own copy-back is not a write
        self.probing = 0     # the fallback's scratch runs of an op
        self.garbage_read = False  # this launch has read never-written memory
        self.views = None    # LaunchViews of this launch (check_views)
        self.adopted: list = []


def locked(method):
    """Run under the oracle's lock: ops on several threads share one shadow memory."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)
    return run


ACTIVE: weakref.WeakSet = weakref.WeakSet()  # oracles started and not finished, in this process


def _forked_child() -> None:
    """A fork of a process under the oracle (``os.fork``, multiprocessing's "fork"): the child has a
    copy of the shadow memory whose reports could never reach the parent; it runs unchecked."""
    for oracle in list(ACTIVE):
        oracle.forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


def thread_name() -> str:
    return threading.current_thread().name


class _Off:
    """The checker of a mode left on a thread after its case: every op runs untouched."""

    @staticmethod
    def paused() -> bool:
        return True


OFF = _Off()


class ThreadCoverage:
    """Installs the ``submit`` and ``Thread.start`` wrappers; ``make_mode()`` gives a fresh mode."""

    def __init__(self, make_mode: Callable):
        self._make_mode = make_mode
        self._modes: list = []
        self._lock = threading.Lock()
        self._inside = threading.local()
        self._saved: dict = {}
        self.owner = threading.get_ident()

    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def install(self) -> None:
        self.owner = threading.get_ident()
        self._saved = {"submit": ThreadPoolExecutor.submit, "start": threading.Thread.start}
        submit, start, cov = self._saved["submit"], self._saved["start"], self

        def wrapped_submit(executor, fn, /, *args, **kwargs):
            return submit(executor, cov.wrap(fn), *args, **kwargs)

        def wrapped_start(thread):
            if getattr(thread, "_target", None) is not _pool_thread._worker:  # pool work: per item
                thread.run = cov.wrap(thread.run)
            return start(thread)

        ThreadPoolExecutor.submit = functools.wraps(submit)(wrapped_submit)  # type: ignore[method-assign]
        threading.Thread.start = functools.wraps(start)(wrapped_start)  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        """Restore ``submit`` and ``Thread.start``; modes still on other threads go inert."""
        if not self._saved:
            return
        ThreadPoolExecutor.submit = self._saved.pop("submit")  # type: ignore[method-assign]
        threading.Thread.start = self._saved.pop("start")  # type: ignore[method-assign]
        with self._lock:
            for mode in self._modes:
                mode.checker = OFF
            self._modes = []

    def wrap(self, fn: Callable) -> Callable:
        site = caller_line(3)  # the line that submitted it or started the thread

        @functools.wraps(fn)
        def on_thread(*args, **kwargs):
            with self.entered():
                ORIGIN.site = site
                try:
                    return fn(*args, **kwargs)
                finally:
                    ORIGIN.site = None
        return on_thread

    @contextmanager
    def entered(self):
        """The shadow mode on this thread for the block (unless it has one, or the case is over)."""
        if not self.installed or threading.get_ident() == self.owner or getattr(self._inside, "on", False):
            yield
            return
        mode = self._make_mode()
        with self._lock:
            self._modes.append(mode)
        self._inside.on = True
        _push_mode(mode)
        try:
            yield
        finally:
            _pop_mode()
            self._inside.on = False
            with self._lock:
                if mode in self._modes:
                    self._modes.remove(mode)
