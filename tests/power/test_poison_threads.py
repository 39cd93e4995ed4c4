"""The poison oracle on the case's other threads: memory a target allocates with ``torch.empty`` on a
thread of its own (an overlap scheduler preparing the next batch, a pool filling inputs) is poisoned as
on the case's own thread, so a read of it that was never written differs between the two patterns.

A torch dispatch mode is thread-local: before, the poison mode was entered on the case's thread only,
the thread's ``torch.empty`` came back unfilled (the same garbage in both runs) and the oracle passed."""

import threading
from concurrent.futures import ThreadPoolExecutor

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.execute import run_case


class _ThreadedTarget:
    """Each op prepares a batch on another thread: ``torch.empty(size)``, of which ``written`` elements are
    set (all of them when correct), then summed; the op's output is the sum."""

    def __init__(self, how: str):
        self.how = how

    def _prepare(self, size: int, written: int, dtype: torch.dtype) -> torch.Tensor:
        batch = torch.empty(size, dtype=dtype)
        batch[:written] = torch.arange(written, dtype=dtype)
        return batch.sum().reshape(1)

    def _on_thread(self, size: int, written: int, dtype: torch.dtype) -> torch.Tensor:
        if self.how == "pool":
            with ThreadPoolExecutor(1, thread_name_prefix="overlap") as ex:
                return ex.submit(self._prepare, size, written, dtype).result()
        box: list = []
        t = threading.Thread(target=lambda: box.append(self._prepare(size, written, dtype)), name="overlap")
        t.start()
        t.join()
        return box[0]

    def run(self, case, ctx) -> None:
        dtype = getattr(torch, case.config["dtype"])
        for i, op in enumerate(case.ops):
            with ctx.op(i, op):
                ctx.output("batch_sum", self._on_thread(op["size"], op["written"], dtype))


def _case(ops, dtype="int64") -> Case:
    return Case("threaded", {"dtype": dtype}, tuple(ops))


def _poison(target, case):
    return run_case(case, target, oracles=["poison"], device="cpu")


def test_an_uninitialized_read_of_memory_a_thread_allocated_is_caught():
    for how in ("thread", "pool"):
        for dtype in ("int64", "float32"):
            vs = _poison(_ThreadedTarget(how), _case([{"op": "prepare", "size": 8, "written": 8},
                                                      {"op": "prepare", "size": 8, "written": 5}], dtype))
            assert [(v.kind, v.tensor, v.details["op_index"]) for v in vs] == \
                [("poison-divergence", "batch_sum", 1)], (how, dtype, vs)
            assert "torch.empty" in vs[0].details["poisoned"]


_OPS = st.lists(st.integers(1, 64).map(lambda n: {"op": "prepare", "size": n, "written": n}), min_size=1,
                max_size=4)


@settings(max_examples=60, deadline=None)
@given(ops=_OPS, how=st.sampled_from(["thread", "pool"]), dtype=st.sampled_from(["int64", "int32", "float32", "float16"]))
def test_a_correct_threaded_target_gives_no_finding(ops, how, dtype):
    assert _poison(_ThreadedTarget(how), _case(ops, dtype)) == []


def test_nothing_of_the_fill_is_left_after_the_case():
    """``submit`` and ``Thread.start`` are restored, and a thread started in the case that outlives it keeps an
    inert mode: its later ``torch.empty`` is not filled (nor counted) by a case that is over."""
    from fuzzrunner.oracles.poison import PATTERNS, PoisonFill
    submit, start = ThreadPoolExecutor.submit, threading.Thread.start
    go, made = threading.Event(), []

    def later():
        go.wait(30)
        made.append(torch.empty(4, dtype=torch.int64))

    fill = PoisonFill(PATTERNS[0])
    fill.start()
    try:
        t = threading.Thread(target=later)
        t.start()
    finally:
        fill.finish()
    assert ThreadPoolExecutor.submit is submit and threading.Thread.start is start
    go.set()
    t.join(30)
    assert made and fill.poisoned == set()  # (a live mode would have filled it and said so)
