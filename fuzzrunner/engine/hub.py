"""The hub: owns worker processes, sends them cases, and turns their deaths into findings.

A worker that segfaults, hits an illegal address, calls ``os._exit`` or is killed
for memory becomes a ``crash`` violation blamed on the case (and op, and last kernel
launch) it was running; one that outlives the per-case timeout is killed and becomes
a ``timeout``. Either way a fresh worker takes its place. A worker that cannot even
start is a harness error, never a finding.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ..case import Case
from ..errors import HarnessError, InvalidCase
from ..violation import Violation
from . import protocol

STARTUP_TIMEOUT_S = 300.0  # torch import, CUDA init, sanitizer start-up
MAX_FAILED_STARTS = 3
SETTLE_S = 10.0            # a wrapper (compute-sanitizer) prints its last reports after its worker dies
MAX_SANITIZER_LOG = 1 << 30  # a sanitized worker's own log past this: start a fresh worker (reports are unlimited)


@dataclass
class WorkerSpec:
    target: str
    device: str = "cpu"
    gpu: int | None = None                  # CUDA_VISIBLE_DEVICES for this worker
    wrapper: list = field(default_factory=list)  # e.g. compute-sanitizer argv prefix
    env: dict = field(default_factory=dict)
    log_path: str | None = None             # the worker's stdout+stderr (sanitizer reports land here)


@dataclass
class RunResult:
    violations: list
    seconds: float
    crashed: bool = False
    log_span: tuple = (0, 0)                # byte range of the worker log written during this case
    case_no: int = 0                        # the worker's own count (for sanitizer markers)


def _signal_name(returncode: int) -> str:
    if returncode is not None and returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


class Worker:
    """One live worker process."""

    def __init__(self, spec: WorkerSpec, index: int = 0):
        self.spec, self.index = spec, index
        self._dir = tempfile.mkdtemp(prefix="fuzzrunner-hub-")
        self.path = os.path.join(self._dir, "w.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        env = dict(os.environ, **spec.env, FUZZRUNNER_HUB_SOCKET=self.path, FUZZRUNNER_TARGET=spec.target,
                   FUZZRUNNER_DEVICE=spec.device, PYTHONUNBUFFERED="1")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        if spec.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif spec.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(spec.gpu)
        self.log_path = spec.log_path or os.path.join(self._dir, "worker.log")
        self._log = open(self.log_path, "ab")
        argv = [*spec.wrapper, sys.executable, "-m", "fuzzrunner.engine.worker"]
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.case_no = 0
        self.sock = self._accept()

    def _accept(self) -> socket.socket:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        self.server.settimeout(1.0)
        while time.monotonic() < deadline:
            try:
                conn, _ = self.server.accept()
                break
            except socket.timeout:
                if self.proc.poll() is not None:
                    raise HarnessError(f"worker exited during start-up ({_signal_name(self.proc.returncode)}); "
                                       f"its output: {self._tail()}")
        else:
            self.kill()
            raise HarnessError(f"worker did not start within {STARTUP_TIMEOUT_S:.0f} s; its output: {self._tail()}")
        conn.settimeout(None)
        msg = self._recv(conn, deadline - time.monotonic())
        if msg is None or msg.get("type") != "ready":
            self.kill()
            detail = msg.get("message") if msg else f"it died ({_signal_name(self.proc.poll())})"
            raise HarnessError(f"worker could not set up target {self.spec.target!r}: {detail}. {self._tail()}")
        return conn

    def _tail(self, n: int = 600) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - n))
                return f.read().decode(errors="replace").strip().replace("\n", " | ")
        except OSError:
            return ""

    def _recv(self, conn, timeout: float):
        r, _, _ = select.select([conn], [], [], max(timeout, 0))
        if not r:
            return None
        try:
            return protocol.recv(conn)
        except (ConnectionError, OSError, ValueError):
            return None

    def log_size(self) -> int:
        self._log.flush()
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def run(self, case: Case, oracles, timeout_s: float) -> RunResult:
        """Run one case; a death or a hang comes back as a crash/timeout violation."""
        start_log = self.log_size()
        t0 = time.monotonic()
        self.case_no += 1
        protocol.send(self.sock, {"type": "run", "case": case.to_dict(), "oracles": list(oracles) if oracles else None})
        partial, op, kernel = [], None, None
        deadline = t0 + timeout_s
        while True:
            msg = self._recv(self.sock, deadline - time.monotonic())
            if msg is None:
                timed_out = self.proc.poll() is None and time.monotonic() >= deadline
                if not timed_out and self.spec.wrapper:
                    self._settle()
                self.kill()
                v = self._death(timed_out, op, kernel, timeout_s)
                return RunResult(partial + [v], time.monotonic() - t0, True, (start_log, self.log_size()),
                                 self.case_no)
            kind = msg["type"]
            if kind == "op":
                op, kernel = (msg["index"], msg["op"]), None
            elif kind == "launch":
                kernel = msg["kernel"]
            elif kind == "partial":
                partial = [Violation.from_dict(d) for d in msg["violations"]]
            elif kind == "result":  # "fatal": the worker retires (its CUDA context is gone)
                vs = [Violation.from_dict(d) for d in msg["violations"]]
                if msg.get("fatal"):
                    self._settle()
                return RunResult(vs, time.monotonic() - t0, bool(msg.get("fatal")),
                                 (start_log, self.log_size()), self.case_no)
            elif kind == "invalid":
                raise InvalidCase(msg["message"])
            elif kind == "harness":
                self.kill()
                raise HarnessError(f"worker failed outside the target: {msg['message']}\n{msg.get('traceback', '')}")

    def _settle(self) -> None:
        try:
            self.proc.wait(timeout=SETTLE_S)
        except subprocess.TimeoutExpired:
            pass

    def log_text(self, span: tuple) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(span[0])
            return f.read(max(0, span[1] - span[0])).decode(errors="replace")

    def _death(self, timed_out: bool, op, kernel, timeout_s: float) -> Violation:
        where = f"op {op[0]} ({op[1]})" if op else "before the first op"
        last = f", last LoRA launch {kernel}" if kernel else ""
        if timed_out:
            return Violation("worker", "timeout", kernel or (op[1] if op else ""), "", "",
                             f"the case ran past the {timeout_s:g} s timeout in {where}{last}; the worker was killed",
                             {"op_index": op[0] if op else None, "op": op[1] if op else None})
        how = _signal_name(self.proc.returncode)
        return Violation("worker", "crash", kernel or (op[1] if op else ""), how, "",
                         f"the worker died with {how} in {where}{last}. Output: {self._tail(400)}",
                         {"op_index": op[0] if op else None, "op": op[1] if op else None, "exit": how})

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                protocol.send(self.sock, {"type": "exit"})
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        for s in (getattr(self, "sock", None), self.server):
            if s is not None:
                s.close()
        self._log.close()
        try:
            os.unlink(self.path)
            if not self.spec.log_path:
                os.unlink(self.log_path)
            os.rmdir(self._dir)
        except OSError:
            pass


class Hub:
    """Keeps one worker alive for a shard, replacing it after every death."""

    def __init__(self, spec: WorkerSpec, *, oracles=None, timeout_s: float = 60.0, max_restarts: int = 1000):
        self.spec, self.oracles, self.timeout_s, self.max_restarts = spec, oracles, timeout_s, max_restarts
        self.worker: Worker | None = None
        self.restarts = 0
        self.cases = 0

    def _ensure(self) -> Worker:
        failures = 0
        while self.worker is None:
            try:
                self.worker = Worker(self.spec)
            except HarnessError:
                failures += 1
                if failures >= MAX_FAILED_STARTS:
                    raise
        return self.worker

    def run(self, case: Case) -> RunResult:
        w = self._ensure()
        self.cases += 1
        try:
            result = w.run(case, self.oracles, self.timeout_s)
        except (InvalidCase, HarnessError):
            if w.proc.poll() is not None:
                self._replace()
            raise
        tool = self.spec.env.get("FUZZRUNNER_SANITIZER")
        if tool:
            from ..sanitizer.session import violations_in_log  # only sanitized runs pay for the import
            result.violations += violations_in_log(w.log_text(result.log_span), result.case_no, tool=tool)
        if result.crashed:
            self._replace()
        elif tool and not self.spec.log_path and w.log_size() > MAX_SANITIZER_LOG:
            self.close()  # not a restart: the next case starts a worker with an empty log
        return result

    def _replace(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        self.restarts += 1
        if self.restarts > self.max_restarts:
            raise HarnessError(f"workers were restarted {self.restarts} times (limit {self.max_restarts}); "
                               f"the target crashes on nearly every case: fix it or raise the limit.")

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def __enter__(self) -> "Hub":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
