"""The state oracle: what a target checks of the code under test's own state (``ctx.check``).

An engine keeps state between steps (an adapter pool's slot table, a registry): a target that drives the
engine's own objects checks the properties their users rely on (after an unload nothing of the adapter is
reachable; a slot's buffers hold its adapter's weights) and reports each broken one with
``ctx.check(label, problems)``. Each problem becomes a ``state-violation`` of its op.
"""

from __future__ import annotations

from typing import Any

from ..violation import Violation
from .base import Oracle, ViolationLog


class StateOracle(Oracle):
    name = "state"

    def __init__(self):
        self.log = ViolationLog()

    def observe(self, index: int, op: dict, result: Any) -> None:
        opname = op.get("op", "?")
        for label, problems, details in getattr(result, "checks", ()):
            for problem in problems:
                self.log.add(Violation("state", "state-violation", opname, label, label,
                                       f"op {index} ({opname}): {label}: {problem}",
                                       {"op_index": index, "op": opname, **details}))

    def finish(self) -> list[Violation]:
        return self.log.violations()
