"""Several shards of one campaign, one process (and one worker, one GPU) each, merged at the end.

Shards share the corpus directory (each write is atomic and merges with what is there) and
the example database. Each shard process dies with the campaign process (lifeline), and a
SIGTERM/SIGINT reaching the campaign stops the shards cleanly: each returns what it found.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import replace

from ..errors import HarnessError
from ..finding import Finding, merge_all
from ..text import describe
from . import events
from . import result as R
from .plan import CampaignPlan
from .processes import exit_now
from .result import CampaignResult
from .stages import merged

SHUTDOWN_WAIT_S = 60.0
_STILL_LOADING = ("a shard had not begun its search (its start, the target's imports) when the {s:g} s budget's "
                  "search time ran out: it was stopped before its first case (a larger --budget, or fewer "
                  "--workers on a busy machine, gives every shard its search)")
_AT_START = {signal.SIGINT, signal.SIGTERM}  # blocked while a shard process starts (run_sharded)


def _shard_process(queue, parent: int, plan: CampaignPlan, index: int, quota: int, findings_seen=None,
                   loaded=None) -> None:
    from .lifeline import die_with, sigterm_as_interrupt
    from .prestart import drop_prestarted, prestart_zygote
    # A terminal's Ctrl-C reaches the whole process group: the campaign process decides and stops each
    # shard once (SIGTERM, ``run_sharded``); a shard taking the SIGINT too would have that SIGTERM land in
    # its clean-up, and its result would be lost. SIGINT goes to a handler that does nothing (not SIG_IGN,
    # which the processes it starts would keep). The shard started with SIGINT and SIGTERM blocked
    # (``run_sharded``): a SIGTERM that came before its handler was in place is taken now, as an interrupt.
    # A closed terminal's SIGHUP reaches the group too: the campaign process stops the shards for it as well.
    signal.signal(signal.SIGINT, lambda *_: None)
    signal.signal(signal.SIGHUP, lambda *_: None)
    die_with(parent)
    sigterm_as_interrupt()
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _AT_START)
        # The worker's zygote imports torch, Triton and the target while this process imports them too
        # (run_shard loads the target): seconds of every shard's start, once rather than one after the other.
        prestart_zygote(plan.worker(index))
        from .shard_run import run_shard
        res = run_shard(plan, index, quota, lambda e: queue.put(e.to_dict()), findings_seen=findings_seen,
                        on_loaded=None if loaded is None else loaded.set)
        queue.put(events.ShardDone(res).to_dict())
    except KeyboardInterrupt:  # stopped before its search began (importing the target): nothing found, no failure
        res = CampaignResult(plan.target_name, plan.settings, plan.seed, plan.faults)
        res.stop_reason = R.StopReason.INTERRUPTED
        if plan.deadline is not None and time.time() >= plan.deadline.search_end(triage=False):
            res.stop_reason = R.StopReason.BUDGET  # cut by the campaign (``_cut_starting``), not by a user
            res.warnings.append(_STILL_LOADING.format(s=plan.deadline.budget_s))
        queue.put(events.ShardDone(res).to_dict())
    except BaseException as e:  # noqa: B036 - report, never hang the parent
        queue.put(events.ShardError(describe(e, 2000)).to_dict())
    finally:
        drop_prestarted()


def _shard_main(queue, parent: int, plan: CampaignPlan, index: int, quota: int, findings_seen=None,
                loaded=None) -> None:
    """A shard process: its shard, then its end once the result is in the pipe. Left to multiprocessing, it would
    wait for every non-daemon thread, and one the target started at its import never ends (issue 47); and an
    interpreter's own exit after torch's import (seconds on a busy machine: benchmarks/budget_overrun.py) is
    of no use to anyone."""
    _shard_process(queue, parent, plan, index, quota, findings_seen, loaded)
    end_shard(queue)


def end_shard(queue) -> None:
    """End this shard process once what it put on ``queue`` is in the pipe."""
    queue.close()
    queue.join_thread()
    exit_now(0)


class Merger:
    """Events and results of all shards, as one campaign's (local shard processes or Ray actors)."""

    def __init__(self, n: int, on_event, result: CampaignResult, *, started: float | None = None):
        """``started``: when the shards were started (monotonic, this host): a shard's result that comes later
        than its own duration is that much shard start (``shard-start``: the process, its imports)."""
        self.totals, self.generated = [0] * n, [0] * n
        self.started = started
        self.seen: dict[str, Finding] = {}
        self.warned: set[str] = set()  # each shard says the same warning (e.g. the pre-check is off): say it once
        self.on_event, self.result = on_event, result
        self.handlers = {events.ProgressEvent: self._progress, events.WarningEvent: self._warning,
                         events.FindingEvent: self._finding, events.RegressionEvent: self._regression}

    def event(self, e: events.Event) -> None:
        """A shard's campaign event (read back with ``Event.from_dict``), as the campaign's: counts summed,
        each finding and warning said once."""
        said = events.dispatch(self.handlers, e, default=lambda e: e)  # another event: passed on as it is
        if said is not None and self.on_event:
            self.on_event(said)

    def _progress(self, e: events.ProgressEvent) -> events.ProgressEvent:
        self.totals[e.shard], self.generated[e.shard] = e.examples, e.generated
        return replace(e, examples=sum(self.totals), generated=sum(self.generated), findings=len(self.seen))

    def _warning(self, e: events.WarningEvent) -> events.WarningEvent | None:
        if e.message in self.warned:
            return None
        self.warned.add(e.message)
        return e

    def _finding(self, e: events.FindingEvent) -> events.FindingEvent | None:
        if e.finding.id in self.seen:
            return None
        self.seen[e.finding.id] = e.finding
        return e

    def _regression(self, e: events.RegressionEvent) -> events.RegressionEvent:
        self.seen.setdefault(e.finding.id, e.finding)
        return e

    def done(self, r: CampaignResult) -> None:
        into = self.result
        for name in ("examples", "generated", "invalid", "worker_restarts", "worker_recycles", "budget_cut_cases",
                     "worker_s"):
            setattr(into, name, getattr(into, name) + getattr(r, name))
        for cause, c in getattr(r, "known_crash_causes", {}).items():  # every skip is counted under its cause
            into.count_known_crash_skip(cause, c["short"], c["count"])
        for sig, c in getattr(r, "tool_limitations", {}).items():
            into.count_limitation(sig, c["message"], c["count"])
        for name in ("replayed", "quarantined", "unsupported", "errors"):
            getattr(into, name).extend(getattr(r, name))
        into.warnings += [w for w in r.warnings if w not in into.warnings]  # each shard says it once
        into.timeline = _merge_timelines(into.timeline, r.timeline)
        into.coverage.merge(r.coverage)
        into.stage_s = merged(into.stage_s, getattr(r, "stage_s", {}))
        if self.started is not None:
            into.stage_s = merged(into.stage_s, {"shard-start": max(0.0, time.monotonic() - self.started
                                                                     - r.duration_s)})
        into.flaky += [f for f in r.flaky if all(f.id != g.id for g in into.flaky)]
        into.findings = merge_all(into.findings, list(r.findings))
        into.stop_reason = R.StopReason.of_shards(into.stop_reason, r.stop_reason)


def run_sharded(plan: CampaignPlan, on_event) -> CampaignResult:
    if plan.database is not None:
        raise HarnessError("a plugged-in Hypothesis database object cannot travel to shard processes; "
                           "with workers > 1 pass corpus_dir (each shard opens the corpus database).")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    quotas = plan.quotas()
    seen = ctx.Event()  # any shard has a finding: every shard leaves the deadline room for its triage
    loaded = [ctx.Event() for _ in quotas]  # each shard's target is loaded: its search has begun
    procs = [ctx.Process(target=_shard_main, args=(queue, os.getpid(), plan, i, quota, seen, loaded[i]),
                         daemon=True)
             for i, quota in enumerate(quotas)]
    # Each shard starts with SIGINT and SIGTERM blocked (a mask outlives exec): either, during its
    # interpreter's start, would end it before it could report (``_shard_process`` takes them once its
    # handlers are in place). Here a Ctrl-C meanwhile waits until the shards are started.
    merged = CampaignResult(plan.target_name, plan.settings, plan.seed, plan.faults)
    start = time.monotonic()
    merger = Merger(len(procs), _noting_findings(on_event, seen), merged, started=start)
    try:
        with _signals_held():  # a Ctrl-C that came meanwhile is raised as it ends
            for p in procs:
                p.start()
        _collect(queue, procs, merger, cut=_cut_starting(plan, procs, loaded))
    except KeyboardInterrupt:
        for p in procs:
            if p.is_alive():
                p.terminate()  # SIGTERM: each shard stops its search and reports
        _collect(queue, procs, merger, deadline=time.monotonic() + SHUTDOWN_WAIT_S)
        merged.stop_reason = R.StopReason.INTERRUPTED
    finally:
        try:
            _end(procs)
        except KeyboardInterrupt:  # a stop signal as the shards end: their results are in, and kept
            merged.stop_reason = R.StopReason.INTERRUPTED
            _end(procs, wait_s=0)
    merged.duration_s = time.monotonic() - start
    return merged


def _noting_findings(on_event, seen):
    """``on_event``, which also sets ``seen`` at the campaign's first finding."""
    def relay(e: events.Event) -> None:
        if isinstance(e, events.FindingEvent):
            seen.set()
        if on_event is not None:
            on_event(e)
    return relay


def _end(procs, wait_s: float = 5.0) -> None:
    """Each started shard process joined (``wait_s`` each at most), else killed."""
    for p in procs:
        if p.pid is None:  # never started (a start failed)
            continue
        p.join(timeout=wait_s)
        if p.is_alive():
            p.kill()
            p.join()


@contextmanager
def _signals_held():
    """SIGINT and SIGTERM wait while shard processes start: blocked on this thread (the children start with
    its mask) and, since one delivered to another thread of the process (a progress display's) still runs its
    Python handler on this one, noted by handlers of their own (one interrupting ``Process.start`` cut the
    child's start-up data short: "died without reporting"); raised again, to the handlers before, at the end."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _AT_START)
    came: list = []
    try:
        before = {s: signal.signal(s, lambda signum, frame: came.append(signum)) for s in _AT_START}
    except ValueError:  # not the main thread: its handlers cannot be set, the mask alone holds them
        before = {}
    try:
        yield
    finally:
        for s, handler in before.items():
            if handler is not None:  # (None: set outside Python, left as it is)
                signal.signal(s, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for s in came:
            signal.raise_signal(s)


def _failed(message: str, shards: int) -> str:
    return f"a shard failed: {message}" if shards == 1 else f"{shards} shards failed: {message}"


def _cut_starting(plan: CampaignPlan, procs, loaded):
    """Called as the shards' results are awaited: once the plan's search time is over, each shard process still
    loading the target (an engine's imports: 175 s a shard on a busy 2-core machine, where a 120 s campaign of
    two shards then took 285 s) is stopped; it reports a budget stop (``_shard_process``). A shard whose search
    began keeps to the deadline itself (its cases, shrinking and triage are cut there)."""
    if plan.deadline is None:
        return None
    cut_at, done = plan.deadline.search_end(triage=False), set()

    def cut() -> None:
        if time.time() < cut_at:
            return
        for i, p in enumerate(procs):
            if i not in done and not loaded[i].is_set() and p.is_alive():
                done.add(i)
                p.terminate()  # SIGTERM: an interrupt in the shard, which reports and ends
    return cut


def _collect(queue, procs, merger: Merger, deadline: float | None = None, cut=None) -> None:
    """The shards' events and results until each has ended (or ``deadline``, ``time.monotonic()``); ``cut``
    is called about once a second meanwhile."""
    ended: list[events.Event] = []

    def done(e: events.ShardDone) -> None:
        ended.append(e)
        merger.done(e.result)

    failed: dict[str, int] = {}  # message -> shards that failed so: said once, counted

    def error(e: events.ShardError) -> None:
        ended.append(e)
        errors, message = merger.result.errors, e.message
        if message in failed:
            errors.remove(_failed(message, failed[message]))
        failed[message] = failed.get(message, 0) + 1
        errors.append(_failed(message, failed[message]))
    handlers = {events.ShardDone: done, events.ShardError: error}
    n = len(procs)
    while len(ended) < n and (deadline is None or time.monotonic() < deadline):
        if cut is not None:
            cut()
        try:
            e = queue.get(timeout=1.0)
        except Exception:
            if all(not p.is_alive() for p in procs) and queue.empty():
                merger.result.errors.append(f"{n - len(ended)} shard process(es) died without reporting")
                return
            continue
        events.dispatch(handlers, events.Event.from_dict(e), default=merger.event)


def _merge_timelines(a: list, b: list) -> list:
    """Two (elapsed, examples, findings) series -> one of running totals (a shard counts only its own)."""
    events = sorted([(t, 0, e, f) for t, e, f in a] + [(t, 1, e, f) for t, e, f in b])
    last, out = [(0, 0), (0, 0)], []
    for t, src, e, f in events:
        last[src] = (e, f)
        out.append((t, last[0][0] + last[1][0], last[0][1] + last[1][1]))
    return out
