"""The numeric oracle: outputs against the float64 reference, with a tolerance per dtype."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..kernels.torch_ref import tolerance
from ..violation import Violation
from .base import Oracle, ViolationLog


@dataclass
class Comparison:
    label: str               # what was compared, e.g. "logits"
    actual: torch.Tensor
    expected: torch.Tensor   # float64
    dtype: torch.dtype       # the dtype the actual values were computed in


def mismatch(c: Comparison) -> tuple[list[int], float, tuple] | None:
    """(bad rows, worst error, worst index) if ``actual`` is off the reference, else None."""
    rtol, atol = tolerance(c.dtype)
    a = c.actual.detach().double().cpu()
    e = c.expected.detach().double().cpu()
    if a.shape != e.shape:
        return [], float("inf"), ()
    err = (a - e).abs()
    bad = ~(err <= atol + rtol * e.abs())  # NaN counts as bad
    if not bad.any():
        return None
    err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
    worst = tuple(int(i) for i in torch.unravel_index(torch.argmax(err), err.shape))
    rows = sorted({int(r) for r in torch.nonzero(bad)[:, 0].tolist()}) if bad.dim() else [0]
    return rows, float(err[worst]), worst


WINDOW = 3  # elements either side of the worst one, along its last dimension


def _value(x: float) -> float | str:
    """A JSON-safe value: NaN and infinities as text (strict JSON has no NaN)."""
    return x if x == x and abs(x) != float("inf") else str(x)


def window(c: Comparison, worst: tuple, width: int = WINDOW) -> dict:
    """Expected and actual values at and around the worst element: the slice of its last
    dimension ``width`` either side, the leading indices fixed (for a 2-D output, its row)."""
    a, e = c.actual.detach().double().cpu(), c.expected.detach().double().cpu()
    if a.dim() == 0:
        return {"at": [], "start": 0, "stop": 1, "worst": 0, "expected": [_value(float(e))],
                "actual": [_value(float(a))]}
    lead, col = tuple(worst[:-1]), worst[-1]
    start, stop = max(0, col - width), min(a.shape[-1], col + width + 1)
    return {"at": list(lead), "start": start, "stop": stop, "worst": col,
            "expected": [_value(float(v)) for v in e[lead][start:stop]],
            "actual": [_value(float(v)) for v in a[lead][start:stop]]}


class NumericOracle(Oracle):
    name = "numeric"

    def __init__(self):
        self.log = ViolationLog()

    def observe(self, index: int, op: dict, result: Any) -> None:
        for c in getattr(result, "comparisons", ()):
            m = mismatch(c)
            if m is None:
                continue
            rows, worst, where = m
            opname = op.get("op", "?")
            shape = "shape " + str(tuple(c.actual.shape)) + " vs " + str(tuple(c.expected.shape)) if not where else ""
            msg = (f"op {index} ({opname}): {c.label} differs from the float64 reference in rows {rows[:8]}"
                   f"{'...' if len(rows) > 8 else ''}; worst error {worst:.3g} at {list(where)} "
                   f"(tolerance {tolerance(c.dtype)} for {str(c.dtype).replace('torch.', '')}) {shape}")
            self.log.add(Violation("numeric", "numeric-mismatch", opname, "float64 reference", c.label, msg.strip(),
                                   {"op_index": index, "op": opname, "rows": rows, "worst_error": worst,
                                    "worst_index": list(where), **({"window": window(c, where)} if where else {})}))

    def finish(self) -> list[Violation]:
        return self.log.violations()
