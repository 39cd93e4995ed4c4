"""What a campaign (or one shard of it) gives back."""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field, fields

from ..context import Context
from ..coverage import Coverage
from ..finding import Finding
from ..settings import Settings


class StopReason(enum.Enum):
    """Why a campaign (or one shard of it) stopped. Its value is what the reports write (``stop_reason``;
    ``unknown`` for none: ``stop_text``); compare members, never those strings."""

    MAX_EXAMPLES = "max-examples"
    BUDGET = "budget"
    INTERRUPTED = "interrupted"
    WRITE_ERROR = "write-error"
    EXHAUSTED = "exhausted"

    def describe(self) -> str:
        return _STOP_DESCRIPTIONS[self]

    @classmethod
    def of_shards(cls, *reasons: StopReason | None) -> StopReason | None:
        """The campaign's reason of its shards' (None: a shard that said none): the first of interrupted,
        write-error, budget, max-examples, exhausted that one of them stopped for."""
        said = [r for r in reasons if r is not None]
        return min(said, key=_SHARD_ORDER.index) if said else None


_STOP_DESCRIPTIONS = {
    StopReason.MAX_EXAMPLES: "the example budget was spent",
    StopReason.BUDGET: "the time budget was spent",
    StopReason.INTERRUPTED: "a stop signal (SIGINT, SIGTERM, SIGHUP) ended it",
    StopReason.WRITE_ERROR: "a finding could not be written (it is kept in the result)",
    StopReason.EXHAUSTED: "Hypothesis ran out of distinct cases to try",
}
_SHARD_ORDER = (StopReason.INTERRUPTED, StopReason.WRITE_ERROR, StopReason.BUDGET, StopReason.MAX_EXAMPLES,
                StopReason.EXHAUSTED)


_OWN_SHAPE = {"settings", "findings", "flaky", "coverage", "stop_reason", "context"}  # to_dict: their own to_dict


def stop_text(reason: StopReason | None) -> str:
    """The reason as the reports and the summaries write it: its value, ``unknown`` for none."""
    return reason.value if reason is not None else "unknown"


def rerun_text(n: int, shrink: bool) -> str:
    """The cases run that were not generated, as the progress line and the summary count them: shrink steps (and
    Hypothesis' re-run of each failing case to report it), ``"6 shrinking"``; without shrinking only those re-runs,
    ``"1 re-run"`` (under ``--no-shrink`` the summary said "1 shrinking": new-user trial)."""
    return f"{n:,} shrinking" if shrink else f"{n:,} re-run{'s' * (n != 1)}"


@dataclass
class CampaignResult:
    target: str
    settings: Settings
    seed: int | None                   # None: stopped before the campaign drew one (interrupted_at_start)
    faults: tuple
    examples: int = 0                  # cases run, shrinking included
    generated: int = 0                 # of which generated (not shrinking)
    invalid: int = 0                   # generated cases the target rejected
    duration_s: float = 0.0
    findings: list = field(default_factory=list)     # list[Finding]
    flaky: list = field(default_factory=list)        # crash findings a fresh worker did not reproduce
    timeline: list = field(default_factory=list)     # (elapsed_s, examples, findings)
    replayed: list = field(default_factory=list)     # (path, finding id or None, still failing)
    quarantined: list = field(default_factory=list)  # (path, moved to, why)
    unsupported: list = field(default_factory=list)  # (path, why): corpus and seed cases the release cannot run, kept
    worker_restarts: int = 0
    known_crash_skips: int = 0         # cases a CPU pre-check showed would re-hit a known GPU crash
    known_crash_causes: dict = field(default_factory=dict)  # root-cause id -> {"short", "count"} of those skips
    tool_limitations: dict = field(default_factory=dict)    # signature id -> {"message", "count", ...}
    worker_recycles: int = 0           # workers closed between cases because their memory grew (rss.py)
    budget_cut_cases: int = 0          # cases stopped mid-run because the time budget ran out (not findings)
    worker_s: float = 0.0              # seconds the workers spent on cases (send to result), summed over shards
    stage_s: dict = field(default_factory=dict)  # seconds per stage (engine/stages.py), summed over shards
    stop_reason: StopReason | None = None
    warnings: list = field(default_factory=list)
    errors: list = field(default_factory=list)       # why the campaign could not finish cleanly
    coverage: Coverage = field(default_factory=Coverage)  # features of the valid cases run (replayed, generated)
    cluster: dict | None = None        # on Ray: the address, Ray's version, the nodes, CPUs and GPUs it had
    code_under_test: dict = field(default_factory=dict)  # Target.code_under_test, as every worker loaded it
    target_details: list = field(default_factory=list)  # Target.details as loaded: what of the code it drives here
    context: Context | None = None     # the context its workers ran under (the device that actually ran)

    @property
    def valid(self) -> int:
        return self.generated - self.invalid

    def to_dict(self) -> dict:
        """The result as plain data (what a shard sends its campaign, across processes and Ray); the result
        itself is not changed. ``from_dict`` reads it back."""
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name not in _OWN_SHAPE}
        return {**d, "settings": self.settings.to_dict(), "findings": [f.to_dict() for f in self.findings],
                "flaky": [f.to_dict() for f in self.flaky], "coverage": self.coverage.to_dict(),
                "stop_reason": self.stop_reason.value if self.stop_reason is not None else None,
                "context": self.context.to_dict() if self.context is not None else None}

    @classmethod
    def from_dict(cls, d: dict) -> CampaignResult:
        s = dict(d["settings"])
        settings = Settings(**{**s, "oracles": tuple(s["oracles"]) if s.get("oracles") is not None else None})
        return cls(**{k: copy.deepcopy(v) for k, v in d.items() if k not in _OWN_SHAPE}, settings=settings,
                   findings=[Finding.from_dict(f) for f in d["findings"]],
                   flaky=[Finding.from_dict(f) for f in d["flaky"]], coverage=Coverage.from_dict(d["coverage"]),
                   stop_reason=StopReason(d["stop_reason"]) if d["stop_reason"] is not None else None,
                   context=Context.from_dict(d["context"]))

    @classmethod
    def interrupted_at_start(cls, target: str, settings: Settings, faults) -> CampaignResult:
        """A campaign's result when a stop signal came before it had one (its target loading, its workers
        starting): no case ran, interrupted (``target``: its name, or its spec if it was not loaded yet)."""
        return cls(target, settings, settings.seed, tuple(faults), stop_reason=StopReason.INTERRUPTED)

    def count_known_crash_skip(self, cause_id: str, short: str, n: int = 1) -> None:
        self.known_crash_skips += n
        entry = self.known_crash_causes.setdefault(cause_id, {"short": short, "count": 0})
        entry["count"] += n

    def count_limitation(self, sig_id: str, message: str, n: int = 1) -> bool:
        """Count one sighting of a tool limitation; True the first time (say it once)."""
        entry = self.tool_limitations.setdefault(sig_id, {"message": message, "count": 0})
        entry["count"] += n
        return entry["count"] == n
