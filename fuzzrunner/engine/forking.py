"""The hub's side of the zygote (engine/zygote.py): ask for a worker, learn how it ended.

``Zygote.fork`` gives a ``ForkedProcess``: what the hub needs of a ``subprocess.Popen``
(``pid``, ``poll``, ``wait``, ``returncode``, ``kill``) for a worker that is the zygote's child,
not ours. Its exit status comes from the zygote; a pidfd tells at once that it has ended.
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
import threading
import time

from ..errors import HarnessError
from . import protocol

REPLY_TIMEOUT_S = 30.0  # a fork, or the status of a child known to be gone


class StartCut(Exception):
    """A campaign's deadline came while a worker (or the zygote it forks from) was still starting: no case
    ran, none is a finding."""


class Zygote:
    """One zygote process started with a worker's ``env``, its socket and log in ``directory``
    (removed at ``close``), shared by one hub's workers.

    ``wait=False``: return as soon as the process is started; the hand-shake (its imports done) is
    waited for at the first ``fork``, within ``startup_timeout_s`` of the start, and a zygote that
    cannot serve raises ``HarnessError`` there (as the constructor does with ``wait=True``)."""

    def __init__(self, env: dict, directory: str, startup_timeout_s: float, *, wait: bool = True):
        self.directory, self.path = directory, os.path.join(directory, "z")
        self.sock: socket.socket | None = None
        self._conn: socket.socket | None = None  # its connection, before its hand-shake
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._lock = threading.Lock()      # spares wait for their hand-shake in threads and poll
        self._exits: dict[int, int] = {}   # pid -> returncode, as the zygote reported them
        self.log_path = os.path.join(directory, "zygote.log")
        control = protocol.WorkerEnv.zygote_control(self.path)
        try:
            self.server.bind(self.path)
            self.server.listen(1)
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen([sys.executable, "-m", "fuzzrunner.engine.zygote"],
                                             env=dict(env, **control), stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
        except BaseException:  # nothing started: nothing left behind
            self.server.close()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self._deadline: float | None = time.monotonic() + startup_timeout_s  # until the hand-shake
        if wait:
            self._ready()

    def _ready(self, by: float = math.inf) -> None:
        """The hand-shake, if still due (under the lock, or in the constructor). ``StartCut`` if it has not
        come by ``by`` (monotonic, before the start-up timeout): the zygote goes on starting."""
        if self._deadline is None:
            return
        if by < self._deadline and not self._connected_and_ready_by(by):
            raise StartCut("the campaign's deadline came while the zygote was importing the target")
        deadline, self._deadline = self._deadline, None
        try:
            self.sock = self._hand_shake(deadline - time.monotonic())
        except BaseException:
            self._close()
            raise

    def _connected_and_ready_by(self, by: float) -> bool:
        """Whether the zygote has connected and its hand-shake is there to read by ``by`` (or it died:
        the hand-shake then says so); the connection is kept for ``_hand_shake``."""
        if self._conn is None:
            self._conn = protocol.accept(self.server, self.proc, by)
            if self._conn is None:
                return self.proc.poll() is not None
        readable, _, _ = select.select([self._conn], [], [], max(by - time.monotonic(), 0.0))
        return bool(readable) or self.proc.poll() is not None

    def _hand_shake(self, timeout_s: float) -> socket.socket:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        conn, self._conn = self._conn or protocol.accept(self.server, self.proc, deadline), None
        if conn is None:
            raise HarnessError("the zygote did not start")
        conn.settimeout(max(deadline - time.monotonic(), 1.0))
        try:
            msg = protocol.recv(conn, protocol.FROM_ZYGOTE)
        except (ConnectionError, OSError, ValueError):
            msg = protocol.Harness("it died during start-up")
        conn.settimeout(None)
        if not isinstance(msg, protocol.ZygoteReady):
            conn.close()
            raise HarnessError(f"the zygote cannot fork workers: {getattr(msg, 'message', msg)}")
        return conn

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, socket_path: str, log_path: str, by: float = math.inf) -> ForkedProcess:
        """A worker forked from the zygote (its hand-shake waited for first, until ``by`` at most:
        ``StartCut``)."""
        with self._lock:
            self._ready(by)
            if self.sock is None:
                raise HarnessError("the zygote is closed")
            try:
                protocol.send(self.sock, protocol.Fork(socket_path, log_path))
                while True:
                    msg = self._next(REPLY_TIMEOUT_S)
                    if isinstance(msg, protocol.Forked):
                        return ForkedProcess(msg.pid, self)
            except (ConnectionError, OSError, ValueError, TimeoutError) as e:
                raise HarnessError(f"the zygote did not fork a worker ({type(e).__name__}: {e})") from None

    def _next(self, timeout: float) -> protocol.Message:
        """The next message, with ``Exited`` ones recorded (and returned too). Under the lock."""
        assert self.sock is not None
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            raise TimeoutError(f"no word from the zygote in {timeout:g} s")
        msg = protocol.recv(self.sock, protocol.FROM_ZYGOTE)
        if isinstance(msg, protocol.Exited):
            self._exits[msg.pid] = msg.returncode
        return msg

    def returncode(self, pid: int, wait_s: float) -> int | None:
        """The child's exit status once the zygote has said it (waiting up to ``wait_s`` for the word)."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            while pid not in self._exits:
                if self.sock is None:
                    return None
                try:
                    self._next(max(deadline - time.monotonic(), 0))
                except (ConnectionError, OSError, ValueError, TimeoutError):
                    return None
            return self._exits.pop(pid)

    def close(self) -> None:
        """End the zygote (its children die with it: close the hub's workers first)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        """``close``, under the lock (also from a failed hand-shake)."""
        self._deadline = None  # no hand-shake after this
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        sock, self.sock = self.sock, None
        if sock is not None and self.proc.poll() is None:
            try:
                protocol.send(sock, protocol.Exit())
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for s in (sock, self.server):
            if s is not None:
                s.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class ForkedProcess:
    """A worker forked by the zygote, seen as a ``subprocess.Popen``."""

    def __init__(self, pid: int, zygote: Zygote):
        self.pid, self.zygote = pid, zygote
        self.returncode: int | None = None
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # already gone: its status is on its way from the zygote
            self._fd = None

    def _ended(self, timeout: float) -> bool:
        if self._fd is None:
            return True
        r, _, _ = select.select([self._fd], [], [], timeout)
        return bool(r)

    def poll(self) -> int | None:
        if self.returncode is None and self._ended(0):
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._ended(timeout if timeout is not None else 1e9):
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
            self._collect()
        assert self.returncode is not None
        return self.returncode

    def _collect(self) -> None:
        code = self.zygote.returncode(self.pid, REPLY_TIMEOUT_S)
        # No word (the zygote itself is gone): the child died with it, by the parent-death signal.
        self.returncode = code if code is not None else -signal.SIGKILL
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def kill(self) -> None:
        if self.returncode is None and self._fd is not None:
            try:
                signal.pidfd_send_signal(self._fd, signal.SIGKILL)  # never a reused pid
            except ProcessLookupError:
                pass

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)
