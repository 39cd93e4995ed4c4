"""The shadow oracle on other Python threads: worker ops are checked and named, nothing leaks
past the case, and concurrent threads keep the shadow memory consistent."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from fuzzrunner import tracking
from fuzzrunner.oracles.shadow import ShadowOracle


def _run(program):
    o = ShadowOracle(check_triton=False)
    o.start()
    o.begin_op(0, {"op": "step"})
    try:
        program()
    finally:
        vs = o.finish()
    return vs


def _stack_len_on(ex: ThreadPoolExecutor) -> int:
    return ex.submit(torch._C._len_torch_dispatch_stack).result()


def test_a_workers_read_names_its_thread():
    def program():
        buf = torch.empty(4)
        with ThreadPoolExecutor(1, thread_name_prefix="prep") as ex:
            ex.submit(buf.sum).result()
    (v,) = _run(program)
    assert v.kind == "uninitialized-read"
    assert v.details["thread"].startswith("prep")
    assert "(on thread 'prep" in v.message
    assert v.location.startswith("test_shadow_threads.py:")  # a builtin submitted: blamed at its submit line


def test_a_read_on_the_case_thread_names_no_other_thread():
    (v,) = _run(lambda: torch.empty(4).sum())
    assert v.details["thread"] == threading.current_thread().name
    assert "on thread" not in v.message


def test_nothing_is_left_on_pool_threads_or_patched_after_the_case():
    submit, start = ThreadPoolExecutor.submit, threading.Thread.start
    ex = ThreadPoolExecutor(1)
    seen = []
    _run(lambda: seen.append(_stack_len_on(ex)))
    assert seen == [1]  # the mode was there during the case
    assert _stack_len_on(ex) == 0
    assert ThreadPoolExecutor.submit is submit and threading.Thread.start is start
    ex.shutdown()


@pytest.mark.parametrize("mode", ["cpu oracle", "device mode"])
def test_a_thread_that_outlives_its_case_keeps_an_inert_mode(mode):
    from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
    go, done = threading.Event(), threading.Event()
    out = {}
    oracle = ShadowOracle(check_triton=False) if mode == "cpu oracle" else GpuShadowOracle("cpu")

    def worker():
        go.wait()
        try:
            out["sum"] = torch.empty(3).fill_(1).sum()  # after the case: runs, reports nothing
        finally:
            done.set()

    oracle.start()
    t = threading.Thread(target=worker)
    t.start()
    vs = oracle.finish()
    go.set()
    done.wait()
    t.join()
    assert "sum" in out, "the thread's op raised under the mode left on it"
    assert vs == [] and oracle.reporter.violations() == [] and float(out["sum"]) == 3.0


def test_quiet_on_one_thread_does_not_silence_another():
    def program():
        buf = torch.empty(4)
        with tracking.quiet(), ThreadPoolExecutor(1) as ex:
            ex.submit(buf.sum).result()
    assert [v.kind for v in _run(program)] == ["uninitialized-read"]


def test_concurrent_writers_keep_the_shadow_consistent():
    def program():
        bufs = [torch.empty(64) for _ in range(8)]

        def fill(b):
            for i in range(0, 64, 4):
                b[i:i + 4] = float(i)
                torch.empty(16).zero_()  # allocations and writes from every thread at once

        with ThreadPoolExecutor(4) as ex:
            list(ex.map(fill, bufs))
        for b in bufs:
            b.sum()
    assert _run(program) == []


def _child_is_unchecked():
    from fuzzrunner.oracles.shadow.threads import ACTIVE
    torch.empty(4).sum()
    raise SystemExit(0 if ACTIVE and all(o.paused() for o in ACTIVE) else 3)


def test_a_fork_child_runs_unchecked():
    import multiprocessing
    codes = []

    def program():
        p = multiprocessing.get_context("fork").Process(target=_child_is_unchecked)
        p.start()
        p.join()
        codes.append(p.exitcode)
    assert _run(program) == [] and codes == [0]
