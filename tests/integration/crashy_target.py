"""A test target that misbehaves on purpose: segfault, os._exit, hang, Python exception."""

import ctypes
import os
import time

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target

ACTIONS = ("ok", "raise", "exit", "segfault", "hang")


def cases(faults=(), *, max_ops=5):
    return st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=3).map(
        lambda acts: Case("crashy", {}, tuple({"op": a} for a in acts), tuple(faults)))


def run(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            action = op["op"]
            if action == "raise":
                raise ValueError("planted exception")
            if action == "exit":
                os._exit(7)
            if action == "segfault":
                ctypes.string_at(0)
            if action == "hang":
                time.sleep(3600)


TARGET = Target("crashy", "misbehaves on purpose", cases, run)
