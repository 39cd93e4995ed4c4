"""A user-style target for test_coverage_campaign.py: cheap cases, declared features, a log of the valid cases run.

COVERAGE_LOG (the workers inherit it): each case that runs appends its JSON as one line.
"""

import json
import os

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target

KINDS = ("a", "b", "c", "bad")


def cases(faults=(), *, max_ops=4):
    op = st.builds(lambda k, n: {"op": k, "n": n}, st.sampled_from(KINDS), st.integers(0, 3))
    return st.lists(op, min_size=1, max_size=max_ops).map(lambda ops: Case("counted", {}, tuple(ops), tuple(faults)))


def run(case, ctx):
    with open(os.environ["COVERAGE_LOG"], "a") as f:
        f.write(json.dumps(case.to_dict()) + "\n")


def features(case):
    yield from (f"op={op['op']}" for op in case.ops)
    yield f"ops={len(case.ops)}"


SCHEMA = {"type": "object", "properties": {"ops": {"type": "array", "items": {
    "type": "object", "properties": {"op": {"enum": ["a", "b", "c"]}}}}}}  # "bad" ops are invalid input

COUNTED = Target("counted", "cheap cases with declared features", cases, run, schema=SCHEMA, features=features,
                 feature_space=("op=a", "op=b", "op=c", "op=never", "ops=1", "ops=2", "ops=3", "ops=4"))
