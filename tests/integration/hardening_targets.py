"""Targets for test_hardening.py, each failing in its own way. Loaded as FILE.py:OBJ (a user's target)."""

import time

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target


def run_ok(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            pass


def run_sleepy(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            time.sleep(3600)


def _one(name):
    def cases(faults=(), *, max_ops=5):
        return st.just(Case(name, {}, ({"op": "x", "n": 0},), tuple(faults)))
    return cases


def cases_raise(faults=(), *, max_ops=5):
    raise ValueError("my cases() is broken")


def cases_draw_raises(faults=(), *, max_ops=5):
    return st.integers(0, 10).map(lambda n: {"x": n}["y"])


def cases_old(faults=()):
    return st.just(Case("old", {}, ({"op": "x"},)))


SLEEPY = Target("sleepy", "every case hangs", _one("sleepy"), run_sleepy)
CASES_RAISE = Target("cases_raise", "cases() raises", cases_raise, run_ok)
DRAW_RAISES = Target("draw_raises", "its strategy raises while drawing", cases_draw_raises, run_ok)
NOT_A_STRATEGY = Target("not_a_strategy", "cases() returns a list", lambda faults=(), *, max_ops=5: [1, 2], run_ok)
OLD_SIGNATURE = Target("old_signature", "cases(faults) without max_ops", cases_old, run_ok)
