"""What one case in a worker came to (``RunResult``), and the earlier cases a death may be blamed on."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..case import Case


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
    stages: dict = field(default_factory=dict)  # the worker's seconds per stage (stages.py); none if it said none
