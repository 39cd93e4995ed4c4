"""Buggy/fixed program pairs for the shadow oracle: each program has exactly one bad read.

A pair is one function ``program(ctx, bug)``: with ``bug=True`` it makes one bad read,
marked in its source with the comment ``# BAD`` (or, outside the program, ``# BAD:<pair names>``); with ``bug=False`` the same line reads
memory the program did write. ``ctx.step()`` starts the next op of the case (an epoch: a
per-step buffer must be written in the op that reads it). The expected tensor name may
use ``{alloc}``: the auto-tracked name of the ``torch.empty`` on the line marked ``# ALLOC``.

The oracle runs exactly as in a target run: ``start``, ``begin_op`` per step, ``finish``.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from fuzzrunner.oracles.base import source_location
from fuzzrunner.oracles.shadow import ShadowOracle

PAIRS: list[Pair] = []
GPU_PAIRS: list[Pair] = []  # pairs that need a GPU driver (Triton's autotuner): run by the device mode on cuda


@dataclass
class Pair:
    name: str
    cause: str
    program: Callable
    kind: str
    tensor: str
    views: bool = False      # needs ShadowOracle(check_views=True), the opt-in out-of-view check

    def marked_line(self, marker: str) -> str:
        """``file:line`` of the program's line ending in ``marker``; for a line outside the program
        (a kernel, a helper, a custom op's body), the module's line ending in ``marker:<names>``
        where ``<names>`` lists this pair's name."""
        lines, first = inspect.getsourcelines(self.program)
        hits = [first + i for i, text in enumerate(lines) if text.rstrip().endswith(marker)]
        if not hits:
            module = inspect.getsourcelines(inspect.getmodule(self.program))[0]
            hits = [i + 1 for i, text in enumerate(module) if f"{marker}:" in text
                    and self.name in text.split(f"{marker}:")[1].strip().split(",")]
        assert len(hits) == 1, f"{self.name}: expected one line marked {marker!r}, found {len(hits)}"
        return source_location(inspect.getsourcefile(self.program), hits[0])

    def expected(self) -> tuple:
        tensor = self.tensor
        if "{alloc}" in tensor:
            tensor = tensor.replace("{alloc}", "torch.empty@" + self.marked_line("# ALLOC"))
        if "{at}" in tensor:
            tensor = tensor.replace("{at}", self.marked_line("# ALLOC"))
        return (self.kind, tensor, self.marked_line("# BAD"))


def pair(cause: str, kind: str, tensor: str, *, views: bool = False, gpu_only: bool = False):
    """Decorator: register ``program(ctx, bug)`` as a pair (``views``: run with out-of-view checks;
    ``gpu_only``: it needs a GPU driver, so it goes to ``GPU_PAIRS``, run by the device mode on cuda)."""
    def register(fn):
        fn.check_views = views
        (GPU_PAIRS if gpu_only else PAIRS).append(Pair(fn.__name__, cause, fn, kind, tensor, views))
        return fn
    return register


class Ctx:
    def __init__(self, oracle: ShadowOracle):
        self.oracle, self.index = oracle, -1

    def step(self, name: str = "step") -> None:
        self.index += 1
        self.oracle.begin_op(self.index, {"op": name})


def run(program: Callable, bug: bool) -> tuple[list, str | None]:
    """(violations, crash traceback or None) of one program under the shadow oracle."""
    oracle = ShadowOracle(check_views=getattr(program, "check_views", False))
    oracle.start()
    crash = None
    try:
        ctx = Ctx(oracle)
        ctx.step()
        program(ctx, bug)
    except Exception:  # noqa: BLE001  (the oracle or the program crashed: a result of its own)
        crash = traceback.format_exc()
    finally:
        vs = oracle.finish()
    return vs, crash


def verdict(p: Pair) -> tuple[str, str]:
    """('exact' | 'missed' | 'wrong' | 'noisy' | 'crash', explanation) for one pair."""
    bug_vs, bug_crash = run(p.program, True)
    ok_vs, ok_crash = run(p.program, False)
    if bug_crash or ok_crash:
        return "crash", bug_crash or ok_crash
    if ok_vs:
        return "noisy", "; ".join(f"{v.signature.short()}: {v.message}" for v in ok_vs)
    got = [(v.kind, v.tensor, v.location) for v in bug_vs]
    if not got:
        return "missed", f"expected {p.expected()}"
    if got != [p.expected()]:
        return "wrong", f"expected {p.expected()}, got {got}"
    return "exact", ""
