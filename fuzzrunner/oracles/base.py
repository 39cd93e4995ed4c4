"""The oracle protocol: start a case, hear about each op and its outputs, finish with violations.

Oracles know nothing about the reference runner. They learn about buffers through
``fuzzrunner.tracking`` (the calls any runner makes) and about results through
``observe`` (what a target reports for each op). An oracle that compares two runs of a
case (poison) says ``passes = 2``: it hears ``begin_pass(n)`` before each run and gives its
violations from ``verdict(runs)`` once both are done.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .. import source
from ..text import describe
from ..violation import Violation

_SEQ = itertools.count()


@dataclass
class RunRecord:
    """One run of a case: its violations, each op's reported outputs, the error that ended it."""
    violations: list = field(default_factory=list)
    outputs: dict = field(default_factory=dict)   # (op index, op name, label) -> tensor
    error: str | None = None
    ran: bool = True  # False: an oracle failed to start, the case did not run (nothing to compare)


class FinishFailed(Exception):
    """An oracle's ``finish`` failed after it had violations to report (``violations``): raised from the
    failure (``error``), so that the run keeps both."""

    def __init__(self, error: Exception, violations: list):
        super().__init__(describe(error))
        self.error, self.violations = error, violations


class Oracle:
    """Base of every oracle: each hook is a no-op unless overridden."""
    name = "oracle"
    passes = 1

    def start(self) -> None:
        """Install the oracle's hooks for one run. If it raises, ``finish`` is still called: it must undo
        whatever was installed before the failure (and only that)."""

    def begin_op(self, index: int, op: dict) -> None:
        pass

    def observe(self, index: int, op: dict, result: Any) -> None:
        pass

    def end_op(self) -> None:
        pass

    def finish(self) -> list[Violation]:
        """The run's violations, the hooks undone; called once per ``start``, even one that raised. One that
        fails with violations already found raises ``FinishFailed`` carrying them."""
        return []

    def seen(self) -> int:
        """How many violations this run has shown so far (a pre-check stops at the first op with one)."""
        log = getattr(self, "log", None)
        return len(log) if log is not None else 0

    def begin_pass(self, n: int) -> None:
        pass

    def verdict(self, runs: list[RunRecord]) -> list[Violation]:
        return []


def source_location(path: str, line: int) -> str:
    """``file:line``, the file relative to its import root (see ``fuzzrunner.source``)."""
    return source.location(path, line)


class ViolationLog:
    """One violation per (tool, kind, kernel, location, tensor) per op of a case, with a count.
    Per op, not per case: each op's first bad read is what names its root cause."""

    def __init__(self):
        self._by_sig: dict = {}

    def add(self, v: Violation, count: int = 1) -> None:
        key = (v.signature, v.details.get("op_index"))
        if key in self._by_sig:
            self._by_sig[key].details["count"] += count
        else:
            v.details.setdefault("count", count)
            v.details.setdefault("seq", next(_SEQ))  # order of first sight, across oracles
            self._by_sig[key] = v

    def violations(self) -> list[Violation]:
        return list(self._by_sig.values())

    def __len__(self) -> int:
        return len(self._by_sig)
