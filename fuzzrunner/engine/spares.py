"""Warm spare workers: started in the background, ready to take over after a death.

A crash then costs a hand-over (tens of ms), not a start-up (seconds). How many a hub keeps
(``wanted``): one, and as many more as it takes for a started spare to be ready when the next death
comes, at the recent rate of deaths.
"""

from __future__ import annotations

import math
import threading
import time

from .forking import StartCut, Zygote
from .worker_handle import Worker
from .worker_spec import WorkerSpec


def wanted(deaths: list[float], start_s: float | None, max_spares: int) -> int:
    """One, plus enough that a spare is ready by the next death: a worker's start-up (``start_s``, measured)
    over the time between the recent ``deaths`` (monotonic times), at most ``max_spares``."""
    recent = deaths[-5:]
    if len(recent) < 2:
        return 1
    interval = max((recent[-1] - recent[0]) / (len(recent) - 1), 1e-3)
    return max(1, min(max_spares, math.ceil((start_s or 3.0) / interval)))


class Spare:
    """A spare worker started in the background, ready to take over after a death.

    The process is started from the calling (main) thread: the kernel's parent-death signal
    (lifeline.py) fires when the *thread* that forked a child ends, so a spare forked from a
    short-lived thread would be killed as soon as that thread finished. Only the wait for its
    hand-shake runs in the background thread."""

    def __init__(self, spec: WorkerSpec, zygote: Zygote | None = None):
        self.spec, self.started = spec, time.monotonic()
        self.start_s: float | None = None  # how long its start-up took, once it is ready
        self._worker: Worker | None = Worker(spec, connect=False, zygote=zygote)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, name="fuzzrunner-standby", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            assert self._worker is not None
            self._worker.connect()
            self.start_s = time.monotonic() - self.started
        except BaseException as e:  # noqa: B036 - handed to whoever takes the spare
            self._worker, self._error = None, e

    def take(self, by: float = math.inf) -> Worker:
        """The started worker (waiting for its start-up); ``StartCut`` if it is not ready by ``by``."""
        self._thread.join(None if by == math.inf else max(0.0, by - time.monotonic()))
        if self._thread.is_alive():
            self.discard()
            raise StartCut("the campaign's deadline came while the spare worker was starting")
        if self._error is not None:
            raise self._error
        assert self._worker is not None
        return self._worker

    def discard(self) -> None:
        worker = self._worker
        if worker is not None and self._thread.is_alive():
            worker.kill()  # still starting (a CUDA start-up takes seconds): no need to wait for it
        self._thread.join()
        if self._worker is not None:
            self._worker.close()
