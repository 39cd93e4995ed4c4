"""The processes a case leaves behind: found through /proc, ended with everything they started.

A target that forks (a helper process, ``subprocess.Popen`` of a server, a double-forked daemon)
and never waits left its children running after the campaign: 20 orphans after 20 cases, their
memory counted as the worker's own growth (rss.py), and ``check-target`` waited 300 s on the pipe
such a child held (issue 47). A worker therefore makes itself a *child subreaper* (a descendant
orphaned by its parent is re-parented to the worker, not to init: a double fork cannot escape),
notes its children before each case and, after it, ends every child that is new together with
all of its descendants. Children that were there before the case (started at the target's import)
are left alone, and so are their own children. Linux only (/proc, ``prctl``); elsewhere nothing
is found and nothing is ended.

Ending is race-free: each process is stopped (SIGSTOP) before its children are read, so none of
them can fork again or be reaped and its pid reused meanwhile; then all are killed and the
worker's own children reaped.

A process of ours whose work is done ends with ``exit_now``: a non-daemon thread or a blocking
exit handler that the target left behind cannot keep it alive.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Descendants orphaned from now on are re-parented to this process (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's), from /proc; [] if it cannot be read."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def own_children() -> set[int]:
    return set(children(os.getpid()))


def _stop_tree(pid: int, stopped: list[int]) -> None:
    """SIGSTOP ``pid`` and then, recursively, its children (read once it can no longer fork)."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        return
    stopped.append(pid)
    for child in children(pid):
        _stop_tree(child, stopped)


def _reap(pids) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except (ChildProcessError, OSError):
            pass


def end_new_children(before: set[int], *, rounds: int = 20) -> int:
    """End every child of this process that is not in ``before``, with all its descendants (children re-parented
    to this subreaper meanwhile included); their number. Children in ``before`` and theirs are left alone."""
    ended = 0
    for _ in range(rounds):
        new = own_children() - before
        if not new:
            break
        stopped: list[int] = []
        for pid in sorted(new):
            _stop_tree(pid, stopped)
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        ended += len(stopped)
        _reap(new)  # their children, re-parented to us as they die, are taken by the next round
        if not stopped:
            time.sleep(0.01)  # children that are already gone (zombies): reaped; look again
    return ended


def exit_now(code: int) -> None:
    """End this process with ``code`` once its output is flushed, without waiting for the threads or exit
    handlers a target left behind (its parent would wait for it, then kill it)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
