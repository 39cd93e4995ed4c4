"""The zygote: a process that has paid the start-up once and forks workers on request.

A worker's start-up is mostly imports (torch, Triton, the oracles, the target: seconds, ~10 s
with vLLM). After a crash the next worker would pay it again. The zygote imports all of it
once, then forks: a forked worker skips every import and is ready in milliseconds on the CPU;
on a GPU it still creates its own CUDA context after the fork (the zygote never touches CUDA,
and refuses to serve if an import did: a context does not survive a fork).

Started by the hub as ``python -m fuzzrunner.engine.zygote`` with the worker's environment
plus its control socket (``WorkerEnv.zygote_socket``). Messages (``protocol.TO_ZYGOTE`` and
``protocol.FROM_ZYGOTE``):

* zygote -> hub: ``ZygoteReady`` once preloaded (or ``Harness`` with the reason it cannot serve);
* hub -> zygote: ``Fork`` with ``socket`` and ``log``: the child becomes a worker
  (``engine/worker.py``) talking to that socket, its output going to that log;
* zygote -> hub: ``Forked`` with the child's ``pid``; later ``Exited`` with its ``returncode``
  (negative: the signal, as ``subprocess`` reports it), which only the zygote can read;
* hub -> zygote: ``Exit``.

Children die with the zygote (parent-death signal), and the zygote with the hub.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import traceback
from dataclasses import replace

from ..text import describe
from . import protocol


def _preload() -> str | None:
    """Import what every worker needs; the reason this process cannot fork workers, or None."""
    try:
        from .. import _env
        _env.configure()
        from .. import execute  # noqa: F401 - torch, Triton, the oracles
        from ..target import load_target
        load_target(protocol.WorkerEnv.read().target)
        import torch

        from . import worker  # noqa: F401
        if torch.cuda.is_initialized():
            return "importing the target initialized CUDA, and a CUDA context does not survive a fork"
    except BaseException as e:  # noqa: B036 - the hub falls back to starting workers itself
        return describe(e, 2000)
    return None


def _become_worker(msg: protocol.Fork, control: socket.socket) -> None:
    """In the forked child: take the worker's socket and log, then run the worker. Never returns."""
    code = protocol.EXIT_HARNESS
    try:
        control.close()
        os.setsid()  # its own process group, as a worker the hub starts itself (killpg)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        log = os.open(msg.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        start = protocol.WorkerEnv.read()  # the zygote's, which the hub made for its workers
        os.environ.update(replace(start, hub_socket=msg.socket, parent=os.getppid(), zygote_socket="")
                          .environ({}))
        os.environ.pop("FUZZRUNNER_ZYGOTE_SOCKET", None)
        from . import worker
        code = worker.main()
    except BaseException:  # noqa: B036 - whatever happens, the child must not return into the zygote
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class _Children:
    """The zygote's forked workers, each watched through a pidfd (readable once it has exited)."""

    def __init__(self):
        self.by_fd: dict[int, int] = {}

    def add(self, pid: int) -> None:
        self.by_fd[os.pidfd_open(pid)] = pid

    def reap(self, fd: int) -> tuple[int, int]:
        pid = self.by_fd.pop(fd)
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        return pid, os.waitstatus_to_exitcode(status)


def _fork(msg: protocol.Fork, control: socket.socket, children: _Children) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _become_worker(msg, control)
    children.add(pid)
    protocol.send(control, protocol.Forked(pid))


def serve(control: socket.socket) -> int:
    """Fork a worker per ``Fork``, report each child's end; until ``Exit`` or the hub is gone."""
    children = _Children()
    while True:
        readable, _, _ = select.select([control.fileno(), *children.by_fd], [], [])
        for fd in readable:
            if fd != control.fileno():
                pid, code = children.reap(fd)
                protocol.send(control, protocol.Exited(pid, code))
                continue
            try:
                msg = protocol.recv(control, protocol.TO_ZYGOTE)
            except (ConnectionError, OSError, ValueError):
                return protocol.EXIT_ORPHANED  # the hub is gone; the children die with us
            if isinstance(msg, protocol.Exit):
                return protocol.EXIT_DONE
            _fork(msg, control, children)


def main() -> int:
    from .lifeline import die_with_env_parent
    die_with_env_parent()
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    control.connect(protocol.WorkerEnv.read().zygote_socket)
    reason = _preload() if hasattr(os, "pidfd_open") else "os.pidfd_open is missing (Linux >= 5.3 needed)"
    if reason is not None:
        protocol.send(control, protocol.Harness(reason))
        return protocol.EXIT_HARNESS
    protocol.send(control, protocol.ZygoteReady(os.getpid()))
    code = serve(control)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # nothing to clean up: skip seconds of interpreter and library tear-down


if __name__ == "__main__":
    sys.exit(main())
