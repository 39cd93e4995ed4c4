"""Fuzz your own runner: a toy model runner with one LoRA-style metadata buffer, as a target.

    fuzzrunner fuzz --target examples/toy_runner_target.py:TARGET                 # passes
    fuzzrunner fuzz --target examples/toy_runner_target.py:TARGET --fault forget_mapping_in_dummy_run

The runner registers its persistent buffer with ``fuzzrunner.track`` (the one edit a
runner needs; ``torch.empty`` calls inside a case are tracked even without it), and the
target wraps each op in ``ctx.op`` so the oracles know where one step ends.
"""

import torch
from hypothesis import strategies as st

import fuzzrunner
from fuzzrunner import Case, Target


class ToyRunner:
    def __init__(self, max_tokens: int, device: str, forget_mapping_in_dummy_run: bool):
        self.slot_of_token = fuzzrunner.track(torch.empty(max_tokens, dtype=torch.int64, device=device),
                                              "slot_of_token", per_step=True, initialized=False)
        self.table = fuzzrunner.track(torch.randn(4, 8, device=device), "adapter_table")
        self.buggy = forget_mapping_in_dummy_run

    def step(self, slots: list[int]) -> torch.Tensor:
        n = len(slots)
        self.slot_of_token[:n].copy_(torch.tensor(slots))
        return self.table[self.slot_of_token[:n]].sum(dim=1)

    def dummy_run(self, n: int) -> torch.Tensor:
        if not self.buggy:
            self.slot_of_token[:n].zero_()  # "no adapter" for every dummy token
        return self.table[self.slot_of_token[:n]].sum(dim=1)


def cases(faults=(), *, max_ops=5):
    op = st.one_of(st.integers(1, 8).map(lambda n: {"op": "dummy_run", "num_tokens": n}),
                   st.lists(st.integers(0, 3), min_size=1, max_size=8).map(lambda s: {"op": "step", "slots": s}))
    return st.lists(op, min_size=1, max_size=5).map(lambda ops: Case("toy_runner", {"max_tokens": 8}, ops, faults))


def run(case: Case, ctx) -> None:
    runner = ToyRunner(case.config["max_tokens"], ctx.device, "forget_mapping_in_dummy_run" in case.faults)
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if op["op"] == "step":
                ctx.output("out", runner.step(op["slots"]))
            else:
                ctx.output("out", runner.dummy_run(op["num_tokens"]))


TARGET = Target("toy_runner", "a toy runner with one per-step slot buffer", cases, run,
                faults=("forget_mapping_in_dummy_run",))
