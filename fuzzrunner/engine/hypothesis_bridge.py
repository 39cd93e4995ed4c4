"""The search's side of Hypothesis: the exceptions a test raises through it (a finding, a stop, a refusal, a spent
budget), the finding ids read back out of what it raises, and its shrink time limit lifted while a batch runs."""

from __future__ import annotations

import math
from contextlib import contextmanager

from ..errors import HarnessError


class Found(Exception):
    """Base of the per-finding exception classes Hypothesis sees."""


class Stop(BaseException):
    """Out of time, or interrupted: Hypothesis lets a BaseException through at once."""


class Refused(Stop):
    """The campaign cannot test this target here (``error`` says why): Hypothesis lets it through at once."""

    def __init__(self, error: HarnessError):
        super().__init__(str(error))
        self.error = error


class BudgetSpent(Stop):
    """The time budget ran out in the middle of a case (the case was stopped; ``stop_reason`` says so)."""


_classes: dict[str, type] = {}


def found_class(finding_id: str) -> type:
    if finding_id not in _classes:
        _classes[finding_id] = type(f"Finding_{finding_id}", (Found,), {})
    return _classes[finding_id]


def finding_ids(exc: BaseException) -> list[str]:
    if isinstance(exc, Found):
        return [exc.args[0]]
    out = []
    for sub in getattr(exc, "exceptions", ()) or ():
        out += finding_ids(sub)
    if exc.__cause__ is not None and exc.__cause__ is not exc:
        out += finding_ids(exc.__cause__)
    return out


@contextmanager
def no_shrink_time_limit():
    """Hypothesis stops shrinking after ``MAX_SHRINKING_SECONDS`` (5 minutes) and reports the case it
    has as if shrinking had ended: a slow target's finding (seconds per case on a CPU, a sanitizer)
    was then called minimized at 2 ops / 8 tokens where 1 op / 3 tokens fails (issue 23). Here the
    campaign's budget ends a shrink (``Stop``: marked interrupted, resumed by the next run), so
    Hypothesis' own limit is lifted while a batch runs (the module global it reads when shrinking
    starts, documented as monkeypatchable)."""
    from hypothesis.internal.conjecture import engine
    old = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = math.inf  # type: ignore[assignment]
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = old
