"""A stranger's runner: it builds its tensors on ``cuda`` itself and never reads ``ctx.device``, as
most engines do, with two independent planted bugs (``--fault dummy_skips_slots``,
``--fault padding_overruns``), each a bad index that a GPU turns into a device-side assert.

On a machine without a GPU it cannot even be built (so the CPU pre-check and triage cannot run
its cases). ``GPU_ONLY_FAKE=1`` in the *GPU worker's* environment stands in for a GPU where there
is none (CI): that worker builds on the CPU instead, and the CPU pre-check and triage workers,
which never get the variable, still fail as they would beside a real GPU.

    fuzzrunner fuzz --device cuda --target tests/integration/gpu_only_target.py:TARGET \\
        --fault dummy_skips_slots --fault padding_overruns
"""

from __future__ import annotations

import os

import torch
from hypothesis import strategies as st

from fuzzrunner import Case, Target

UNSET = -(1 << 40)  # what the runner fills a slot with until a step programs it


def _device() -> str:
    return "cpu" if os.environ.get("GPU_ONLY_FAKE") else "cuda"


class Runner:
    def __init__(self, max_tokens: int = 16, adapters: int = 4, faults: tuple = ()):
        dev, self.faults = _device(), faults
        self.slots = torch.full((max_tokens,), UNSET, dtype=torch.int64, device=dev)
        self.weights = torch.arange(adapters * 8, dtype=torch.float32, device=dev).reshape(adapters, 8) / 8
        self.staging = torch.zeros(12, 8, device=dev)  # room for 12 padded rows

    def step(self, slots: list[int]) -> torch.Tensor:
        self.slots[: len(slots)] = torch.tensor(slots, device=self.slots.device)
        return self._gather(len(slots))

    def padded_step(self, slots: list[int], padded: int) -> torch.Tensor:
        self.slots[: len(slots)] = torch.tensor(slots, device=self.slots.device)
        self.slots[len(slots): padded] = 0
        rows = self._gather(padded)
        room = padded if "padding_overruns" in self.faults else min(padded, 12)
        index = torch.arange(room, device=rows.device)
        return self.staging.index_copy(0, index, rows[:room]).sum(1)  # past row 12: an index out of range

    def dummy_run(self, n: int) -> torch.Tensor:
        if "dummy_skips_slots" not in self.faults:
            self.slots[:n] = 0
        return self._gather(n)  # with the fault: UNSET (or the last step's slots past its length)

    def _gather(self, n: int) -> torch.Tensor:
        return self.weights[self.slots[:n]]


def _op():
    n = st.integers(1, 16)
    slots = st.lists(st.integers(0, 3), min_size=1, max_size=16)
    return st.one_of(
        st.builds(lambda s: {"op": "step", "slots": s}, slots),
        st.builds(lambda s, p: {"op": "padded_step", "slots": s, "padded": max(len(s), p)}, slots, n),
        st.builds(lambda k: {"op": "dummy_run", "num_tokens": k}, n))


def cases(faults=(), *, max_ops=4):
    return st.lists(_op(), min_size=1, max_size=max_ops).map(
        lambda ops: Case("gpu_only", {}, tuple(ops), tuple(faults)))


def run(case, ctx):
    runner = Runner(faults=ctx.faults)  # never ctx.device: where this runner's tensors live is its own choice
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if op["op"] == "step":
                out = runner.step(op["slots"])
            elif op["op"] == "padded_step":
                out = runner.padded_step(op["slots"], op["padded"])
            else:
                out = runner.dummy_run(op["num_tokens"])
            ctx.output("out", out)


TARGET = Target("gpu_only", "a runner that builds its tensors on cuda itself", cases, run,
                faults=("dummy_skips_slots", "padding_overruns"))
