"""A tiny, fast target for the Ray cluster tests: no torch, planted faults.

``planted``: an op of value 10 or more raises ``ValueError``. With ``by_node`` too, it raises ``KeyError``
instead on a node whose raylet was started with ``FUZZ_NODE=b``: that finding can only come
from a shard on that node. ``slow``: each case takes 50 ms (a campaign to lose a node in).
"""

import os
import time

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target


def cases(faults=(), *, max_ops=4):
    return st.lists(st.integers(0, 20), min_size=1, max_size=max_ops).map(
        lambda values: Case("ray_toy", {}, tuple({"op": "step", "n": v} for v in values), tuple(faults)))


def run(case, ctx):
    if "slow" in case.faults:
        time.sleep(0.05)
    on_b = "by_node" in case.faults and os.environ.get("FUZZ_NODE") == "b"
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if "planted" in case.faults and op["n"] >= 10:
                raise (KeyError if on_b else ValueError)("planted fault")


TARGET = Target("ray_toy", "a fast target for the Ray tests", cases, run, faults=("planted", "by_node", "slow"))
