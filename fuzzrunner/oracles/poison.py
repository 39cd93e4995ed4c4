"""The poison oracle: run a case twice with two fill patterns; any difference proves a bad read.

Poisoned are: never-written memory (tracked with ``initialized=False``, and
``torch.empty``-family results) at allocation, and every per-step buffer at the end
of each op (its contents are dead by then: the next op must rewrite them). A buffer
the runner declares carried over (``tracking.carry_over``) gets back the contents it
had when last written. Writes are seen through torch ops only: a runner that writes
its per-step metadata with its own kernel and relies on carry-over is not supported.

Pattern A fills ints with -1 and floats with NaN; pattern B ints with 0 and floats
with -5. A correct runner gives bit-identical outputs under both. Works on compiled
kernels too. Never combine with initcheck: a fill counts as initialization there.

A torch dispatch mode is thread-local: the fill mode is entered on the case's thread, and on the
case's other threads as the shadow oracle's is (``shadow/threads.py``): every callable submitted to a
``ThreadPoolExecutor`` and every ``threading.Thread`` started during the case (an overlap scheduler
preparing the next batch). A thread started before the case that is not a pool worker is not covered.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from .. import tracking
from ..violation import Violation
from .base import Oracle, RunRecord
from .dynamo_free import DynamoFreeMode
from .shadow.threads import ThreadCoverage
from .shadow.torch_effects import EMPTY_OPS, classify, raw_bytes


@dataclass(frozen=True)
class Pattern:
    name: str
    int_value: int
    float_value: float


PATTERNS = (Pattern("A", -1, math.nan), Pattern("B", 0, -5.0))


def fill(t: torch.Tensor, p: Pattern) -> None:
    with tracking.quiet(), torch.no_grad():
        if t.dtype == torch.bool:
            t.fill_(bool(p.int_value))
        elif t.is_floating_point() or t.is_complex():
            t.fill_(p.float_value)
        else:
            t.fill_(p.int_value)


class _FillEmpties(DynamoFreeMode):
    def __init__(self, poison: PoisonFill):
        super().__init__()
        self.poison = poison
        self.checker = poison  # on a thread that outlives the case: ``threads.OFF`` (inert)

    def _dispatch(self, func, types, args=(), kwargs=None):  # (DynamoFreeMode.__torch_dispatch__ calls it)
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.checker.paused():
            return out
        if func in EMPTY_OPS:
            fill(out, self.poison.pattern)
            self.poison.poisoned.add("torch.empty")
        elif self.poison.per_step:
            for t in classify(func, args, kwargs)[1]:
                self.poison.dirty.add(t.untyped_storage().data_ptr())
        return out


class PoisonFill(tracking.Watcher):
    """Fills with one pattern during one run of a case; a tracking watcher."""

    def __init__(self, pattern: Pattern):
        self.pattern = pattern
        self.per_step: dict[int, tuple[str, torch.Tensor]] = {}
        self.saved: dict[int, torch.Tensor] = {}
        self.dirty: set[int] = set()  # per-step buffers written (or carried over) during this op
        self.poisoned: set[str] = set()
        self._watch: AbstractContextManager | None = None
        self._mode: _FillEmpties | None = None
        self._threads = ThreadCoverage(lambda: _FillEmpties(self))  # the case's other threads

    @staticmethod
    def paused() -> bool:
        return tracking.is_quiet()

    def start(self) -> None:
        watch = tracking.watch(self)
        watch.__enter__()
        self._watch = watch
        _FillEmpties.skip_dynamo()
        mode = _FillEmpties(self)
        mode.__enter__()
        self._mode = mode  # (once entered: ``finish`` exits only what was entered)
        self._threads.install()

    def finish(self) -> None:
        self._threads.uninstall()
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
        self._mode = self._watch = None

    def end_op(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        with tracking.quiet():
            for key, (name, t) in self.per_step.items():
                if key in self.dirty:  # live contents: what a carry-over may legitimately bring back
                    self.saved[key] = t.detach().clone()
                fill(t, self.pattern)
                self.poisoned.add(name)
        self.dirty.clear()

    # tracking.Watcher
    def on_track(self, tensor, name: str, per_step: bool, initialized: bool) -> None:
        if not initialized:
            fill(tensor, self.pattern)
            self.poisoned.add(name)
        if per_step:
            self.per_step[tensor.untyped_storage().data_ptr()] = (name, tensor)

    def on_carry_over(self, tensor) -> None:
        key = tensor.untyped_storage().data_ptr()
        saved = self.saved.get(key)
        if saved is not None:
            with tracking.quiet(), torch.no_grad():
                tensor.copy_(saved)
            self.dirty.add(key)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(raw_bytes(a), raw_bytes(b)) if a.numel() else True


def divergences(runs: list[dict], poisoned: set[str]) -> list[Violation]:
    """Compare the outputs of the two runs: ``[{"outputs": {(op_index, op, label): tensor}, "error": str|None}]``."""
    (a, b) = runs
    names = ", ".join(sorted(poisoned)) or "none"
    out = []
    if bool(a["error"]) != bool(b["error"]):
        which, err = ("A", a["error"]) if a["error"] else ("B", b["error"])
        out.append(Violation("poison", "poison-divergence", err.split(":")[0], "", "run",
                             f"only the run under pattern {which} failed ({err}); poisoned: {names}",
                             {"poisoned": sorted(poisoned)}))
    for key in a["outputs"]:
        if key in b["outputs"] and not _same(a["outputs"][key], b["outputs"][key]):
            index, opname, label = key
            out.append(Violation("poison", "poison-divergence", opname, "", label,
                                 f"op {index} ({opname}): {label} differs between poison patterns "
                                 f"A (ints -1, floats NaN) and B (ints 0, floats -5); poisoned buffers: {names}",
                                 {"op_index": index, "op": opname, "poisoned": sorted(poisoned)}))
    return out


class PoisonOracle(Oracle):
    """Two passes of one case, one per pattern; any difference between them is a violation."""
    name = "poison"
    passes = 2

    def __init__(self):
        self.fills = [PoisonFill(p) for p in PATTERNS]
        self.fill = self.fills[0]

    def begin_pass(self, n: int) -> None:
        self.fill = self.fills[n]

    def start(self) -> None:
        self.fill.start()

    def end_op(self) -> None:
        self.fill.end_op()

    def finish(self) -> list[Violation]:
        self.fill.finish()
        return []

    def verdict(self, runs: list[RunRecord]) -> list[Violation]:
        poisoned = set().union(*(f.poisoned for f in self.fills))
        return divergences([{"outputs": r.outputs, "error": r.error} for r in runs], poisoned)
