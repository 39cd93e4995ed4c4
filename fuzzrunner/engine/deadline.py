"""The campaign's one deadline: ``--budget`` counted from when the campaign began (for the CLI, when the
command started), for everything it does: start-up, the search with its cases in flight, shrinking and
pre-checks, closing workers and shard processes, CPU triage, the reports.

Measured before (benchmarks/budget_overrun.py, 30 s budgets on the CPU): the budget's clock started when
each shard's search did, so the imports, the plan and the shard processes' start (7-21 s) came on top, and
the shard processes' exits, the CPU triage and the interpreter's exit after it: 34-94% over. Now the plan
carries one deadline, as wall-clock time (``time.time()``: the same in a shard process and, NTP-synced, on a
Ray node); each process turns it into its own monotonic clock. The search ends early enough for what comes
after it: ``tail_s`` (closing, reports, exit) and, once a GPU campaign that triages on the CPU has a finding,
``triage_s`` for that triage, which itself stops at ``triage_end``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

TAIL_SHARE, TAIL_MIN_S, TAIL_MAX_S = 0.05, 1.0, 30.0   # closing workers and shards, reports, the exit
TRIAGE_SHARE, TRIAGE_MAX_S = 0.15, 120.0               # CPU triage of a GPU campaign's findings


@dataclass(frozen=True)
class Deadline:
    end: float        # time.time() by which the campaign has ended
    budget_s: float

    @classmethod
    def of(cls, budget_s: float | None, started: float | None = None) -> Deadline | None:
        """The deadline of a ``budget_s`` budget whose clock started at ``started`` (``time.time()``; default
        now); None for no budget."""
        if budget_s is None:
            return None
        return cls((time.time() if started is None else started) + budget_s, budget_s)

    @property
    def tail_s(self) -> float:
        return min(max(TAIL_SHARE * self.budget_s, TAIL_MIN_S), TAIL_MAX_S)

    @property
    def triage_s(self) -> float:
        return min(TRIAGE_SHARE * self.budget_s, TRIAGE_MAX_S)

    def search_end(self, *, triage: bool) -> float:
        """When the search stops (``time.time()``): ``triage`` once there are findings to triage on the CPU."""
        return self.end - self.tail_s - (self.triage_s if triage else 0.0)

    @property
    def triage_end(self) -> float:
        """When the CPU triage stops (``time.time()``): what is left after it is the reports and the exit."""
        return self.end - self.tail_s

    def left(self, at: float | None = None) -> float:
        """Seconds from now to ``at`` (default the end)."""
        return (self.end if at is None else at) - time.time()


def monotonic(at: float | None) -> float:
    """A ``time.time()`` instant on this process's monotonic clock (inf for None: no deadline)."""
    return math.inf if at is None else time.monotonic() + (at - time.time())
