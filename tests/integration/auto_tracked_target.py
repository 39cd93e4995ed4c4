"""A runner whose bad read is of a buffer the shadow oracle tracks on its own (``torch.empty``, never
named with ``track``): it is reported as ``torch.empty@FILE:LINE``, the file that made it.

Tests copy this file under other names and into other folders (a renamed or moved target file,
issue 47 item 5) and into folders whose names are not UTF-8 (item 11). The dummy run never writes
``slots``: every case with a dummy run reads it unwritten.
"""

import torch
from hypothesis import strategies as st

from fuzzrunner import Case, Target


class Runner:
    def __init__(self, n: int, device: str):
        self.slots = torch.empty(n, dtype=torch.int64, device=device)  # never tracked by name
        self.table = torch.randn(4, 8, device=device)

    def step(self, slots: list[int]) -> torch.Tensor:
        self.slots[:len(slots)].copy_(torch.tensor(slots))
        return self.table[self.slots[:len(slots)]].sum(dim=1)

    def dummy_run(self, n: int) -> torch.Tensor:
        return self.table[self.slots[:n] % 4].sum(dim=1)  # the bug: slots never written for a dummy run


def cases(faults=(), *, max_ops=5):
    op = st.one_of(st.integers(1, 8).map(lambda n: {"op": "dummy_run", "num_tokens": n}),
                   st.lists(st.integers(0, 3), min_size=1, max_size=8).map(lambda s: {"op": "step", "slots": s}))
    return st.lists(op, min_size=1, max_size=3).map(lambda ops: Case("auto_tracked", {"n": 8}, ops, faults))


def run(case: Case, ctx) -> None:
    runner = Runner(case.config["n"], ctx.device)
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            out = runner.step(op["slots"]) if op["op"] == "step" else runner.dummy_run(op["num_tokens"])
            ctx.output("out", out)


TARGET = Target("auto_tracked", "a runner that reads a torch.empty buffer it never wrote", cases, run)
