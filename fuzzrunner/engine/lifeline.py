"""Die with the parent: a process of ours never outlives the process that started it.

``kill -9`` of a campaign gives its shard and worker processes no chance to clean up, so each
watches its parent instead: on Linux the kernel sends the parent-death signal at once, and a
daemon thread polls the parent's pid (once a second) for the cases that signal misses (a
wrapper such as compute-sanitizer between us and the hub).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

from .protocol import PARENT_ENV as ENV

_PR_SET_PDEATHSIG = 1


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie counts until it is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def die_with(pid: int | None, *, poll_s: float = 1.0) -> None:
    """Exit this process (status 5) as soon as process ``pid`` is gone."""
    if not pid:
        return
    if sys.platform.startswith("linux") and os.getppid() == pid:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    if not alive(pid) or (os.getppid() == 1 and pid != 1):
        os._exit(5)

    def watch() -> None:
        while alive(pid):
            time.sleep(poll_s)
        os._exit(5)

    threading.Thread(target=watch, name="fuzzrunner-lifeline", daemon=True).start()


def die_with_env_parent() -> None:
    """``die_with`` the pid that the starting process put in ``FUZZRUNNER_PARENT_PID``."""
    value = os.environ.get(ENV, "")
    die_with(int(value) if value.isdigit() else None)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def sigterm_as_interrupt() -> None:
    """SIGTERM (CI cancellation, ``timeout``, systemd) ends a campaign like Ctrl-C: cleanly, with a
    partial report. Only the main thread can install it; elsewhere this does nothing."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # a terminal's Ctrl-C, CI's cancel, a closed terminal


class StopSignals:
    """A command's stop signals: SIGINT, SIGTERM and SIGHUP alike. The first one stops the work (a
    ``KeyboardInterrupt``: the campaign stops cleanly with its partial result); later ones are only noted,
    so that the clean-up and the partial report they would cut short are always written (SIGKILL still
    ends the process). While ``held`` (the reports being written) none raises. ``came`` says which came,
    for the exit code. Installed from the main thread (``install``), undone by ``uninstall``."""

    def __init__(self):
        self.came: list[int] = []
        self._held = 0
        self._before: dict = {}

    def install(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._before = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        return self

    def uninstall(self) -> None:
        for s, handler in self._before.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        self._before = {}

    def _on_signal(self, signum, frame) -> None:
        self.came.append(signum)
        if len(self.came) == 1 and not self._held:
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    @contextmanager
    def held(self):
        """No stop signal raises in this block; each is noted."""
        self.hold()
        try:
            yield
        finally:
            self._held -= 1

    def hold(self) -> None:
        """From now on no stop signal raises (until a ``held`` block it is inside of ends)."""
        self._held += 1

    @property
    def stopped(self) -> bool:
        return bool(self.came)
