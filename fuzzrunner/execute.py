"""Run one case of a target under a set of oracles; the one place that does so.

Used by the engine's workers, by ``fuzzrunner replay``, by exported repro scripts and
by the pytest plugin. A target's ``run(case, ctx)`` wraps each op in ``ctx.op(i, op)``
and reports results with ``ctx.compare`` (numeric oracle) and ``ctx.output``.
"""

from __future__ import annotations

import os
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from . import _env, tracking
from .case import Case
from .errors import InvalidArgument, InvalidCase
from .oracles.base import source_location
from .settings import ORACLES
from .oracles.invariants import InvariantOracle
from .oracles.numeric import Comparison, NumericOracle
from .oracles.poison import PATTERNS, PoisonFill, divergences
from .oracles.shadow import ShadowOracle
from .violation import Violation

DEFAULT_ORACLES = {"cpu": ("shadow", "invariants", "numeric"), "cuda": ("invariants", "numeric", "poison")}


def effective_oracles(oracles, device: str, sanitizer: str = "none") -> tuple[str, ...]:
    """The oracles a worker runs: the device's defaults unless named. Under initcheck, never poison
    (a fill counts as initialization and would hide every report) nor invariants (its host copies of
    never-written metadata are themselves reported, as "Host API memory access error")."""
    names = validate_oracles(oracles) if oracles is not None else DEFAULT_ORACLES.get(device, ())
    if sanitizer == "initcheck":
        names = tuple(n for n in names if n not in ("poison", "invariants"))
    return names


def validate_oracles(names: Iterable[str]) -> tuple[str, ...]:
    names = tuple(names)
    for n in names:
        if n not in ORACLES:
            raise InvalidArgument(f"unknown oracle {n!r}; known oracles: {', '.join(ORACLES)}.")
    return names


def _make(name: str):
    return {"shadow": ShadowOracle, "invariants": InvariantOracle, "numeric": NumericOracle}[name]()


@dataclass
class OpRecord:
    comparisons: list = field(default_factory=list)
    outputs: dict = field(default_factory=dict)


class RunContext:
    """What a target's ``run`` gets: the device, the faults, and ways to report results."""

    track = staticmethod(tracking.track)
    carry_over = staticmethod(tracking.carry_over)

    def __init__(self, case: Case, device: str, oracles: list, poison: PoisonFill | None = None,
                 on_op: Callable[[int, dict], None] | None = None):
        self.case, self.device, self.faults = case, device, tuple(case.faults)
        self._oracles, self._poison, self._on_op = oracles, poison, on_op
        self.outputs: dict = {}
        self._record: OpRecord | None = None

    @contextmanager
    def op(self, index: int, op: dict):
        if self._on_op:
            self._on_op(index, op)
        for o in self._oracles:
            o.begin_op(index, op)
        self._record = rec = OpRecord()
        yield rec
        self._record = None
        for o in self._oracles:
            o.observe(index, op, rec)
        for label, t in rec.outputs.items():
            self.outputs[(index, op.get("op", ""), label)] = t
        if self._poison is not None:
            self._poison.end_op()

    def compare(self, label: str, actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
        """Check ``actual`` against the float64 ``expected`` (numeric oracle), and keep it as an output."""
        self._record.comparisons.append(Comparison(label, actual.detach(), expected, dtype))
        self.output(label, actual)

    def output(self, label: str, tensor: torch.Tensor) -> None:
        with tracking.quiet():
            self._record.outputs[label] = tensor.detach().clone().cpu()


@dataclass
class Outcome:
    violations: list
    ops_run: int = 0


def crash_violation(exc: BaseException, op_index: int | None) -> Violation:
    """A Python exception escaping the target: blamed on the innermost frame of non-library code."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = os.path.dirname(os.path.abspath(__file__))  # our hooks sit between the runner and torch: skip them
    lib = (os.sep + "torch" + os.sep, os.sep + "triton" + os.sep, os.path.join(own, "execute.py"),
           os.path.join(own, "oracles") + os.sep, os.path.join(own, "tracking.py"))
    mine = [f for f in frames if not any(s in f.filename for s in lib)] or frames
    where = source_location(mine[-1].filename, mine[-1].lineno) if mine else "?"
    text = f"{type(exc).__name__}: {exc}".strip()
    return Violation("python", "crash", type(exc).__name__, where, "",
                     f"op {op_index}: {text.splitlines()[0][:300] if text else type(exc).__name__}",
                     {"op_index": op_index, "traceback": "".join(traceback.format_exception(exc))[-4000:]})


def _one_run(case: Case, target, device: str, names: tuple, poison: PoisonFill | None,
             on_op: Callable | None) -> tuple[list[Violation], dict, str | None]:
    oracles = [_make(n) for n in names if n != "poison"]
    current = {"index": None}

    def note(i, op):
        current["index"] = i
        if on_op:
            on_op(i, op)

    ctx = RunContext(case, device, oracles, poison, note)
    started = []
    error, crash = None, None
    try:
        if poison is not None:
            poison.start()
        for o in oracles:
            o.start()
            started.append(o)
        target.run(case, ctx)
    except InvalidCase:
        raise
    except Exception as exc:  # the target (or the runner under test) failed: that is a finding
        error = f"{type(exc).__name__}: {exc}"
        crash = crash_violation(exc, current["index"])
    finally:
        violations = []
        for o in reversed(started):
            violations += o.finish()
        if poison is not None:
            poison.finish()
    if crash is not None:
        violations.append(crash)
    return violations, ctx.outputs, error


def run_case(case: Case, target, *, oracles: Iterable[str] | None = None, device: str | None = None,
             on_op: Callable[[int, dict], None] | None = None,
             on_partial: Callable[[list], None] | None = None) -> Outcome:
    """Run ``case`` once per oracle set (twice when ``poison`` is on) and return all violations.

    ``on_partial`` gets the first run's violations before a poisoned second run starts,
    so a crash there loses nothing already found.
    """
    device = device or _env.device_type()
    names = validate_oracles(oracles if oracles is not None else DEFAULT_ORACLES.get(device, ()))
    if "poison" not in names:
        violations, _, _ = _one_run(case, target, device, names, None, on_op)
        return Outcome(violations, len(case.ops))
    fills = [PoisonFill(p) for p in PATTERNS]
    v_a, out_a, err_a = _one_run(case, target, device, names, fills[0], on_op)
    if on_partial:
        on_partial(v_a)
    # The second run only needs the memory guard (on the CPU, the shadow hook masks wild lanes).
    guard = ("shadow",) if "shadow" in names else ()
    _, out_b, err_b = _one_run(case, target, device, guard, fills[1], on_op)
    poisoned = fills[0].poisoned | fills[1].poisoned
    extra = divergences([{"outputs": out_a, "error": err_a}, {"outputs": out_b, "error": err_b}], poisoned)
    return Outcome(v_a + extra, len(case.ops))
