"""Targets for test_hardening.py (issue 23, the engine half), each hostile in one way. Loaded as
FILE.py:OBJ, as a user's target is.

Environment (the workers inherit it): HOSTILE_MARK_FILE gets a line each time a case starts;
HOSTILE_SLEEP_S makes each case of SLEEPY sleep; HOSTILE_LEAK_MB is how much LEAKY keeps per case.
"""

import os
import signal
import subprocess
import sys
import threading
import time

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target


class TargetsOwnBaseException(BaseException):
    """A BaseException that is neither SystemExit nor KeyboardInterrupt."""


RAISED = {"KeyboardInterrupt": KeyboardInterrupt, "GeneratorExit": GeneratorExit,
          "TargetsOwnBaseException": TargetsOwnBaseException}


def _cases(name, values=None):
    values = st.integers(0, 1000) if values is None else values

    def cases(faults=(), *, max_ops=5):
        return values.map(lambda n: Case(name, {}, ({"op": "x", "n": n},), tuple(faults)))
    return cases


def _started() -> None:
    path = os.environ.get("HOSTILE_MARK_FILE")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")


def run_raises(case, ctx):
    """Raises the BaseException its op names (``what``), or a KeyboardInterrupt when n >= 500."""
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            what = op.get("what") or ("KeyboardInterrupt" if op["n"] >= 500 else "")
            if what:
                raise RAISED[what]("raised by the target")


def run_sleepy(case, ctx):
    _started()
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            time.sleep(float(os.environ.get("HOSTILE_SLEEP_S", "0")))


_kept: list = []


def run_leaky(case, ctx):
    """Keeps HOSTILE_LEAK_MB of touched memory per case, for ever (a cache that never evicts)."""
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            _kept.append(bytearray(os.urandom(16)) * (int(os.environ.get("HOSTILE_LEAK_MB", "20")) << 16))


RAISES = Target("raises", "raises KeyboardInterrupt (or another BaseException) in run", _cases("raises"),
                run_raises)
SLEEPY = Target("sleepy", "each case sleeps HOSTILE_SLEEP_S", _cases("sleepy"), run_sleepy)
LEAKY = Target("leaky", "keeps HOSTILE_LEAK_MB per case", _cases("leaky"), run_leaky)


# -- threads and processes that outlive their case; a command signalled at a set point (issue 47) --------------
#
# THREADED: each case starts a thread that, once a later case starts in the same worker or after its op's
# ``wait`` (else HOSTILE_THREAD_WAIT_S, default 0.5) if none does, does its op's ``do`` (else HOSTILE_THREAD_DO): exit, kill,
# segv or raise. A campaign's next case meets it at its start; a rerun that waits for the case's threads meets
# it within the wait. HOSTILE_THREAD_FROM: only ops with n >= it start the thread (default 0: every op).
# FORKER: each op leaves a child process behind (its ``how``, else HOSTILE_FORK: fork, popen or setsid, a
# fork that leaves the process group), its pid a line of HOSTILE_PID_FILE, then does its ``then``, if any.
# HOSTILE_LINGER_AT_IMPORT (thread, atexit): what importing this file leaves in the command's own process
# (not a worker or zygote): a non-daemon thread that never ends, or an exit handler that blocks.
# HOSTILE_SIGNAL_AT (a window of ``_install_window``) and HOSTILE_SIGNAL (TERM, HUP, INT): the command's
# process signals itself there, once.

_started_cases = [0]
_case_started = threading.Condition()


def _next_case() -> int:
    with _case_started:
        _started_cases[0] += 1
        _case_started.notify_all()
        return _started_cases[0]


def _do(what: str) -> None:
    if what == "exit":
        os._exit(7)
    elif what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif what == "segv":
        import ctypes
        ctypes.string_at(0)
    elif what == "raise":
        raise ValueError("raised on a thread the case started")


def _later(mine: int, what: str | None, wait_s: float | None) -> None:
    with _case_started:
        _case_started.wait_for(lambda: _started_cases[0] > mine,
                               wait_s if wait_s is not None else float(os.environ.get("HOSTILE_THREAD_WAIT_S", "0.5")))
    _do(what or os.environ.get("HOSTILE_THREAD_DO", "exit"))


def run_threaded(case, ctx):
    mine = _next_case()
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if op["n"] >= int(os.environ.get("HOSTILE_THREAD_FROM", "0")):
                threading.Thread(target=_later, args=(mine, op.get("do"), op.get("wait")), name="hostile-later",
                                 daemon=True).start()
            if op.get("hold"):  # stays in its op that long: an earlier case's thread acts while this case runs
                time.sleep(op["hold"])


def run_thread_raises_now(case, ctx):
    """Starts a thread that raises at once, and waits for it: the exception is this case's."""
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            t = threading.Thread(target=_do, args=("raise",), name="hostile-now")
            t.start()
            t.join()


def _record_pid(pid: int) -> None:
    with open(os.environ["HOSTILE_PID_FILE"], "a") as f:
        f.write(f"{pid}\n")


def run_forker(case, ctx):
    """Each op leaves a child behind (``how``, else HOSTILE_FORK), then does its ``then`` (``_do``), if any."""
    for i, op in enumerate(case.ops):
        how = op.get("how") or os.environ.get("HOSTILE_FORK", "fork")
        with ctx.op(i, op):
            if how == "popen":
                _record_pid(subprocess.Popen(["sleep", "600"]).pid)
                if op.get("then"):
                    _do(op["then"])
                continue
            pid = os.fork()
            if pid == 0:  # the child: (with setsid, its own session: out of the worker's process group)
                if how == "setsid":
                    os.setsid()
                time.sleep(600)
                os._exit(0)
            _record_pid(pid)
            if op.get("then"):
                _do(op["then"])


def _in_command_process() -> bool:
    return not any(os.environ.get(v) for v in ("FUZZRUNNER_HUB_SOCKET", "FUZZRUNNER_ZYGOTE_SOCKET")) \
        and "fuzzrunner.check_target" not in " ".join(sys.argv)


def _signal_now() -> None:
    os.kill(os.getpid(), getattr(signal, "SIG" + os.environ.get("HOSTILE_SIGNAL", "TERM")))


def _after(module, name: str, when=lambda *a, **k: True) -> None:
    """``module.name`` replaced by a call that signals this process once it returns (and ``when`` holds)."""
    original = getattr(module, name)

    def wrapped(*args, **kwargs):
        out = original(*args, **kwargs)
        if when(*args, **kwargs) and not _signalled:
            _signalled.append(name)
            _signal_now()
        return out
    setattr(module, name, wrapped)


_signalled: list = []


def _install_window(window: str) -> None:
    from fuzzrunner import progress, report
    from fuzzrunner.cli import commands
    if window == "import":
        _signal_now()
    elif window == "case":  # the campaign's 2nd progress event: its search is running
        _after(progress.Progress, "__call__", lambda self, e: e.kind == "progress" and e.examples >= 2)
    elif window == "shrink":  # the first case run after a finding was found: its shrink is running
        found: list = []

        def shrinking(self, e):
            found.append(e.kind == "finding")
            return e.kind == "progress" and any(found[:-1])
        _after(progress.Progress, "__call__", shrinking)
    elif window == "summary":  # just after the "stopped:" line
        _after(commands, "_summary")  # as cmd_fuzz calls it
    elif window == "reports":  # between the JSON report and the JUnit XML
        _after(report, "write_json")
    elif window == "written":  # after the reports, before the exit code
        _after(report, "write_reports")


if os.environ.get("HOSTILE_LINGER_AT_IMPORT") and _in_command_process():
    if os.environ["HOSTILE_LINGER_AT_IMPORT"] == "thread":
        threading.Thread(target=threading.Event().wait, name="hostile-never-ends").start()
    else:
        import atexit
        atexit.register(threading.Event().wait)

if os.environ.get("HOSTILE_SIGNAL_AT") and _in_command_process():
    _install_window(os.environ["HOSTILE_SIGNAL_AT"])

THREADED = Target("threaded", "its cases start a thread that acts after the case returned (HOSTILE_THREAD_DO)",
                  _cases("threaded"), run_threaded)
THREAD_RAISES_NOW = Target("thread_raises_now", "each case's thread raises, joined by the case",
                           _cases("thread_raises_now"), run_thread_raises_now)
FORKER = Target("forker", "each case leaves a child process behind (HOSTILE_FORK)", _cases("forker"), run_forker)
