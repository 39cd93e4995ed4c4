"""Targets for test_hardening.py (issue 23, the engine half), each hostile in one way. Loaded as
FILE.py:OBJ, as a user's target is.

Environment (the workers inherit it): HOSTILE_MARK_FILE gets a line each time a case starts;
HOSTILE_SLEEP_S makes each case of SLEEPY sleep; HOSTILE_LEAK_MB is how much LEAKY keeps per case.
"""

import os
import time

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target


class TargetsOwnBaseException(BaseException):
    """A BaseException that is neither SystemExit nor KeyboardInterrupt."""


RAISED = {"KeyboardInterrupt": KeyboardInterrupt, "GeneratorExit": GeneratorExit,
          "TargetsOwnBaseException": TargetsOwnBaseException}


def _cases(name, values=None):
    values = st.integers(0, 1000) if values is None else values

    def cases(faults=(), *, max_ops=5):
        return values.map(lambda n: Case(name, {}, ({"op": "x", "n": n},), tuple(faults)))
    return cases


def _started() -> None:
    path = os.environ.get("HOSTILE_MARK_FILE")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")


def run_raises(case, ctx):
    """Raises the BaseException its op names (``what``), or a KeyboardInterrupt when n >= 500."""
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            what = op.get("what") or ("KeyboardInterrupt" if op["n"] >= 500 else "")
            if what:
                raise RAISED[what]("raised by the target")


def run_sleepy(case, ctx):
    _started()
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            time.sleep(float(os.environ.get("HOSTILE_SLEEP_S", "0")))


_kept: list = []


def run_leaky(case, ctx):
    """Keeps HOSTILE_LEAK_MB of touched memory per case, for ever (a cache that never evicts)."""
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            _kept.append(bytearray(os.urandom(16)) * (int(os.environ.get("HOSTILE_LEAK_MB", "20")) << 16))


RAISES = Target("raises", "raises KeyboardInterrupt (or another BaseException) in run", _cases("raises"),
                run_raises)
SLEEPY = Target("sleepy", "each case sleeps HOSTILE_SLEEP_S", _cases("sleepy"), run_sleepy)
LEAKY = Target("leaky", "keeps HOSTILE_LEAK_MB per case", _cases("leaky"), run_leaky)
