"""The hub: owns worker processes, sends them cases, and turns their deaths into findings.

A worker that segfaults, hits an illegal address, calls ``os._exit`` or is killed
for memory becomes a ``crash`` violation blamed on the case (and op, and last kernel
launch) it was running; one that outlives the per-case timeout is killed and becomes
a ``timeout``. Either way a warm standby worker (started in the background, target
imported, device initialized) takes over at once, so a crash costs a hand-over, not a
start-up. A worker that cannot even start is a harness error, never a finding.
"""

from __future__ import annotations

import math
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from .. import names
from ..case import Case
from ..context import Context
from ..errors import HarnessError, InvalidCase, TargetError
from ..target import describe_code
from ..violation import Violation, raised_cuda_error
from . import protocol
from .forking import ForkedProcess, StartCut, Zygote
from .lifeline import alive
from .rss import RssWatch

STARTUP_TIMEOUT_S = 300.0  # torch import, CUDA init, sanitizer start-up
MAX_FAILED_STARTS = 3
SETTLE_S = 10.0            # a wrapper (compute-sanitizer) prints its last reports after its worker dies
LOG_CAP = 8 << 20          # a worker's own log past this is cut (its tail is kept for crash messages)
THREAD_GRACE_S = 2.0       # a run that waits for a case's threads (a rerun, a replay) waits at most this long


DIR_PREFIX = "fzr-hub-"
SOCKET_PATH_MAX = 100  # AF_UNIX socket paths are limited to 107 bytes on Linux


def _hub_dir() -> str:
    """A fresh temp dir for a worker's socket and log, named after this process; under /tmp if
    ``TMPDIR`` is so deep that the socket path would be too long for AF_UNIX."""
    d = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")
    if len(os.fsencode(os.path.join(d, "s"))) > SOCKET_PATH_MAX:  # bytes: TMPDIR may not be UTF-8
        shutil.rmtree(d, ignore_errors=True)
        d = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir="/tmp")
    return d


def sweep_stale_dirs() -> None:
    """Remove the temp dirs of hubs whose process is gone (a ``kill -9`` gives no chance to clean
    up; the next hub on the machine does it). A dir is named ``fzr-hub-<pid>-<random>``."""
    for root in {tempfile.gettempdir(), "/tmp"}:
        try:
            names = [n for n in os.listdir(root) if n.startswith(DIR_PREFIX)]
        except OSError:
            continue
        for name in names:
            pid = name[len(DIR_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


@dataclass
class WorkerSpec:
    target: str
    context: Context = field(default_factory=lambda: Context.of("cpu"))  # the worker's: device, GPU, modes
    wrapper: list = field(default_factory=list)  # e.g. compute-sanitizer argv prefix
    env: dict = field(default_factory=dict)
    log_path: str | None = None             # keep the worker's stdout+stderr here (else a temp file, deleted)
    max_rss_mb: float | None = None         # recycle a worker past this resident size (else: rss.py's default)
    code: dict = field(default_factory=dict)  # the code under test the campaign loaded: a worker must load the same

    @property
    def device(self) -> str:
        return self.context.device

    @property
    def sanitizer(self) -> str | None:
        return self.context.sanitizer if self.context.sanitizer != "none" else None


RERUN_MIN_S = 30.0  # a lost context is run again (blocking) only with at least this much budget left


@dataclass
class Earlier:
    """A case the worker ran before, whose threads still ran after it returned (case_threads.py)."""
    case: Case
    case_no: int                            # the worker's count
    threads: list                           # the names of its threads still running, as last reported
    violations: list = field(default_factory=list)  # what one of them raised since (``protocol.Late``)


@dataclass
class DeathBetween:
    """The worker was found dead before a case was sent to it: no case of its was running."""
    how: str                                # "exit status 7", "SIGKILL (a signal fuzzrunner did not send...)"
    suspects: list                          # Earlier: cases whose threads still ran, else its last case


@dataclass
class RunResult:
    violations: list
    seconds: float
    crashed: bool = False
    case_no: int = 0                        # the worker's own count (for sanitizer markers)
    log: str = ""                           # the worker's output during this case (sanitized workers)
    budget_cut: bool = False                # the campaign's time ran out mid-case: stopped, not a finding
    recycled: str = ""                      # why the worker was recycled after this case (its memory grew)
    confirmed: bool = False                 # its crash happened again in a fresh worker, launching blocking:
    #                                         these are that run's violations (they name the right kernel)
    late: list = field(default_factory=list)      # Earlier cases whose threads raised meanwhile (their crashes)
    suspects: list = field(default_factory=list)  # crashed: Earlier cases whose threads still ran in the worker
    died_before: DeathBetween | None = None  # the worker was found dead before this case (a fresh one ran it)


# Signals a process does not send itself by faulting: someone else ended it.
_OUTSIDE_SIGNALS = {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}


def _signal_name(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def worker_environment(spec: WorkerSpec, socket_path: str) -> dict:
    """A worker's (or its zygote's) environment: ours, the spec's, and its start-up (``WorkerEnv``)."""
    start = protocol.WorkerEnv(spec.target, spec.context, hub_socket=socket_path, parent=os.getpid(),
                               extra={**spec.env, "PYTHONUNBUFFERED": "1"})
    env = start.environ(dict(os.environ))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    # torch.compile's compile workers would be processes a case started, ended after it (processes.py): compile
    # in the worker itself, unless the user says otherwise
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


_EARLY: list[tuple[WorkerSpec, Zygote]] = []  # zygotes started ahead of their hub (``prestart_zygote``), not taken


def prestart_zygote(spec: WorkerSpec) -> None:
    """Start now, without waiting for it, the zygote that a hub made later in this process for ``spec``
    forks its workers from: its imports (seconds: torch, Triton, the target) run while this process
    does its own (a shard process: the target, Hypothesis, the corpus). The first hub for ``spec`` takes
    it; one that no hub takes is closed at ``drop_prestarted``. Nothing is started where the hub would
    start no zygote. The environment it was started with lacks what this process's own imports set
    later (a target that sets variables when imported, ``_env.configure``): the zygote's imports, the
    same ones, set those in its own (and its workers'), as they would in a zygote started later."""
    if spec.wrapper or not hasattr(os, "pidfd_open"):
        return
    try:  # (wait=False: nothing to hand-shake yet; a Zygote that cannot start removes its folder)
        _EARLY.append((spec, Zygote(worker_environment(spec, ""), _hub_dir(), STARTUP_TIMEOUT_S, wait=False)))
    except OSError:
        pass  # the hub starts its own when it needs one


def _take_prestarted(spec: WorkerSpec) -> Zygote | None:
    """The zygote started ahead for ``spec``, also one that has ended: its hand-shake (at the first fork)
    says why it cannot serve, and the hub starts its workers directly, not another zygote that would
    end the same way (a target that cannot be imported in a worker)."""
    for i, (s, z) in enumerate(_EARLY):
        if s == spec:
            del _EARLY[i]
            return z
    return None


def drop_prestarted() -> None:
    """Close the zygotes started ahead that no hub took."""
    while _EARLY:
        _EARLY.pop()[1].close()


class _Progress:
    """What the worker said during one case: the op and the last kernel launch."""

    def __init__(self):
        self.op: tuple | None = None
        self.kernel, self.where = "", ""
        self.partial: list = []
        self.waiting: list | None = None  # its ops are done: the worker waits for these threads of it
        self.thread_errors: list = []     # what its threads raised, said apart from its result (``Late``)
        self.late: list = []              # Earlier cases whose threads raised meanwhile


class Worker:
    """One live worker process."""

    def __init__(self, spec: WorkerSpec, *, connect: bool = True, zygote: Zygote | None = None,
                 by: float = math.inf):
        """Start the process (forked by ``zygote`` if given); with ``connect`` also wait for its
        hand-shake (else call ``connect``), until ``by`` at most (see ``connect``)."""
        self.spec = spec
        self.sock: socket.socket | None = None
        self._dir = _hub_dir()
        self.path = os.path.join(self._dir, "s")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.log_path = spec.log_path or os.path.join(self._dir, "worker.log")
        self._log = open(self.log_path, "ab")
        self.killed = False          # we sent the kill (timeout, shutdown): not an outside signal
        self.busy = False            # a case was sent and its result not read (e.g. interrupted mid-case)
        self.case_no = 0
        self.cases: dict[int, Case] = {}         # by the worker's count: its last case, and those of lingering threads
        self.lingering: dict[int, list] = {}     # case number -> its threads still running, as last reported
        self.rss = RssWatch(spec.max_rss_mb)
        self.proc: subprocess.Popen | ForkedProcess
        try:
            if zygote is not None:
                self.proc = zygote.fork(self.path, self.log_path, by)
            else:
                self.proc = subprocess.Popen([*spec.wrapper, sys.executable, "-m", "fuzzrunner.engine.worker"],
                                             env=worker_environment(spec, self.path), stdout=self._log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True)
        except BaseException:
            self._log.close()
            self.server.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        if connect:
            self.connect(by)

    def connect(self, by: float = math.inf) -> None:
        """Wait for the worker's ``ready`` (a harness error, and the process gone, if it never comes;
        ``StartCut``, and the process gone, if it has not come by ``by``: monotonic, a campaign's deadline)."""
        try:
            self.sock = self._accept(by)
        except BaseException:
            self.close()
            raise

    def _accept(self, by: float = math.inf) -> socket.socket:
        deadline = min(time.monotonic() + STARTUP_TIMEOUT_S, by)
        conn = protocol.accept(self.server, self.proc, deadline)
        if conn is None and self.proc.poll() is None and time.monotonic() >= by:
            raise StartCut("the campaign's deadline came while the worker was starting")
        if conn is None and self.proc.poll() is not None:
            raise HarnessError(f"worker exited during start-up ({_signal_name(self.proc.returncode)}); "
                               f"its output: {self.shown_tail()}")
        if conn is None:
            raise HarnessError(f"worker did not start within {STARTUP_TIMEOUT_S:.0f} s; its output: "
                               f"{self.shown_tail()}")
        msg = self._recv(conn, deadline - time.monotonic())
        if msg is None and self.proc.poll() is None and time.monotonic() >= by:
            conn.close()
            raise StartCut("the campaign's deadline came while the worker was setting up its target")
        if not isinstance(msg, protocol.Ready):
            conn.close()
            detail = getattr(msg, "message", "") or f"it died ({_signal_name(self.proc.poll())})"
            raise HarnessError(f"worker could not set up target {self.spec.target!r}: {detail}. {self.shown_tail()}")
        if self.spec.code and msg.code != self.spec.code:  # another tree, another patch: it would test other code
            conn.close()
            raise HarnessError(f"the worker loaded other code than the campaign: {describe_code(msg.code)}, not "
                               f"{describe_code(self.spec.code)} (its environment differs: the engine's variables, "
                               f"the working directory of a relative path, another machine's tree).")
        return conn

    # -- the log ------------------------------------------------------------------------
    def tail(self, n: int = 600) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - n))
                return f.read().decode(errors="replace").strip().replace("\n", " | ")
        except OSError:
            return ""

    def shown_tail(self, n: int = 600) -> str:
        """The log's tail for a message: the worker's own marker lines (``@@fuzzrunner-...@@``) left out."""
        raw = self.tail(n + 2000).replace(" | ", "\n")
        text = " | ".join(line for line in raw.splitlines() if not _MARKER_LINE.fullmatch(line.strip()))
        return text[-n:]

    def log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log_text(self, start: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")

    def cut_log(self, limit: int = 0) -> None:
        """Empty the log once it is past ``limit`` bytes, keeping its tail (the worker appends)."""
        if self.log_size() <= limit:
            return
        keep = self.tail(4000).replace(" | ", "\n")
        with open(self.log_path, "r+b") as f:
            f.truncate(0)
        with open(self.log_path, "ab") as f:
            f.write(f"[fuzzrunner: log cut at {limit} bytes]\n{keep}\n".encode())

    # -- one case -----------------------------------------------------------------------
    def _recv(self, conn, timeout: float):
        r, _, _ = select.select([conn], [], [], max(timeout, 0))
        if not r:
            return None
        try:
            return protocol.recv(conn, protocol.FROM_WORKER)
        except (ConnectionError, OSError, ValueError):
            return None

    def run(self, case: Case, oracles, timeout_s: float, stop_early: bool = False,
            cut_at: float = math.inf, linger_s: float = 0.0) -> RunResult:
        """Run one case; a death or a hang comes back as a crash/timeout violation. At ``cut_at``
        (monotonic: the campaign's budget runs out) a case still running is stopped, the worker
        killed, and the result says ``budget_cut``: the case did not run past its timeout.
        ``linger_s``: the worker then waits up to this long for the threads the case started."""
        start_log, t0 = self.log_size(), time.monotonic()
        self.case_no += 1
        self.cases[self.case_no] = case
        self.busy = True  # until the case's end is read: an interrupted wait leaves the worker mid-case
        seen, deadline = _Progress(), t0 + timeout_s + linger_s
        try:
            protocol.send(self.sock, protocol.Run(case.to_dict(), list(oracles) if oracles is not None else None,  # type: ignore[arg-type]
                                                  stop_early, linger_s))
        except OSError:  # it died just now; a fresh worker reruns the case before it counts
            return self._died(seen, False, timeout_s, start_log, t0)
        while True:
            msg = self._recv(self.sock, min(1.0, deadline - time.monotonic(), cut_at - time.monotonic()))
            if msg is None:
                now = time.monotonic()
                if self.proc.poll() is None and now < deadline and now < cut_at:
                    if not self.spec.sanitizer:
                        self.cut_log(LOG_CAP)  # a chatty target cannot fill the disk
                    continue
                if self.proc.poll() is None and now < deadline:
                    self.kill()
                    return RunResult([], now - t0, True, self.case_no, budget_cut=True)
                return self._died(seen, now >= deadline, timeout_s, start_log, t0)
            done = self._handle(msg, seen)
            if done is not None:
                self.busy = False
                vs, fatal = done
                if fatal and self.spec.wrapper:
                    self._settle()  # the sanitizer prints its last reports as the worker exits
                elif fatal:
                    self.kill()  # its result is in; a lost CUDA context can take seconds to tear down
                else:
                    self._await_end_marker(start_log)
                return RunResult(vs + seen.thread_errors, time.monotonic() - t0, fatal, self.case_no,
                                 self._case_log(start_log), late=seen.late)

    def _handle(self, msg: protocol.Message, seen: _Progress):
        """Take one message (``protocol.FROM_WORKER``); ``(violations, fatal)`` when the case is over."""
        handler: Any = _CASE_HANDLERS[type(msg)]
        return handler(self, msg, seen)

    def _on_op(self, msg: protocol.Op, seen: _Progress) -> None:
        seen.op, seen.kernel, seen.where = (msg.index, msg.op), "", ""

    def _on_launch(self, msg: protocol.Launch, seen: _Progress) -> None:
        seen.kernel, seen.where = msg.kernel, msg.where

    def _on_partial(self, msg: protocol.Partial, seen: _Progress) -> None:
        seen.partial = [Violation.from_dict(d) for d in msg.violations]

    def _on_waiting(self, msg: protocol.Waiting, seen: _Progress) -> None:
        seen.waiting = list(msg.threads)

    def _on_late(self, msg: protocol.Late, seen: _Progress) -> None:
        vs = [Violation.from_dict(d) for d in msg.violations]
        if msg.case_no == self.case_no:
            seen.thread_errors += vs
        elif msg.case_no in self.cases:
            seen.late.append(Earlier(self.cases[msg.case_no], msg.case_no, self.lingering.get(msg.case_no, []), vs))

    def _on_result(self, msg: protocol.Result, seen: _Progress) -> tuple[list, bool]:
        self.lingering = {int(n): list(names) for n, names in msg.lingering}
        self.cases = {n: c for n, c in self.cases.items() if n in self.lingering or n == self.case_no}
        return [Violation.from_dict(d) for d in msg.violations], msg.fatal

    def _on_invalid(self, msg: protocol.Invalid, seen: _Progress):
        self.busy = False
        raise InvalidCase(msg.message)

    def _on_target_failed(self, msg: protocol.TargetFailed, seen: _Progress):
        self.busy = False
        raise TargetError(msg.message)

    def _on_harness(self, msg: protocol.Harness, seen: _Progress):
        self.kill()
        raise HarnessError(f"worker failed outside the target: {msg.message}\n{msg.traceback}")

    def _on_ready(self, msg: protocol.Ready, seen: _Progress):
        raise HarnessError("the worker said 'ready' again in the middle of a case")

    def _case_log(self, start: int) -> str:
        return self.log_text(start) if self.spec.sanitizer else ""

    def _died(self, seen: _Progress, timed_out: bool, timeout_s: float, start_log: int, t0: float) -> RunResult:
        if not timed_out and self.spec.wrapper:
            self._settle()
        if timed_out:
            self.kill()
        self._settle(0.5)
        v = self._death(timed_out, seen, timeout_s)
        return RunResult(seen.partial + seen.thread_errors + [v], time.monotonic() - t0, True, self.case_no,
                         self._case_log(start_log), late=seen.late, suspects=self.suspects(exclude=self.case_no))

    def suspects(self, exclude: int = 0) -> list[Earlier]:
        """The earlier cases whose threads still ran (as last reported), the latest first."""
        return [Earlier(self.cases[n], n, names) for n, names in sorted(self.lingering.items(), reverse=True)
                if n != exclude and n in self.cases]

    def death_between(self) -> DeathBetween:
        """The worker, found dead between cases: how, and whose it may be (cases whose threads still ran,
        else its last case)."""
        last = [Earlier(self.cases[self.case_no], self.case_no, [])] if self.case_no in self.cases else []
        return DeathBetween(self._how_it_died(), self.suspects() or last)

    def _how_it_died(self) -> str:
        code = self.proc.returncode
        outside = code is not None and -code in _OUTSIDE_SIGNALS and not self.killed
        return _signal_name(code) + (" (a signal fuzzrunner did not send: the OOM killer, the target itself, or "
                                     "someone else)" if outside else "")

    def _await_end_marker(self, start: int) -> None:
        """Under a wrapper, wait until the case's end marker is in the log.

        The result comes over the socket, the reports through the wrapper's stdout: the
        result can arrive first, and the case's reports must not be read before they are
        written (they would go to no case, and the case would pass).
        """
        if not self.spec.sanitizer:
            return
        marker = f"@@fuzzrunner-case-end {self.case_no}@@".encode()
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                if marker in f.read():
                    return
            time.sleep(0.002)

    def _settle(self, timeout: float = SETTLE_S) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass

    def _death(self, timed_out: bool, seen: _Progress, timeout_s: float) -> Violation:
        op = seen.op
        where = _when(op, seen.waiting)
        last = f", last kernel launch {seen.kernel} from {seen.where}" if seen.kernel else ""
        details = {"op_index": op[0] if op else None, "op": op[1] if op else None,
                   "last_kernel": seen.kernel, "launch_site": seen.where}
        if seen.waiting is not None:
            details["threads"] = seen.waiting
        if timed_out:
            return Violation("worker", "timeout", seen.kernel or (op[1] if op else ""), "", "",
                             f"the case ran past the {timeout_s:g} s timeout {where}{last}; the worker was killed",
                             details)
        code = self.proc.returncode
        how = _signal_name(code)
        outside = code is not None and -code in _OUTSIDE_SIGNALS and not self.killed
        output = self.shown_tail(400)
        return Violation("worker", "crash", seen.kernel or (op[1] if op else ""), how, "",
                         f"the worker died with {self._how_it_died()} {where}{last}."
                         + (f" Output: {output}" if output else ""),
                         {**details, "exit": how, "external_signal": outside})

    # -- shutdown -----------------------------------------------------------------------
    def kill(self) -> None:
        """Kill the worker and its whole process group: what the target forked dies with it, also once the
        worker itself has ended (a clean exit or a crash leaves the group's other members running)."""
        self.killed = True
        alive = self.proc.poll() is None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if alive:
                self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        """Ask the worker to exit (a worker still mid-case would finish it first: it is killed)."""
        if self.proc.poll() is None and getattr(self, "sock", None) is not None and not self.busy:
            try:
                protocol.send(self.sock, protocol.Exit())  # type: ignore[arg-type]
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        for s in (getattr(self, "sock", None), self.server):
            if s is not None:
                s.close()
        self._log.close()
        if self.spec.log_path:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        shutil.rmtree(self._dir, ignore_errors=True)


# One handler per message a worker sends during a case (``protocol.FROM_WORKER``).
_CASE_HANDLERS = {protocol.Op: Worker._on_op, protocol.Launch: Worker._on_launch, protocol.Partial: Worker._on_partial,
                  protocol.Waiting: Worker._on_waiting, protocol.Late: Worker._on_late,
                  protocol.Result: Worker._on_result, protocol.Invalid: Worker._on_invalid,
                  protocol.TargetFailed: Worker._on_target_failed, protocol.Harness: Worker._on_harness,
                  protocol.Ready: Worker._on_ready}

_MARKER_LINE = re.compile(r"@@fuzzrunner-[a-z-]+ [^@]*@@")  # the worker's case and tensor markers (worker.py)


def _when(op: tuple | None, waiting: list | None) -> str:
    """Where in its case a worker was, as a phrase: "in op 2 (dummy_run)", "before its first op", "after its
    ops returned, waiting for its thread 'loader'"."""
    if waiting is not None:
        threads = ", ".join(repr(t) for t in waiting)
        return (f"after the case returned{f' (last op {op[0]}, {op[1]})' if op else ''}, while waiting for "
                + (f"the thread{'s' * (len(waiting) != 1)} it started ({threads})" if waiting else "its threads"))
    return f"in op {op[0]} ({op[1]})" if op else "before the case's first op"


class _Standby:
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
        self._spares: list[_Standby] = []
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
                self._zygote = (_take_prestarted(self.spec)
                                or Zygote(worker_environment(self.spec, ""), _hub_dir(), STARTUP_TIMEOUT_S, wait=False))
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

    def _take_spare(self) -> _Standby | None:
        """The spare closest to ready (the oldest), if any."""
        return self._spares.pop(0) if self._spares else None

    def _measured(self, seconds: float | None) -> None:
        if seconds is not None:
            self._start_s = seconds if self._start_s is None else 0.5 * (self._start_s + seconds)

    def wanted_spares(self) -> int:
        """One, plus enough that a spare is ready by the next death at the recent rate of deaths."""
        if not self.standby:
            return 0
        recent = self._deaths[-5:]
        if len(recent) < 2:
            return 1
        interval = max((recent[-1] - recent[0]) / (len(recent) - 1), 1e-3)
        return max(1, min(self.max_spares, math.ceil((self._start_s or 3.0) / interval)))

    def _ensure(self, by: float = math.inf) -> Worker:
        """The worker, started if needed (``StartCut`` if its start-up is not over by ``by``), and its spares."""
        if self.worker is None:
            self.worker = self._new_worker(by)
        while len(self._spares) < self.wanted_spares():
            self._spares.append(_Standby(self.spec, self._forker()))
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

    def _named_by_blocking_rerun(self, case: Case, result: RunResult, cut_at: float) -> RunResult:
        """A case that lost the CUDA context, run again in a fresh worker whose launches block.

        GPU workers launch asynchronously, so the error that broke the context surfaces at a later
        launch or synchronisation, and "the last kernel launch" can name a kernel after the culprit.
        With ``CUDA_LAUNCH_BLOCKING=1`` it surfaces at the launch that caused it. When the rerun loses
        its context too, its violations stand for the case and it is the crash's confirmation in a
        fresh worker (``confirmed``); otherwise the first run's are kept, as they are. The rerun only
        names the kernel better: when it cannot run (its worker does not start, the budget is nearly
        spent), the first run's report stands. Deaths by a signal and hangs are not run again here
        (they carry no lost context): the shard confirms them as any death, named by the last launch."""
        if self.spec.device != "cuda":
            return result
        blocking = self._launches_blocking  # a sanitizer's, or the user's
        if not any(names.tool(v.tool).context_lost for v in result.violations):  # a signal, a hang: no rerun
            return _launched(result, "blocking" if blocking else "asynchronous: a death by a signal or a hang is "
                                                                 "not run again")
        if self.rerun_error:
            return _launched(result, f"asynchronous: no blocking rerun ({self.rerun_error})")
        if not self._rerun_blocking:
            return _launched(result, "blocking" if blocking else
                             "asynchronous: no blocking rerun (the workers run under a wrapper)")
        if cut_at - time.monotonic() < RERUN_MIN_S:  # a worker's start-up would overrun the budget
            return _launched(result, f"asynchronous: no blocking rerun (under {RERUN_MIN_S:g} s of the budget left)")
        if self._blocking is None:  # no spares, its own zygote: made at the first such case
            env = {**self.spec.env, "CUDA_LAUNCH_BLOCKING": "1"}
            self._blocking = Hub(replace(self.spec, env=env), oracles=self.oracles, timeout_s=self.timeout_s,
                                 max_restarts=self.max_restarts, standby=False, stop_early=self.stop_early,
                                 zygote=self._use_zygote)
        self._blocking.timeout_s = self.timeout_s
        try:
            again = self._blocking.run(case, cut_at)
        except InvalidCase:  # this case only (the target refused it there): reruns go on
            return _launched(result, "asynchronous: the blocking rerun's target refused the case")
        except Exception as e:  # noqa: BLE001 - whatever stops the rerun, nothing found is lost
            self._stop_reruns(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
            return _launched(result, f"asynchronous: the blocking rerun failed ({self.rerun_error})")
        finally:
            if self._blocking is not None:
                self._blocking._retire()  # a rerun that did not crash leaves its worker: the next gets a fresh one
        self.reruns += 1
        result = replace(result, seconds=result.seconds + again.seconds)
        if again.budget_cut or not any(names.tool(v.tool).context_lost for v in again.violations):
            return _launched(result, f"asynchronous: the blocking rerun {_not_lost(again)}")
        return _launched(replace(again, seconds=result.seconds, confirmed=True), "blocking (the rerun)")

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


def _not_lost(again: RunResult) -> str:
    """Why a blocking rerun did not confirm a lost context, in a phrase."""
    if again.budget_cut:
        return "was cut by the budget"
    if again.crashed and again.violations:
        v = again.violations[0]
        return f"did not lose the context (it ended: {v.kind} in {v.kernel or '?'})"
    return "did not lose the context"


def _launched(result: RunResult, how: str) -> RunResult:
    """Say in each crash's details (a lost context, a death, a hang, a CUDA error raised) how the
    launches ran in the run it comes from:
    blocking (the rerun: the error surfaced at the launch that caused it) or asynchronous (and why no
    rerun named it), so a reader knows whether "the last kernel launch" is the culprit."""
    for v in result.violations:
        if names.tool(v.tool).process_death or raised_cuda_error(v):
            v.details["launches"] = how
    return result

