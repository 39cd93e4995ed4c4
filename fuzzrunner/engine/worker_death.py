"""Where in its case a worker was, and how it died, in words: the ``crash`` and ``timeout`` violations.

A worker that died or hung is blamed on the op it was in and the last kernel it launched (what it said
during the case, ``Progress``); a signal it did not send itself by faulting (SIGKILL, SIGTERM, ...) and
the hub did not send either is said to come from outside (the OOM killer, the target, someone else).
"""

from __future__ import annotations

import signal

from ..violation import Violation

# Signals a process does not send itself by faulting: someone else ended it.
_OUTSIDE_SIGNALS = {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}


class Progress:
    """What the worker said during one case: the op and the last kernel launch."""

    def __init__(self):
        self.op: tuple | None = None
        self.kernel, self.where = "", ""
        self.partial: list = []
        self.waiting: list | None = None  # its ops are done: the worker waits for these threads of it
        self.thread_errors: list = []     # what its threads raised, said apart from its result (``Late``)
        self.late: list = []              # Earlier cases whose threads raised meanwhile
        self.stages: dict = {}            # the case's seconds in the worker, per stage (stages.py)


def signal_name(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def from_outside(returncode: int | None, killed: bool) -> bool:
    """Whether a signal ended the process that neither it (by faulting) nor the hub (``killed``) sent."""
    return returncode is not None and -returncode in _OUTSIDE_SIGNALS and not killed


def how_it_died(returncode: int | None, killed: bool) -> str:
    return signal_name(returncode) + (" (a signal fuzzrunner did not send: the OOM killer, the target itself, "
                                      "or someone else)" if from_outside(returncode, killed) else "")


def when(op: tuple | None, waiting: list | None) -> str:
    """Where in its case a worker was, as a phrase: "in op 2 (dummy_run)", "before its first op", "after its
    ops returned, waiting for its thread 'loader'"."""
    if waiting is not None:
        threads = ", ".join(repr(t) for t in waiting)
        return (f"after the case returned{f' (last op {op[0]}, {op[1]})' if op else ''}, while waiting for "
                + (f"the thread{'s' * (len(waiting) != 1)} it started ({threads})" if waiting else "its threads"))
    return f"in op {op[0]} ({op[1]})" if op else "before the case's first op"


def _details(seen: Progress) -> dict:
    op = seen.op
    details = {"op_index": op[0] if op else None, "op": op[1] if op else None,
               "last_kernel": seen.kernel, "launch_site": seen.where}
    if seen.waiting is not None:
        details["threads"] = seen.waiting
    return details


def _blamed(seen: Progress) -> tuple[str, str]:
    """The kernel or op the violation names, and the phrase of where the case was."""
    last = f", last kernel launch {seen.kernel} from {seen.where}" if seen.kernel else ""
    return seen.kernel or (seen.op[1] if seen.op else ""), when(seen.op, seen.waiting) + last


def timeout_violation(seen: Progress, timeout_s: float) -> Violation:
    """The case ran past its timeout (the hub killed the worker)."""
    kernel, where = _blamed(seen)
    return Violation("worker", "timeout", kernel, "", "",
                     f"the case ran past the {timeout_s:g} s timeout {where}; the worker was killed", _details(seen))


def crash_violation(seen: Progress, returncode: int | None, killed: bool, output: str) -> Violation:
    """The worker died during the case: ``returncode`` its exit, ``output`` its log's tail."""
    kernel, where = _blamed(seen)
    how = signal_name(returncode)
    return Violation("worker", "crash", kernel, how, "",
                     f"the worker died with {how_it_died(returncode, killed)} {where}."
                     + (f" Output: {output}" if output else ""),
                     {**_details(seen), "exit": how, "external_signal": from_outside(returncode, killed)})
