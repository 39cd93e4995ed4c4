"""Targets for test_trust.py, each misbehaving in one way. Loaded as FILE.py:OBJ (a user's target).

Environment (the workers inherit it): TRUST_MARK_FILE, if set, gets a line each time a case
starts; TRUST_SLEEP_S makes each case of OK sleep; TRUST_ONCE_FILE is FLAKY's "crashed once"
marker.
"""

import os
import signal
import sys
import time

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target


def _cases(name, values=None):
    values = st.integers(0, 10**6) if values is None else values

    def cases(faults=(), *, max_ops=5):
        return values.map(lambda n: Case(name, {}, ({"op": "x", "n": n},), tuple(faults)))
    return cases


def _started() -> None:
    path = os.environ.get("TRUST_MARK_FILE")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")


def run_ok(case, ctx):
    _started()
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            time.sleep(float(os.environ.get("TRUST_SLEEP_S", "0")))


def run_buggy(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if "boom" in ctx.faults and op["n"] >= 500:
                raise ValueError("planted boom")


def run_typed(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            sum(range(op["n"]))  # a string here would crash: the schema must stop it first


def run_flaky(case, ctx):
    once = os.environ["TRUST_ONCE_FILE"]
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if not os.path.exists(once):
                open(once, "w").close()
                os._exit(3)  # the worker dies, this first time only


def run_dies_once_then_reads_unwritten(case, ctx):
    """A garbage-index bug that kills the first run only: every run reads never-written memory."""
    import torch
    once = os.environ["TRUST_ONCE_FILE"]
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            index = torch.empty(4, dtype=torch.int64)
            if not os.path.exists(once):
                open(once, "w").close()
                os._exit(3)
            _ = index + 1


def run_misbehave(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            what = op["op"]
            if what == "exit0":
                sys.exit(0)
            if what == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(30)
            if what == "chatty":
                for _ in range(op.get("mb", 3)):
                    sys.stdout.write("x" * (1 << 20) + "\n")
                sys.stdout.flush()


TYPED_SCHEMA = {"type": "object", "properties": {"ops": {"type": "array", "items": {
    "type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 0}}}}}}

OK = Target("ok", "fault-free", _cases("ok"), run_ok)
NOTHING = Target("nothing", "makes no case", lambda faults=(), *, max_ops=5: st.nothing(), run_ok)
FILTERED = Target("filtered", "filters out every case", lambda faults=(), *, max_ops=5:
                  _cases("filtered")(faults).filter(lambda c: False), run_ok)
BUGGY = Target("buggy", "a bug behind a planted fault", _cases("buggy", st.integers(0, 1000)), run_buggy,
               faults=("boom",), fault_descriptions={"boom": "raises on n >= 500"})
TYPED = Target("typed", "a schema; half its cases break it", _cases("typed", st.one_of(
    st.integers(0, 9), st.just("three"))), run_typed, schema=TYPED_SCHEMA)
FLAKY = Target("flaky", "the worker dies once", _cases("flaky"), run_flaky)
DIES_ONCE_READS = Target("dies_once_reads", "dies once; every run reads unwritten memory",
                         _cases("dies_once_reads"), run_dies_once_then_reads_unwritten)
MISBEHAVE = Target("misbehave", "exits, signals itself, floods its output", _cases("misbehave"), run_misbehave)
