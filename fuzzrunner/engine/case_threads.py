"""The threads a case starts, in its worker: whose they are, what they raise, whether they still run.

A case may start threads that outlive it (a daemon that ends the process after the case returned,
a timer, a background loader). Their deeds were lost or blamed on an innocent case: a thread that
called ``os._exit`` after its case returned was a silent worker restart, or a "flaky" crash of the
next case, and an exception on it went to stderr only (issue 47). So the worker keeps, for every
thread, the case that started it (a thread started by a case's thread belongs to that case too,
whenever it starts), and:

* an exception that ends such a thread (``threading.excepthook``) is a crash violation of its case:
  part of the case's result while the case runs, else sent to the hub as soon as it happens
  (``protocol.Late``);
* each result names the cases whose threads are still running (``protocol.Result.lingering``): when
  the worker dies later, those cases are the suspects, and a rerun of a suspect that waits for its
  threads (``wait``, ``protocol.Run.linger_s``) tells whose death it was.

Idle workers of a ``ThreadPoolExecutor`` are nobody's: they wait for work for ever, and the work
they run is submitted (and waited for) by someone else.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import thread as _pool_thread


def _pool_worker(thread: threading.Thread) -> bool:
    return getattr(thread, "_target", None) is _pool_thread._worker


class CaseThreads:
    """Installed once in a worker (``install``); ``begin``/``end`` bracket each case."""

    def __init__(self, on_late: Callable[[int, object], None], own_code: tuple = ()):
        """``on_late(case_no, violation)``: an exception on a thread of a case that has already returned."""
        self.on_late, self.own_code = on_late, own_code
        self.current = 0                     # the case running (0: none)
        self.op_index: int | None = None     # its op running (``at_op``), for what its threads raise meanwhile
        self._owner: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Thread -> case number
        self._errors: list = []              # violations of the current case's threads
        self._lock = threading.Lock()

    def install(self) -> None:
        start, cov = threading.Thread.start, self

        def owned_start(thread):
            owner = cov._owner.get(threading.current_thread())
            if owner is None and threading.current_thread() is threading.main_thread():
                owner = cov.current or None
            if owner is not None and not _pool_worker(thread):
                cov._owner[thread] = owner
            return start(thread)

        threading.Thread.start = owned_start  # type: ignore[method-assign]
        self._previous_hook = threading.excepthook
        threading.excepthook = self._excepthook

    def begin(self, case_no: int) -> None:
        with self._lock:
            self.current, self._errors, self.op_index = case_no, [], None

    def at_op(self, index: int) -> None:
        self.op_index = index

    def end(self) -> list:
        """The case is over: the violations its threads raised while it ran."""
        with self._lock:
            self.current, errors, self._errors = 0, self._errors, []
        return errors

    def _excepthook(self, args) -> None:
        owner = self._owner.get(args.thread) if args.thread is not None else None
        if owner is None or args.exc_value is None:
            self._previous_hook(args)
            return
        with self._lock:
            if owner == self.current:
                self._errors.append(thread_violation(args.exc_value, args.thread.name, self.op_index, self.own_code))
                return
        self.on_late(owner, thread_violation(args.exc_value, args.thread.name, None, self.own_code, after=True))

    def of_case(self, case_no: int) -> list[threading.Thread]:
        return [t for t in threading.enumerate() if self._owner.get(t) == case_no and t.is_alive()]

    def lingering(self) -> dict[int, list[str]]:
        """Case number -> the names of its threads still running."""
        out: dict[int, list[str]] = {}
        for t in threading.enumerate():
            owner = self._owner.get(t)
            if owner is not None and t.is_alive():
                out.setdefault(owner, []).append(t.name)
        return out

    def wait(self, case_no: int, seconds: float) -> None:
        """Wait up to ``seconds`` in all for the threads of case ``case_no`` (those they start meanwhile too)."""
        deadline = time.monotonic() + seconds
        while (threads := self.of_case(case_no)) and time.monotonic() < deadline:
            threads[0].join(max(0.0, min(0.05, deadline - time.monotonic())))


def thread_violation(exc: BaseException, thread_name: str, op_index: int | None, own_code: tuple = (), *,
                     after: bool = False):
    """An exception that ended a thread of a case: a crash at the thread's own line (``op_index``: the case's op
    running then; ``after``: the case had returned)."""
    from dataclasses import replace

    from ..execute import crash_violation
    from ..text import describe
    v = crash_violation(exc, op_index, own_code)
    if v.kind != "crash":  # the tool's own limitation: as it is
        return v
    text = describe(exc)  # (a user's exception: its text may raise)
    when = ("after the case returned" if after else "before the case's first op" if op_index is None
            else f"op {op_index}")
    return replace(v, message=f"{'target error: ' if v.tool == 'target' else ''}{when}: on thread {thread_name!r}, "
                              f"started by the case: {text}",
                   details={**v.details, "thread": thread_name, "after_case": after})
