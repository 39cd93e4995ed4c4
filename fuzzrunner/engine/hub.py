"""The hub: owns worker processes, sends them cases, and turns their deaths into findings.

A worker that segfaults, hits an illegal address, calls ``os._exit`` or is killed
for memory becomes a ``crash`` violation blamed on the case (and op, and last kernel
launch) it was running; one that outlives the per-case timeout is killed and becomes
a ``timeout``. Either way a warm standby worker (started in the background, target
imported, device initialized) takes over at once, so a crash costs a hand-over, not a
start-up. A worker that cannot even start is a harness error, never a finding.

The hub's parts, each in its own module: what a worker is started with (worker_spec), zygotes
started ahead (prestart), the handle on one worker and its case's messages (worker_handle), its log
(worker_log), its death in words (worker_death), the result (run_result), warm spares (spares), and
the blocking rerun of a lost CUDA context (blocking_rerun).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace

from ..case import Case
from ..errors import HarnessError, InvalidCase
from .blocking_rerun import RERUN_MIN_S, launched, lost_context, not_lost, why_no_rerun
from .forking import StartCut, Zygote
from .prestart import _EARLY, drop_prestarted, prestart_zygote, zygote_for
from .run_result import DeathBetween, Earlier, RunResult
from .spares import Spare, wanted
from .worker_handle import Worker
from .worker_log import LOG_CAP
from .worker_spec import SOCKET_PATH_MAX, WorkerSpec, sweep_stale_dirs, worker_environment
from .worker_spec import hub_dir as _hub_dir

# Where callers and tests import them from: the hub's public names, wherever they are defined.
__all__ = ["Hub", "WorkerSpec", "RunResult", "Earlier", "DeathBetween", "Worker", "THREAD_GRACE_S", "LOG_CAP",
           "RERUN_MIN_S", "SOCKET_PATH_MAX", "worker_environment", "sweep_stale_dirs", "prestart_zygote",
           "drop_prestarted", "_EARLY", "_hub_dir"]

MAX_FAILED_STARTS = 3
HISTORY_CAP = 64           # a finding keeps at most this many of the cases its worker ran before it (the latest)
THREAD_GRACE_S = 2.0       # a run that waits for a case's threads (a rerun, a replay) waits at most this long


class Hub:
    """Keeps one worker alive for a shard (plus warm spares), replacing it after every death.

    Spares: none until asked for; then one, and as many more (up to ``max_spares``) as it takes for
    a started spare to be ready when the next death comes: a worker's start-up time over the time
    between recent deaths. A crash then costs a hand-over (tens of ms), not a start-up (seconds)."""

    def __init__(self, spec: WorkerSpec, *, oracles=None, timeout_s: float = 60.0, max_restarts: int = 1000,
                 standby: bool | None = None, max_spares: int | None = None, stop_early: bool = False,
                 zygote: bool | None = None):
        """``standby``: keep warm spare workers. None (the default): on a GPU from the start (a CUDA
        start-up costs seconds, and the host has cores to spare); on the CPU from the first death on
        (a spare competes for the few cores with the worker, so it is paid for only once crashes come).
        ``max_spares``: at most this many (default: 4 on a GPU, 2 on the CPU).
        ``stop_early``: each case ends after its first op with a violation (a pre-check's need).
        ``zygote``: fork workers from a process that did the imports once (engine/zygote.py), so
        that a new worker skips them. None (the default): whenever workers are not wrapped (a
        sanitizer must start its own process) and the platform has pidfds. If the zygote cannot
        serve (e.g. an import initialized CUDA), workers are started directly."""
        self.spec, self.oracles, self.timeout_s, self.max_restarts = spec, oracles, timeout_s, max_restarts
        self.stop_early = stop_early
        self._use_zygote = (not spec.wrapper and hasattr(os, "pidfd_open")) if zygote is None else zygote
        self._zygote: Zygote | None = None
        self.zygote_error: str | None = None  # why workers are started directly after all
        sweep_stale_dirs()  # what earlier hubs killed with -9 left behind
        self._auto_standby = standby is None
        self.standby = spec.device == "cuda" if standby is None else standby
        self.max_spares = max_spares if max_spares is not None else (4 if spec.device == "cuda" else 2)
        self.worker: Worker | None = None
        self._spares: list[Spare] = []
        self._deaths: list[float] = []        # monotonic times of the recent deaths
        self._start_s: float | None = None   # a worker's start-up, measured
        self.restarts = 0
        self.starts = 0
        self.recycles = 0                     # workers closed because their memory grew (rss.py)
        # A case that lost the CUDA context runs again in a worker launching blocking (its own hub,
        # made at the first such case), which names the kernel that broke it
        self._launches_blocking = {**os.environ, **spec.env}.get("CUDA_LAUNCH_BLOCKING") == "1"  # a sanitizer's
        self._rerun_blocking = spec.device == "cuda" and not spec.wrapper and not self._launches_blocking
        self._blocking: Hub | None = None
        self.reruns = 0                       # cases run again so (the confirmations of their crash)
        self.rerun_error: str | None = None   # why such reruns stopped (their workers could not start)
        # The cases the current worker ran, oldest first (the last HISTORY_CAP), and how many before those: a
        # finding can depend on what its worker's earlier cases left (a process-wide cache of an engine's); the
        # run in progress (``case``) and what ran before it in its worker (``preceding``) are kept for it
        self._ran: list[Case] = []
        self._ran_dropped = 0
        self._ran_in: Worker | None = None
        self.case: Case | None = None
        self.preceding: tuple[tuple[Case, ...], int] = ((), 0)

    def _new_worker(self, by: float = math.inf) -> Worker:
        failures = 0
        while True:
            try:
                spare, t0 = self._take_spare(), time.monotonic()
                worker = spare.take(by) if spare is not None else Worker(self.spec, zygote=self._forker(), by=by)
                self._measured(spare.start_s if spare is not None else time.monotonic() - t0)
                self.starts += 1
                return worker
            except HarnessError as e:
                if self._zygote is not None:  # a forked worker failed: try once more, started directly
                    self._drop_zygote(f"a forked worker failed: {e}")
                    continue
                failures += 1
                if failures >= MAX_FAILED_STARTS:
                    raise

    def _forker(self) -> Zygote | None:
        """The zygote to fork the next worker from (started now if needed), or None."""
        if not self._use_zygote:
            return None
        if self._zygote is not None and not self._zygote.alive():
            self._drop_zygote("the zygote died")
            return None
        if self._zygote is None:
            try:
                self._zygote = zygote_for(self.spec)
            except HarnessError as e:
                self._drop_zygote(str(e))
        return self._zygote

    def _drop_zygote(self, why: str) -> None:
        """From now on this hub starts its workers directly."""
        self._use_zygote, self.zygote_error = False, why
        self._discard_spares()
        self._close_zygote()

    def _discard_spares(self) -> None:
        for spare in self._spares:
            spare.discard()
        self._spares = []

    def _close_zygote(self) -> None:
        """Its forked workers die with it: close or drop them first."""
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def _take_spare(self) -> Spare | None:
        """The spare closest to ready (the oldest), if any."""
        return self._spares.pop(0) if self._spares else None

    def _measured(self, seconds: float | None) -> None:
        if seconds is not None:
            self._start_s = seconds if self._start_s is None else 0.5 * (self._start_s + seconds)

    def wanted_spares(self) -> int:
        """One, plus enough that a spare is ready by the next death at the recent rate of deaths."""
        return wanted(self._deaths, self._start_s, self.max_spares) if self.standby else 0

    def _ensure(self, by: float = math.inf) -> Worker:
        """The worker, started if needed (``StartCut`` if its start-up is not over by ``by``), and its spares."""
        if self.worker is None:
            self.worker = self._new_worker(by)
        while len(self._spares) < self.wanted_spares():
            self._spares.append(Spare(self.spec, self._forker()))
        return self.worker

    def run(self, case: Case, cut_at: float = math.inf, *, linger_s: float = 0.0, fresh: bool = False) -> RunResult:
        """Run ``case`` in the worker (``cut_at``: when the campaign's time runs out, see ``Worker.run``;
        ``linger_s``: how long the worker then waits for the case's threads). ``fresh``: in a new worker,
        where no thread of another case runs."""
        if fresh:
            self._retire()
        t0 = time.monotonic()
        try:  # a worker's start-up (seconds; a GPU engine's, tens) ends at the campaign's deadline too
            w = self._ensure(cut_at)
            died_before = None
            if w.proc.poll() is not None:  # it died between cases: no case was running (its suspects say whose)
                died_before = w.death_between()
                self._replace()
                w = self._ensure(cut_at)
        except StartCut:
            return RunResult([], time.monotonic() - t0, budget_cut=True)
        self._note_history(w, case)
        try:
            result = w.run(case, self.oracles, self.timeout_s, self.stop_early, cut_at, linger_s)
        except (InvalidCase, HarnessError):
            if w.proc.poll() is not None:
                self._replace()
            raise
        result.died_before = died_before
        if result.budget_cut:
            self._retire()
            return result
        tool = self.spec.sanitizer
        if tool:
            from ..sanitizer.session import violations_in_log  # only sanitized runs pay for the import
            result.violations += violations_in_log(result.log, result.case_no, tool=tool)
        if result.crashed:
            self._replace()
            return self._named_by_blocking_rerun(case, result, cut_at)
        w.cut_log(LOG_CAP)  # this case's reports are read: what is left is only the tail
        result.recycled = w.rss.check(w.proc.pid)
        if result.recycled:
            self.recycles += 1
            self._retire()
        return result

    def _note_history(self, worker: Worker, case: Case) -> None:
        """``preceding``: what ``worker`` ran before ``case`` (nothing in a new worker); then ``case`` is its last."""
        if worker is not self._ran_in:
            self._ran, self._ran_dropped, self._ran_in = [], 0, worker
        self.case, self.preceding = case, (tuple(self._ran), self._ran_dropped)
        self._ran.append(case)
        if len(self._ran) > HISTORY_CAP:
            del self._ran[0]
            self._ran_dropped += 1

    def _named_by_blocking_rerun(self, case: Case, result: RunResult, cut_at: float) -> RunResult:
        """A case that lost the CUDA context, run again in a fresh worker whose launches block (why:
        blocking_rerun.py). When the rerun loses its context too, its violations stand for the case and it
        is the crash's confirmation in a fresh worker (``confirmed``); otherwise the first run's are kept,
        as they are. The rerun only names the kernel better: when it cannot run (its worker does not
        start, the budget is nearly spent), the first run's report stands. Deaths by a signal and hangs
        are not run again here (they carry no lost context): the shard confirms them as any death, named
        by the last launch."""
        if self.spec.device != "cuda":
            return result
        why = why_no_rerun(result, blocking=self._launches_blocking, rerun_error=self.rerun_error,
                           can_rerun=self._rerun_blocking, left_s=cut_at - time.monotonic())
        if why is not None:
            return launched(result, why)
        if self._blocking is None:  # no spares, its own zygote: made at the first such case
            env = {**self.spec.env, "CUDA_LAUNCH_BLOCKING": "1"}
            self._blocking = Hub(replace(self.spec, env=env), oracles=self.oracles, timeout_s=self.timeout_s,
                                 max_restarts=self.max_restarts, standby=False, stop_early=self.stop_early,
                                 zygote=self._use_zygote)
        self._blocking.timeout_s = self.timeout_s
        try:
            again = self._blocking.run(case, cut_at)
        except InvalidCase:  # this case only (the target refused it there): reruns go on
            return launched(result, "asynchronous: the blocking rerun's target refused the case")
        except Exception as e:  # noqa: BLE001 - whatever stops the rerun, nothing found is lost
            self._stop_reruns(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
            return launched(result, f"asynchronous: the blocking rerun failed ({self.rerun_error})")
        finally:
            if self._blocking is not None:
                self._blocking._retire()  # a rerun that did not crash leaves its worker: the next gets a fresh one
        self.reruns += 1
        result = replace(result, seconds=result.seconds + again.seconds)
        if again.budget_cut or not lost_context(again):
            return launched(result, f"asynchronous: the blocking rerun {not_lost(again)}")
        return launched(replace(again, seconds=result.seconds, confirmed=True), "blocking (the rerun)")

    def _stop_reruns(self, why: str) -> None:
        """No more blocking reruns in this hub (said by the shard, once: ``rerun_error``)."""
        self._rerun_blocking, self.rerun_error = False, why
        if self._blocking is not None:
            self._blocking.close()
            self._blocking = None

    def _retire(self) -> None:
        """Close the worker between cases (not a death: no restart counted); the next case gets a fresh one."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def _replace(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        self.restarts += 1
        self._deaths = (self._deaths + [time.monotonic()])[-5:]
        self.standby = self.standby or self._auto_standby
        if self.restarts > self.max_restarts:
            raise HarnessError(f"workers were restarted {self.restarts} times (limit {self.max_restarts}); "
                               f"the target crashes on nearly every case: fix it or raise the limit.")

    def close(self) -> None:
        self._discard_spares()
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        self._close_zygote()
        if self._blocking is not None:
            self._blocking.close()
            self._blocking = None

    def __enter__(self) -> Hub:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
