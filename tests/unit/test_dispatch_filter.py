"""The device shadow's dispatch filter (fuzzrunner/oracles/shadow/gpu/dispatch_filter.py): ops the mode would only
run skip it, the others reach it as before, and without the filter the oracle gives the same reports."""

import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuzzrunner import track
from fuzzrunner.oracles.shadow.gpu import dispatch_filter
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle

needs_filter = pytest.mark.skipif(dispatch_filter.get() is None,
                                  reason=f"the dispatch filter cannot be built here: {dispatch_filter.status()}")


class _Counting(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _case(above: TorchDispatchMode | None = None):
    """Op 0 writes a per-step buffer; op 1 works on untracked tensors (twice: an op is named at its first
    dispatch), then reads the buffer without writing it (a stale read) with an op already named."""
    oracle = GpuShadowOracle("cpu")
    oracle.start()
    seen: list = []
    real = type(oracle._mode)._dispatch

    def counted(self, func, *a, **k):
        seen.append(func.__name__)
        return real(self, func, *a, **k)
    type(oracle._mode)._dispatch = counted
    try:
        buf = track(torch.zeros(8), "buf", per_step=True)
        oracle.begin_op(0, {"op": "step"})
        buf.fill_(1.0)
        oracle.begin_op(1, {"op": "step"})
        a = torch.randn(16)
        if above is not None:
            above.__enter__()
        try:
            for _ in range(2):
                seen.clear()
                b = torch.mul(a + 1, 2)
            untracked = list(seen)
            a.sum()  # ``sum`` named on untracked memory: the tracked read below is the filter's to send on
            buf.sum()
        finally:
            if above is not None:
                above.__exit__(None, None, None)
        assert torch.equal(b, (a + 1) * 2)
    finally:
        type(oracle._mode)._dispatch = real
        vs = oracle.finish()
    return [(v.kind, v.tensor, v.details.get("op_index")) for v in vs], untracked


@needs_filter
def test_ops_on_untracked_memory_skip_the_mode_and_a_read_of_tracked_memory_reaches_it():
    native, _ = dispatch_filter.get().counts()
    reports, untracked = _case()
    assert reports == [("stale-read", "buf", 1)]
    assert untracked == []  # add and mul on untracked tensors: past the mode, once named
    assert dispatch_filter.get().counts()[0] > native
    assert not dispatch_filter.get().included()  # the key is left as it was before the case


@needs_filter
def test_a_mode_above_the_oracles_sees_every_op_and_the_oracle_still_reports():
    """Another mode on the stack: the filter lets nothing past (that mode's ops would be lost)."""
    counting = _Counting()
    reports, untracked = _case(above=counting)
    assert reports == [("stale-read", "buf", 1)]
    assert counting.names.count("add.Tensor") == 2 and counting.names.count("mul.Tensor") == 2


@needs_filter
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_result_in_memory_a_record_still_names_drops_the_record(device):
    """A result of an op past the mode, in memory where a record of freed memory lies (one no death watch
    ends: an adopted tensor's), drops that record before the next lookup, as the mode's ``_allocations`` did.
    (CUDA's caching allocator hands the freed block back at once; the CPU's may not.)"""
    oracle = GpuShadowOracle(device)
    oracle.start()
    try:
        oracle.begin_op(0, {"op": "step"})
        a = torch.randn(256, device=device)
        torch.mul(a, 2)  # named by the mode
        for _ in range(200):  # find a freed block that the allocator hands back
            with torch._C._DisableTorchDispatch():  # (unseen by the mode: no record, no death watch)
                old = torch.empty(256, device=device)
            ptr = old.data_ptr()
            oracle.shadow.add(ptr, 1024, "freed", per_step=True, initialized=False, itemsize=4, shape=(256,))
            del old
            out = torch.mul(a, 2)
            if out.data_ptr() == ptr:
                break
            oracle.shadow.remove(oracle.shadow.overlapping(ptr, 1024)[0])
        else:
            pytest.skip(f"the {device} allocator never handed a freed block back here")
        assert oracle.tracked_near([(ptr, 1024)]) == []  # dropped at the lookup
        out.sum()
        oracle.begin_op(1, {"op": "step"})
        out.sum()
    finally:
        vs = oracle.finish()
    assert [v.kind for v in vs] == []  # a written result: nothing read of the freed record's epochs


def test_without_the_filter_the_oracle_reports_the_same_and_says_why(tmp_path):
    """No compiler (``CXX=false``, a fresh cache): the filter is off, with the reason, and the mode sees every op."""
    code = ("from fuzzrunner.oracles.shadow.gpu import dispatch_filter as d; import test_dispatch_filter as t; "
            "print(d.status()); print(t._case())")
    env = {**os.environ, "CXX": "false", "FUZZRUNNER_CACHE_DIR": str(tmp_path), "FUZZRUNNER_DEVICE": "cpu",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    status, result = out.stdout.strip().splitlines()[-2:]
    assert status.startswith("off (RuntimeError: the C++ build failed (false)")
    assert result == "([('stale-read', 'buf', 1)], ['add.Tensor', 'mul.Tensor'])"  # the mode saw them
