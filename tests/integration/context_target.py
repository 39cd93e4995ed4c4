"""A user-style target for test_run_context.py: it logs the device its strategy is given and the context each
run gets (CONTEXT_LOG, which the workers inherit), and fails on a planted value (a finding)."""

import json
import os

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target


def _log(**entry) -> None:
    with open(os.environ["CONTEXT_LOG"], "a") as f:
        f.write(json.dumps(entry) + "\n")


def cases(faults=(), *, max_ops=3, device):
    _log(where="strategy", device=device)
    return st.integers(0, 9).map(lambda n: Case("context_logged", {}, ({"op": "x", "n": n},), tuple(faults)))


def run(case, ctx):
    _log(where="run", device=ctx.device, visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
         **{f"context_{k}": v for k, v in ctx.context.to_dict().items()})
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if op["n"] >= 7:
                raise ValueError("planted")


TARGET = Target("context_logged", "logs its device and context", cases, run)
