"""The device mode's dispatch mode around ``tracking.quiet()``: it steps aside for the block where it is
the innermost mode (the block's ops then cost nothing), stays where another mode sits above it, and in
both cases the block's ops are unseen and the ops after it are checked again."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
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


@pytest.mark.interpreter
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


@pytest.mark.interpreter
def test_a_mode_above_the_device_mode_keeps_it_and_quiet_ops_are_still_unseen():
    counting = _Counting()
    assert _stale_reads(GpuShadowOracle("cpu"), quiet_read=True, above=counting) == []
    assert counting.ops >= 2  # the mode above saw the block's ops; the device mode stayed below it
    counting = _Counting()
    assert _stale_reads(GpuShadowOracle("cpu"), quiet_read=False, above=counting) == [("stale-read", "buf", 1)]


_OP = st.lists(st.tuples(st.sampled_from(["write", "read"]), st.integers(0, 8), st.integers(0, 8)),
               min_size=1, max_size=4)


def _torch_program(oracle, ops: list) -> list:
    """Per op: writes and reads of slices of a per-step buffer inside a tracked storage (whole writes,
    partial writes after them, reads of either), run under ``oracle``; its verdicts."""
    oracle.start()
    try:
        storage = track(torch.zeros(12), "storage")
        buf = track(storage[2:10], "buf", per_step=True)
        for i, steps in enumerate(ops):
            oracle.begin_op(i, {"op": "step"})
            for kind, a, b in steps:
                lo, hi = min(a, b), max(a, b) + 1
                if kind == "write":
                    buf[lo:hi].fill_(float(i)) if hi - lo < 9 else buf.fill_(float(i))
                else:
                    buf[lo:hi].sum()
    finally:
        vs = oracle.finish()
    return sorted((v.kind, v.tensor, v.details.get("op_index"), tuple(v.details.get("element", ()))) for v in vs)


@pytest.mark.interpreter
@settings(max_examples=150, deadline=None)
@given(st.lists(_OP, min_size=1, max_size=3))
def test_writes_after_a_whole_write_in_one_op_give_the_cpu_oracles_verdicts(ops):
    """A region written whole in an op is not stamped again by later writes in that op (they would stamp
    the same epoch): the verdicts stay the CPU oracle's, op by op and element by element."""
    from fuzzrunner.oracles.shadow import ShadowOracle
    assert _torch_program(GpuShadowOracle("cpu"), ops) == _torch_program(ShadowOracle(), ops)


@pytest.mark.interpreter
def test_a_mode_entered_inside_quiet_and_left_after_it_keeps_the_device_mode_below_it():
    """The device mode goes back where it was, under a mode entered during the block: that mode's exit
    takes itself off, and the device mode goes on checking (a stale read after it is reported)."""
    o = GpuShadowOracle("cpu")
    user = _Counting()
    o.start()
    try:
        buf = track(torch.zeros(8), "buf", per_step=True)
        o.begin_op(0, {"op": "step"})
        buf.fill_(1.0)
        o.begin_op(1, {"op": "step"})
        with tracking.quiet():
            user.__enter__()
        assert _get_current_dispatch_mode() is user
        user.__exit__(None, None, None)
        assert isinstance(_get_current_dispatch_mode(), DeviceTorchMode)
        buf.sum()
    finally:
        vs = o.finish()
    assert [(v.kind, v.tensor, v.details.get("op_index")) for v in vs] == [("stale-read", "buf", 1)]
    assert _get_current_dispatch_mode() is None


def test_finish_inside_quiet_leaves_no_mode_behind():
    o = GpuShadowOracle("cpu")
    o.start()
    with tracking.quiet():
        assert o.finish() == []
        assert _get_current_dispatch_mode() is None
    assert _get_current_dispatch_mode() is None  # the block's end did not put the finished mode back


def test_a_watcher_raising_at_the_block_end_leaves_the_thread_not_quiet():
    class Raising(tracking.Watcher):
        def quiet_end(self, token):
            raise RuntimeError("watcher failed")
    o = GpuShadowOracle("cpu")
    o.start()
    try:
        with tracking.watch(Raising()):
            with pytest.raises(RuntimeError, match="watcher failed"), tracking.quiet():
                pass
        assert not tracking.is_quiet()
        assert isinstance(_get_current_dispatch_mode(), DeviceTorchMode)  # the oracle heard the end too
    finally:
        o.finish()


_SETTLED_STEP = st.one_of(
    st.tuples(st.sampled_from(["write", "read", "sub"]), st.sampled_from(["zeros", "empty"]), st.integers(0, 7),
              st.integers(0, 7)),
    st.tuples(st.just("write"), st.sampled_from(["zeros", "empty"]), st.just(0), st.just(7)),  # whole
    st.tuples(st.just("flip"), st.sampled_from(["zeros", "empty"]), st.just(0), st.just(0)))


class _StampingAll(GpuShadowOracle):
    """The device mode stamping every eager write but those of a region written whole in the op."""

    def unstamped(self, region, t) -> bool:
        return self.stamped_now(region)


def _settled_program(oracle, ops: list) -> list:
    """Per op: whole and partial writes and reads of two non-per-step buffers (one tracked written, one
    ``torch.empty``), some made per-step (``flip``) or given a tracked per-step view (``sub``) on the way."""
    oracle.start()
    try:
        bufs = {"zeros": track(torch.zeros(8), "zeros"), "empty": torch.empty(8)}
        for i, steps in enumerate(ops):
            oracle.begin_op(i, {"op": "step"})
            for kind, which, a, b in steps:
                buf = bufs[which]
                lo, hi = min(a, b), max(a, b) + 1
                if kind == "write":
                    buf[lo:hi].fill_(float(i)) if hi - lo < 8 else buf.fill_(float(i))
                elif kind == "read":
                    buf[lo:hi].sum()
                elif kind == "flip":
                    track(buf, which, per_step=True)
                else:
                    track(buf[lo:hi], f"{which}.sub", per_step=True)
    finally:
        vs = oracle.finish()
    return sorted((v.kind, v.tensor, v.details.get("op_index"), tuple(v.details.get("element", ()))) for v in vs)


@pytest.mark.interpreter
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_SETTLED_STEP, min_size=1, max_size=6), min_size=2, max_size=4))
def test_writes_left_unstamped_in_settled_regions_change_no_verdict(ops):
    """A region written whole, not per-step and not shared is not stamped by later writes (its epochs
    only say "written"); when it becomes per-step (or a tracked view shares its shadow) the writes left out
    in that op are stamped then. The verdicts are those of stamping every write, op by op and element by
    element. (Against the device mode itself: the CPU oracle differs on tracked views made mid-op, as
    before this skip; see test_writes_after_a_whole_write_in_one_op_give_the_cpu_oracles_verdicts.)"""
    assert _settled_program(GpuShadowOracle("cpu"), ops) == _settled_program(_StampingAll("cpu"), ops)


@pytest.mark.interpreter
def test_a_settled_region_is_not_stamped_and_its_writes_of_the_op_are_stamped_when_it_turns_per_step():
    """The skip happens (no stamp while settled), and is undone exactly: written in op 1 without a stamp,
    made per-step in op 1, read in op 1 (fine) and in op 2 (stale)."""
    o = GpuShadowOracle("cpu")
    o.start()
    try:
        buf = track(torch.zeros(8), "buf")
        o.begin_op(0, {"op": "step"})
        buf[2:4].fill_(1.0)
        region = o.regions_of(buf)[0]
        assert region.settled() and int(region.shadow[2]) == 0  # epoch 0: set up, the op-0 write left out
        o.begin_op(1, {"op": "step"})
        buf[2:4].fill_(2.0)
        track(buf, "buf", per_step=True)
        assert int(region.shadow[2]) == 2 and int(region.shadow[0]) == 0
        buf[2:4].sum()
        o.begin_op(2, {"op": "step"})
        buf[3:4].sum()
        buf[4:5].sum()
    finally:
        vs = o.finish()
    assert sorted((v.kind, v.details["op_index"], tuple(v.details.get("element", ()))) for v in vs) == [
        ("stale-read", 2, (3,)), ("stale-read", 2, (4,))]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([torch.int8, torch.int16, torch.int32, torch.int64]), st.integers(1, 12), st.booleans(),
       st.lists(st.integers(-20, 20), min_size=1, max_size=30))
@pytest.mark.interpreter
def test_index_bounds_redirects_and_logs_what_the_torch_ops_did(dtype, n, neg, values):
    """The device mode's one-launch bounds check of an index tensor (on a GPU; here in the interpreter, with
    blocks smaller than the tensor) redirects to 0 exactly the entries the torch ops redirect (``ix < lo``
    or ``ix >= n``) and logs their count, the first one's position and its index."""
    from fuzzrunner.oracles.shadow.gpu import device_checks as dc
    ix = torch.tensor(values, dtype=dtype)
    lo = -n if neg else 0
    bad = (ix < lo) | (ix >= n)
    out, row = torch.empty_like(ix), torch.full((4,), -7, dtype=torch.int64)
    dc.index_bounds[(1,)](ix, out, ix.numel(), lo, n, row, BLOCK=8)
    assert torch.equal(out, ix.masked_fill(bad, 0))
    first = int(bad.to(torch.int8).argmax()) if bad.any() else 0
    assert row.tolist() == [int(bad.sum()), int(bad.sum()), first, int(ix[first]) if bad.any() else 0]


@pytest.mark.interpreter
@pytest.mark.parametrize("kernel", [False, True], ids=["torch-ops", "index_bounds"])
def test_an_index_out_of_range_reads_the_same_by_either_bounds_check(kernel):
    """The GPU's one-launch bounds check (forced here, in the interpreter) and the CPU's torch ops give
    the same report: the indexed tensor, the first bad index, the count; the op runs on redirected rows."""
    o = GpuShadowOracle("cpu")
    o.bounds_kernel = kernel
    o.start()
    try:
        table = track(torch.arange(12.0).reshape(6, 2), "table")
        o.begin_op(0, {"op": "step"})
        rows = torch.index_select(table, 0, torch.tensor([1, 9, 2, -1, 7]))
        o.begin_op(1, {"op": "step"})
        torch.index_select(table, 0, torch.tensor([0, 5]))  # in range: nothing
    finally:
        vs = o.finish()
    assert rows[:, 0].tolist() == [2.0, 0.0, 4.0, 0.0, 0.0]
    assert [(v.kind, v.tensor, v.details["index"], v.details["rows"], v.details["op_index"], "3 such" in v.message) for v in vs] == [
        ("out-of-bounds", "table", 9, 6, 0, True)]


def test_a_storage_tracked_every_op_is_watched_once_and_not_past_the_case():
    """A runner may track its buffers at every step: one watch for its storage's death (not one per track, each
    living as long as the storage), and none left after the case (``finish``)."""
    import weakref

    def watches() -> int:
        return len(weakref.finalize._registry)  # type: ignore[attr-defined]  (the live finalizers)
    buf = torch.zeros(8)
    before = watches()
    oracle = GpuShadowOracle("cpu")
    oracle.start()
    try:
        for i in range(10):
            oracle.begin_op(i, {"op": "step"})
            track(buf, "buf", per_step=True)
        during = watches()
    finally:
        oracle.finish()
    after = watches()
    assert during - before == 1
    assert after == before

