"""A test target whose cases are not independent on purpose: a case's ``arm`` op leaves a module-level value that
a later case's ``use`` op of the same worker reads (as SGLang's per-process kernel cache did for sglang_engine's
GPU NaN 2f9d344978cd). A ``use`` case run alone is silent."""

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target

_LEFT: list = []  # what earlier cases of this process left


def cases(faults=(), *, max_ops=3):
    return st.sampled_from(["arm", "use", "noop"]).map(lambda op: Case("stateful", {}, ({"op": op},), tuple(faults)))


def run(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if op["op"] == "arm":
                _LEFT.append(i)
            elif op["op"] == "use":
                ctx.check("left", [f"an earlier case left {len(_LEFT)} value(s)"] if _LEFT else [])


TARGET = Target("stateful", "a later case reads what an earlier one left", cases, run)
