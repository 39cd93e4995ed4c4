"""The device mode's dispatch mode around ``tracking.quiet()``: it steps aside for the block where it is
the innermost mode (the block's ops then cost nothing), stays where another mode sits above it, and in
both cases the block's ops are unseen and the ops after it are checked again."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from fuzzrunner import track, tracking
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
from fuzzrunner.oracles.shadow.gpu.torch_mode import DeviceTorchMode


class _Counting(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def _stale_reads(oracle, quiet_read: bool, above=None) -> list:
    """Op 0 writes ``buf``; op 1 reads it without writing it (a stale read), inside quiet or not."""
    oracle.start()
    try:
        buf = track(torch.zeros(8), "buf", per_step=True)
        oracle.begin_op(0, {"op": "step"})
        buf.fill_(1.0)
        oracle.begin_op(1, {"op": "step"})
        if above is not None:
            above.__enter__()
        try:
            if quiet_read:
                with tracking.quiet():
                    with tracking.quiet():  # nested: the outermost block alone steps the mode aside
                        buf.sum()
                    buf.sum()
            else:
                buf.sum()
        finally:
            if above is not None:
                above.__exit__(None, None, None)
    finally:
        vs = oracle.finish()
    return [(v.kind, v.tensor, v.details.get("op_index")) for v in vs]


def test_a_stale_read_is_reported_outside_quiet_and_not_inside():
    assert _stale_reads(GpuShadowOracle("cpu"), quiet_read=False) == [("stale-read", "buf", 1)]
    assert _stale_reads(GpuShadowOracle("cpu"), quiet_read=True) == []


def test_quiet_steps_the_innermost_device_mode_aside_and_puts_it_back():
    o = GpuShadowOracle("cpu")
    o.start()
    try:
        assert isinstance(_get_current_dispatch_mode(), DeviceTorchMode)
        with tracking.quiet():
            assert _get_current_dispatch_mode() is None  # the block's ops never reach the mode
            with tracking.quiet():
                assert _get_current_dispatch_mode() is None
            assert _get_current_dispatch_mode() is None
        assert isinstance(_get_current_dispatch_mode(), DeviceTorchMode)
        with pytest.raises(ZeroDivisionError), tracking.quiet():
            raise ZeroDivisionError
        assert isinstance(_get_current_dispatch_mode(), DeviceTorchMode)  # back after an exception too
    finally:
        o.finish()
    assert _get_current_dispatch_mode() is None


def test_a_mode_above_the_device_mode_keeps_it_and_quiet_ops_are_still_unseen():
    counting = _Counting()
    assert _stale_reads(GpuShadowOracle("cpu"), quiet_read=True, above=counting) == []
    assert counting.ops >= 2  # the mode above saw the block's ops; the device mode stayed below it
    counting = _Counting()
    assert _stale_reads(GpuShadowOracle("cpu"), quiet_read=False, above=counting) == [("stale-read", "buf", 1)]
