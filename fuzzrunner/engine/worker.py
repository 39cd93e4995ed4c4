"""The worker: holds the device, runs case after case under the oracles, reports back.

Started by the hub as ``python -m fuzzrunner.engine.worker`` (possibly under
compute-sanitizer) with its start-up environment (``protocol.WorkerEnv``: the hub's socket, the
target, the run's context). It imports nothing from the hub. Before and
after each case it prints a marker line on stdout (flushed, after a device
synchronize) so that sanitizer reports can be attributed to the case that caused them.
It dies with its hub: the kernel kills it when the hub dies (parent-death signal, set
by the hub before exec), and it exits when the hub's socket closes.

What a case leaves behind is the case's: the processes it started are ended before its result
is sent (processes.py; the worker is their subreaper), and its threads are followed
(case_threads.py): what they raise is the case's crash, and each result names the cases whose
threads still run, the suspects of a later death. The worker ends with ``os._exit`` once its
hub is done with it: a thread the target started at import, or an exit handler, cannot keep it.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from contextlib import ExitStack
from typing import Any

from .. import tracking, triton_cache
from ..context import Context
from ..text import describe, safe_str, traceback_text
from . import processes, protocol
from .case_threads import CaseThreads
from .stages import WORKER, CompileTimer


def _marker(kind: str, case_no: int) -> None:
    sys.stdout.write(f"@@fuzzrunner-{kind} {case_no}@@\n")
    sys.stdout.flush()


class _TensorAnnouncer(tracking.Watcher):
    """Under compute-sanitizer: print each tracked buffer's address range, so that a report's
    address can be named (``@@fuzzrunner-tensor NAME 0xADDR NBYTES@@``, inside the case markers)."""

    def on_track(self, tensor, name, per_step, initialized) -> None:
        st = tensor.untyped_storage()
        sys.stdout.write(f"@@fuzzrunner-tensor {name} {hex(st.data_ptr())} {st.nbytes()}@@\n")
        sys.stdout.flush()


class _Channel:
    """The socket to the hub, for every thread: a case's threads launch kernels and raise too."""

    def __init__(self, sock: socket.socket):
        self.sock, self._lock = sock, threading.Lock()

    def send(self, msg: protocol.Message) -> None:
        with self._lock:
            protocol.send(self.sock, msg)

    def send_quietly(self, msg: protocol.Message) -> None:
        """From a thread of a case: a hub that is gone is the main thread's business, not this thread's."""
        try:
            self.send(msg)
        except OSError:
            pass


class _LaunchReporter(tracking.Watcher):
    """Tells the hub which kernel is about to run and from where (crash attribution)."""

    def __init__(self, channel: _Channel):
        self.channel = channel
        self.last = ""

    def on_kernel_launch(self, kernel: str, meta: dict) -> None:
        self.last = kernel
        self.channel.send(protocol.Launch(kernel, safe_str(meta.get("where", ""), 300)))


def _context_lost(last_kernel: str):
    """None if the CUDA context still works; else the crash violation for the case that broke it.

    An illegal address leaves the context unusable (docs/background.md): the case becomes
    a crash finding and the worker retires so that a fresh process takes the next case.
    """
    import torch

    from ..violation import Violation
    try:
        torch.cuda.synchronize()
        return None
    except Exception as e:  # torch.AcceleratorError / RuntimeError, depending on the version
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        what = text.split("CUDA error:", 1)[-1].strip()
        return Violation("cuda", "crash", last_kernel, what, "",
                         f"the CUDA context was lost ({text}); last kernel launch: {last_kernel or 'none'}",
                         {"error": text})


class _Session:
    """The worker's loop: one handler per message type from the hub (``protocol.TO_WORKER``)."""

    def __init__(self, sock: socket.socket, target, context: Context):
        self.sock, self.target, self.context, self.device = sock, target, context, context.device
        self.channel = _Channel(sock)
        self.reporter = _LaunchReporter(self.channel)
        self.threads = CaseThreads(self._late, getattr(target, "own_code", ()))  # installed by ``main``
        self.watchers: list[tracking.Watcher] = [self.reporter]
        if context.sanitizer != "none":
            self.watchers.append(_TensorAnnouncer())
        self.case_no = 0
        self.compiles = CompileTimer()  # Triton's compiles inside a case: its ``compile`` stage (stages.py)
        if not context.interpreted:
            self.compiles.install()
        self.handlers: dict[type, Any] = {protocol.Run: self.run, protocol.Exit: self.exit}

    def serve(self) -> int:
        while True:
            try:
                msg = protocol.recv(self.sock, protocol.TO_WORKER)
            except (ConnectionError, OSError, ValueError):
                return protocol.EXIT_ORPHANED
            code = self.handlers[type(msg)](msg)
            if code is not None:
                return code

    def exit(self, msg: protocol.Exit) -> int:
        return protocol.EXIT_DONE

    def _late(self, case_no: int, violation) -> None:
        self.channel.send_quietly(protocol.Late(case_no, [violation.to_dict()]))

    def _after_case(self, msg: protocol.Run, children: set[int]) -> list:
        """The case's threads waited for (``linger_s``), its processes ended; what its threads raised."""
        if msg.linger_s > 0:
            waiting = [t.name for t in self.threads.of_case(self.case_no)]
            self.channel.send(protocol.Waiting(waiting))
            self.threads.wait(self.case_no, msg.linger_s)
        processes.end_new_children(children)
        return self.threads.end()

    def run(self, msg: protocol.Run) -> int | None:
        self.case_no += 1
        self.threads.begin(self.case_no)
        children = processes.own_children()
        try:
            return self._run(msg, children)
        finally:
            self.threads.end()

    def _run(self, msg: protocol.Run, children: set[int]) -> int | None:
        from ..case import Case
        from ..errors import InvalidCase, TargetError, UnsupportedCase
        from ..execute import run_case
        t0 = time.perf_counter()
        times: dict[str, float] = {}  # the case's seconds per stage (stages.py), filled by run_case
        self.compiles.take()
        self.reporter.last = ""
        _marker("case-begin", self.case_no)
        try:
            case = Case.from_dict(msg.case)
            with ExitStack() as stack:
                for w in self.watchers:
                    stack.enter_context(tracking.watch(w))
                violations = run_case(case, self.target, context=self.context, oracles=msg.oracles,
                                      on_op=self._op, on_partial=self._partial, stop_early=msg.stop_early,
                                      times=times)
            lost = _context_lost(self.reporter.last) if self.device == "cuda" else None
        except InvalidCase as e:
            # launches are asynchronous: a kernel of this case may have broken the context before the
            # target refused the case; then it is that crash, or the next case would be blamed for it
            lost = _context_lost(self.reporter.last) if self.device == "cuda" else None
            if lost is None:
                processes.end_new_children(children)
                _marker("case-end", self.case_no)
                self.channel.send(protocol.Invalid(safe_str(e), isinstance(e, UnsupportedCase)))
                return None
            violations = []
        except TargetError as e:  # the target broke its contract: the campaign stops with its line
            processes.end_new_children(children)
            _marker("case-end", self.case_no)
            self.channel.send(protocol.TargetFailed(safe_str(e)))
            return None
        except BaseException as e:  # noqa: B036 - a bug in fuzzrunner itself: the harness broke
            self.channel.send(protocol.Harness(describe(e, 2000), traceback_text(e)))
            return protocol.EXIT_HARNESS
        violations += self._after_case(msg, children)
        _marker("case-end", self.case_no)
        violations = [self._with_last_launch(v) for v in violations] + ([lost] if lost else [])
        lingering = [[n, names] for n, names in sorted(self.threads.lingering().items())]
        seconds = time.perf_counter() - t0
        stages = {**times, "compile": self.compiles.take(), WORKER: seconds}
        self.channel.send(protocol.Result([v.to_dict() for v in violations], seconds, self.case_no,
                                          fatal=lost is not None, lingering=lingering, stages=stages))
        return protocol.EXIT_CONTEXT_LOST if lost is not None else None

    def _with_last_launch(self, v):
        """A CUDA error raised in Python names the last kernel launched before it (crash triage)."""
        from ..violation import raised_cuda_error
        if self.device != "cuda" or not self.reporter.last or not raised_cuda_error(v):
            return v
        from dataclasses import replace
        return replace(v, message=f"{v.message}; last kernel launch: {self.reporter.last}",
                       details={**v.details, "last_kernel": self.reporter.last})

    def _op(self, index: int, op: dict) -> None:
        self.threads.at_op(index)
        name = op.get("op", "")  # a run's own op dict may hold anything (ctx.op takes dicts only)
        self.channel.send(protocol.Op(index, name if isinstance(name, str) else safe_str(name, 100)))

    def _partial(self, violations: list) -> None:
        self.channel.send(protocol.Partial([v.to_dict() for v in violations]))


def _set_up(sock: socket.socket, start: protocol.WorkerEnv):
    """The target, or None after telling the hub why the set-up failed."""
    from .. import _env
    _env.configure()  # the device comes from the hub (WorkerEnv); TRITON_INTERPRET before Triton loads
    from .. import execute  # noqa: F401 - torch and the oracles load now, not in the first case's time
    from ..target import load_target
    try:
        target = load_target(start.target)
        device = start.context.device
        import torch

        # (torch._dynamo is not imported: no oracle needs it (oracles/dynamo_free.py), and it costs
        # seconds; code that compiles imports it when it does, at the target's import or in a case)
        if device == "cuda":
            torch.cuda.init()
        # every worker, and later campaigns, share one Triton cache for this release and device
        triton_cache.use(dict(target.code_under_test), device, compiled=not start.context.interpreted)
    except BaseException as e:  # noqa: B036 - SystemExit at import is a broken harness too
        protocol.send(sock, protocol.Harness(f"worker set-up failed: {describe(e, 2000)}", traceback_text(e)))
        return None
    return target


def main() -> int:
    from .lifeline import die_with_env_parent
    die_with_env_parent()
    processes.become_subreaper()  # a case's double-forked child is re-parented here, where it is ended
    start = protocol.WorkerEnv.read()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(start.hub_socket)
    target = _set_up(sock, start)
    if target is None:
        return protocol.EXIT_HARNESS
    protocol.send(sock, protocol.Ready(os.getpid(), start.context.device, dict(target.code_under_test)))
    session = _Session(sock, target, start.context)
    session.threads.install()  # after the target's import: threads it started are no case's
    try:
        return session.serve()
    finally:
        processes.end_new_children(set())  # whatever is left (started at the target's import too)


if __name__ == "__main__":
    processes.exit_now(main())  # a thread or an exit handler the target left must not keep a finished worker
