"""Targets for test_hardening.py, each failing in its own way. Loaded as FILE.py:OBJ (a user's target)."""

import ctypes
import os
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


def run_interrupts(case, ctx):
    raise KeyboardInterrupt("the target's own")


def run_raises(case, ctx):
    raise ValueError("my runner is broken")


def run_segfaults(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            ctypes.string_at(0)


def run_exits(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            os._exit(3)


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
INTERRUPTS = Target("interrupts", "raises KeyboardInterrupt before its first op", _one("interrupts"), run_interrupts)
RAISES = Target("raises", "raises ValueError before its first op", _one("raises"), run_raises)
SEGFAULTS = Target("segfaults", "every case segfaults in its first op", _one("segfaults"), run_segfaults)
EXITS = Target("exits", "every case calls os._exit(3) in its first op", _one("exits"), run_exits)
