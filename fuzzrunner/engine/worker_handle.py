"""The hub's handle on one live worker process: its start and hand-shake, one case's messages, its end.

A case's messages (``protocol.FROM_WORKER``) each have one handler (``_CASE_HANDLERS``); a worker that
dies or outlives the case's timeout comes back as a ``crash`` or ``timeout`` violation (worker_death.py)
in a ``RunResult`` (run_result.py). A worker that cannot even start is a ``HarnessError``, never a finding.
"""

from __future__ import annotations

import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from ..case import Case
from ..errors import HarnessError, InvalidCase, TargetError, UnsupportedCase
from ..target import describe_code
from ..violation import Violation
from . import protocol
from .forking import ForkedProcess, StartCut, Zygote
from .rss import RssWatch
from .run_result import DeathBetween, Earlier, RunResult
from .worker_death import Progress, crash_violation, how_it_died, signal_name, timeout_violation
from .worker_log import LOG_CAP, WorkerLog
from .worker_spec import STARTUP_TIMEOUT_S, WorkerSpec, hub_dir, worker_environment

SETTLE_S = 10.0            # a wrapper (compute-sanitizer) prints its last reports after its worker dies


class Worker(WorkerLog):
    """One live worker process."""

    def __init__(self, spec: WorkerSpec, *, connect: bool = True, zygote: Zygote | None = None,
                 by: float = math.inf):
        """Start the process (forked by ``zygote`` if given); with ``connect`` also wait for its
        hand-shake (else call ``connect``), until ``by`` at most (see ``connect``)."""
        self.spec = spec
        self.sock: socket.socket | None = None
        self._dir = hub_dir()
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
            raise HarnessError(f"worker exited during start-up ({signal_name(self.proc.returncode)}); "
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
            detail = getattr(msg, "message", "") or f"it died ({signal_name(self.proc.poll())})"
            raise HarnessError(f"worker could not set up target {self.spec.target!r}: {detail}. {self.shown_tail()}")
        if self.spec.code and msg.code != self.spec.code:  # another tree, another patch: it would test other code
            conn.close()
            raise HarnessError(f"the worker loaded other code than the campaign: {describe_code(msg.code)}, not "
                               f"{describe_code(self.spec.code)} (its environment differs: the engine's variables, "
                               f"the working directory of a relative path, another machine's tree).")
        return conn

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
        seen, deadline = Progress(), t0 + timeout_s + linger_s
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
                                 self._case_log(start_log), late=seen.late, stages=seen.stages)

    def _handle(self, msg: protocol.Message, seen: Progress):
        """Take one message (``protocol.FROM_WORKER``); ``(violations, fatal)`` when the case is over."""
        handler: Any = _CASE_HANDLERS[type(msg)]
        return handler(self, msg, seen)

    def _on_op(self, msg: protocol.Op, seen: Progress) -> None:
        seen.op, seen.kernel, seen.where = (msg.index, msg.op), "", ""

    def _on_launch(self, msg: protocol.Launch, seen: Progress) -> None:
        seen.kernel, seen.where = msg.kernel, msg.where

    def _on_partial(self, msg: protocol.Partial, seen: Progress) -> None:
        seen.partial = [Violation.from_dict(d) for d in msg.violations]

    def _on_waiting(self, msg: protocol.Waiting, seen: Progress) -> None:
        seen.waiting = list(msg.threads)

    def _on_late(self, msg: protocol.Late, seen: Progress) -> None:
        vs = [Violation.from_dict(d) for d in msg.violations]
        if msg.case_no == self.case_no:
            seen.thread_errors += vs
        elif msg.case_no in self.cases:
            seen.late.append(Earlier(self.cases[msg.case_no], msg.case_no, self.lingering.get(msg.case_no, []), vs))

    def _on_result(self, msg: protocol.Result, seen: Progress) -> tuple[list, bool]:
        self.lingering = {int(n): list(names) for n, names in msg.lingering}
        self.cases = {n: c for n, c in self.cases.items() if n in self.lingering or n == self.case_no}
        seen.stages = dict(msg.stages)
        return [Violation.from_dict(d) for d in msg.violations], msg.fatal

    def _on_invalid(self, msg: protocol.Invalid, seen: Progress):
        self.busy = False
        raise (UnsupportedCase if msg.unsupported else InvalidCase)(msg.message)

    def _on_target_failed(self, msg: protocol.TargetFailed, seen: Progress):
        self.busy = False
        raise TargetError(msg.message)

    def _on_harness(self, msg: protocol.Harness, seen: Progress):
        self.kill()
        raise HarnessError(f"worker failed outside the target: {msg.message}\n{msg.traceback}")

    def _on_ready(self, msg: protocol.Ready, seen: Progress):
        raise HarnessError("the worker said 'ready' again in the middle of a case")

    def _case_log(self, start: int) -> str:
        return self.log_text(start) if self.spec.sanitizer else ""

    def _died(self, seen: Progress, timed_out: bool, timeout_s: float, start_log: int, t0: float) -> RunResult:
        if not timed_out and self.spec.wrapper:
            self._settle()
        if timed_out:
            self.kill()
        self._settle(0.5)
        v = (timeout_violation(seen, timeout_s) if timed_out
             else crash_violation(seen, self.proc.returncode, self.killed, self.shown_tail(400)))
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
        return DeathBetween(how_it_died(self.proc.returncode, self.killed), self.suspects() or last)

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
            if self.log_has(marker, start):
                return
            time.sleep(0.002)

    def _settle(self, timeout: float = SETTLE_S) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass

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
