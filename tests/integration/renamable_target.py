"""A runner whose bad read sits in a function a test renames (issue 23: ``_apply`` -> ``_apply_lora``).

test_hardening.py copies this file, fuzzes it, renames ``_apply`` everywhere in the copy and checks
that the bug is still the same finding. The dummy run never writes ``slot_of_token``: every case
with a dummy run reads it unwritten, inside ``_apply``.
"""

import torch
from hypothesis import strategies as st

import fuzzrunner
from fuzzrunner import Case, Target


class Runner:
    def __init__(self, max_tokens: int, device: str):
        self.slot_of_token = fuzzrunner.track(torch.empty(max_tokens, dtype=torch.int64, device=device),
                                              "slot_of_token", per_step=True, initialized=False)
        self.table = fuzzrunner.track(torch.randn(4, 8, device=device), "adapter_table")

    def _apply(self, n: int) -> torch.Tensor:
        return self.table[self.slot_of_token[:n]].sum(dim=1)

    def step(self, slots: list[int]) -> torch.Tensor:
        self.slot_of_token[:len(slots)].copy_(torch.tensor(slots))
        return self._apply(len(slots))

    def dummy_run(self, n: int) -> torch.Tensor:
        return self._apply(n)  # the bug: no "no adapter" mapping written for the dummy tokens


def cases(faults=(), *, max_ops=5):
    op = st.one_of(st.integers(1, 8).map(lambda n: {"op": "dummy_run", "num_tokens": n}),
                   st.lists(st.integers(0, 3), min_size=1, max_size=8).map(lambda s: {"op": "step", "slots": s}))
    return st.lists(op, min_size=1, max_size=4).map(lambda ops: Case("renamable", {"max_tokens": 8}, ops, faults))


def run(case: Case, ctx) -> None:
    runner = Runner(case.config["max_tokens"], ctx.device)
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            out = runner.step(op["slots"]) if op["op"] == "step" else runner.dummy_run(op["num_tokens"])
            ctx.output("out", out)


TARGET = Target("renamable", "a runner whose bad read a test renames", cases, run)
