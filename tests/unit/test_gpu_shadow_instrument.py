"""The GPU shadow's kernel instrumentation (fuzzrunner/oracles/shadow/gpu/), run where CI runs it:
the instrumented kernel is an ordinary Triton kernel, so Triton's interpreter runs it on the CPU.
Its verdicts are compared with the CPU shadow oracle's on the same generated programs."""

import inspect

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzrunner import _env, track, triton_compat
from fuzzrunner.oracles.base import source_location
from fuzzrunner.oracles.shadow import ShadowOracle
from fuzzrunner.oracles.shadow.gpu.instrument import INSTRUMENTER, NotInstrumentable
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle

pytestmark = pytest.mark.skipif(not _env.interpreted(), reason="the CPU half: Triton's interpreter")
triton_compat.apply()


@triton.jit
def _row(slots, i, n):
    return tl.load(slots + i, mask=i < n, other=0)  # a called helper: instrumented too


@triton.jit
def _gather(slots, table, out, counter, n, W: tl.constexpr, B: tl.constexpr):
    i = tl.arange(0, B)
    s = _row(slots, i, n)
    w = tl.arange(0, W)
    row = tl.load(table + s[:, None] * W + w[None, :], mask=(i < n)[:, None])
    tl.store(out + i[:, None] * W + w[None, :], row, mask=(i < n)[:, None])
    tl.atomic_add(counter + i * 0, 1, mask=i < n)


@triton.jit
def _descriptor(src, dst, N: tl.constexpr):
    d = tl.make_tensor_descriptor(src, shape=[2, N], strides=[N, 1], block_shape=[2, N])
    tl.store(dst + tl.arange(0, 2)[:, None] * N + tl.arange(0, N)[None, :], d.load([0, 0]))


@triton.jit
def _block_ptr(src, dst, N: tl.constexpr):
    p = tl.make_block_ptr(src, shape=(2, N), strides=(N, 1), offsets=(0, 0), block_shape=(2, N), order=(1, 0))
    tl.store(dst + tl.arange(0, 2)[:, None] * N + tl.arange(0, N)[None, :], tl.load(p, boundary_check=(0, 1)))


def _program(oracle, steps):
    """Op by op: write a prefix of the per-step slots, then gather ``n`` rows through them."""
    slots = track(torch.empty(8, dtype=torch.int32), "slots", per_step=True, initialized=False)
    table = track(torch.arange(32, dtype=torch.float32).reshape(4, 8), "table")
    counter = torch.zeros(8, dtype=torch.int32)
    for op, (written, n) in enumerate(steps):
        oracle.begin_op(op, {"op": "step"})
        slots[:written] = op % 4
        out = torch.zeros(8, 8)
        _gather[(1,)](slots, table, out, counter, n, W=8, B=8)
    return out


def _verdicts(oracle, steps):
    oracle.start()
    try:
        _program(oracle, steps)
    finally:
        vs = oracle.finish()
    return sorted((v.kind, v.tensor, v.location, v.details.get("op_index"), tuple(v.details.get("element", ())))
                  for v in vs)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(1, 8)), min_size=1, max_size=3))
def test_the_instrumented_kernel_reports_what_the_cpu_oracle_reports(steps):
    """Silent where every row read was written in this op; the same kind, tensor, kernel line,
    op and element as the CPU oracle where one was not (never written, or written last op)."""
    cpu = _verdicts(ShadowOracle(), steps)
    gpu = _verdicts(GpuShadowOracle("cpu"), steps)
    assert gpu == cpu
    bad = any(n > w for w, n in steps)
    assert bool(cpu) == bad


def test_a_planted_stale_read_names_the_element_the_op_and_the_helper_line():
    lines, first = inspect.getsourcelines(_row.fn)
    line = first + next(i for i, text in enumerate(lines) if "# a called helper" in text)
    vs = _verdicts(GpuShadowOracle("cpu"), [(8, 8), (5, 6)])
    assert vs == [("stale-read", "slots", source_location(__file__, line), 1, (5,))]


def test_a_lane_outside_every_region_is_masked_and_reported_not_dereferenced():
    o = GpuShadowOracle("cpu")
    o.start()
    try:
        o.begin_op(0, {"op": "step"})
        # row 2e8: 6.4 GB past `table` (no int32 overflow in the kernel), outside every live tensor (a row
        # 1e6, 32 MB past it, could land in another test's live tensor in a long-lived xdist worker: that
        # lane is then adopted, a tool-limitation, not reported out of bounds)
        slots = torch.tensor([0, 1, 200_000_000, 2], dtype=torch.int32)
        table = torch.ones(4, 8)
        out = torch.zeros(8, 8)
        _gather[(1,)](slots, table, out, torch.zeros(8, dtype=torch.int32), 4, W=8, B=8)
    finally:
        vs = o.finish()
    assert [(v.kind, v.kernel, v.details.get("access")) for v in vs] == [("out-of-bounds", "_gather", "read")], \
        [v.message for v in vs]
    assert out[2].eq(0).all() and out[3].eq(1).all()  # the bad row read `other`, the rest ran


def test_the_twin_computes_what_the_original_computes():
    table = torch.randn(4, 8)
    slots = torch.tensor([3, 0, 2, 1, 1, 0, 3, 2], dtype=torch.int32)
    want, got = torch.zeros(8, 8), torch.zeros(8, 8)
    c1, c2 = torch.zeros(8, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)
    _gather[(1,)](slots, table, want, c1, 7, W=8, B=8)
    o = GpuShadowOracle("cpu")
    o.start()
    try:
        o.begin_op(0, {"op": "step"})
        _gather[(1,)](slots, table, got, c2, 7, W=8, B=8)
    finally:
        assert o.finish() == []
    assert torch.equal(want, got) and torch.equal(c1, c2)


def test_block_pointers_and_descriptors_are_refused_by_name_and_the_kernel_is_named_unchecked():
    with pytest.raises(NotInstrumentable, match=r"_block_ptr uses a block pointer \(tl.make_block_ptr\) at line"):
        INSTRUMENTER.kernel(_block_ptr)
    o = GpuShadowOracle("cpu")
    o.start()
    try:
        o.begin_op(0, {"op": "step"})
        dst = torch.empty(2, 4)
        _descriptor[(1,)](torch.ones(2, 4), dst, N=4)
        dst.sum()  # written by the unchecked kernel, as far as the shadow knows: no report
    finally:
        vs = o.finish()
    assert [(v.kind, v.kernel) for v in vs] == [("tool-limitation", "_descriptor")]
    assert "ran unchecked on the GPU: _descriptor uses a tensor descriptor" in vs[0].message


@triton.jit
def _ptr_array(ptrs, dst, BLOCK: tl.constexpr):
    slot = tl.program_id(0)
    base = tl.load(ptrs + slot).to(tl.pointer_type(tl.float32))
    i = tl.arange(0, BLOCK)
    tl.store(dst + slot * BLOCK + i, tl.load(base + i))  # a pointer array's target


@pytest.mark.parametrize("bug", [True, False])
def test_a_pointer_array_target_is_followed_and_an_untracked_one_is_named_never_out_of_bounds(bug):
    """vLLM reaches its adapters' weights through a table of pointers: the tracked target's unwritten
    elements are reported; the untracked one (not an argument) is adopted, never out of bounds."""
    o = GpuShadowOracle("cpu")
    o.start()
    try:
        w0, w1 = torch.ones(4), torch.empty(4)  # w0: untracked; w1: torch.empty, tracked
        w1[:2 if bug else 4] = 1.0
        ptrs = torch.tensor([w0.data_ptr(), w1.data_ptr()], dtype=torch.int64)
        for op in range(2):
            o.begin_op(op, {"op": "step"})
            _ptr_array[(2,)](ptrs, torch.zeros(8), BLOCK=4)
            o.end_op()  # the runner (and w0) still alive at the read-back, as in a case
    finally:
        vs = o.finish()
    got = sorted((v.kind, v.details.get("op_index"), tuple(v.details.get("element", ()))) for v in vs)
    want = [("tool-limitation", -1, ())]
    if bug:
        want = [("tool-limitation", -1, ()), ("uninitialized-read", 0, (2,)), ("uninitialized-read", 1, (2,))]
    assert got == want


@triton.jit
def _records(ring, launch, B: tl.constexpr):
    from fuzzrunner.oracles.shadow.gpu.device_checks import _sh_record
    i = tl.arange(0, B).to(tl.int64)
    # lane 0: out of bounds (no region: row -1, an address as element); lane 1: stale, written in epoch 7;
    # lane 2: never written (epoch -1); lane 3: fine (not recorded)
    kind = tl.where(i == 0, 3, tl.where(i == 1, 2, tl.where(i == 2, 1, 0))).to(tl.int64)
    reg = tl.where(i == 0, -1, i + 40)
    elem = tl.where(i == 0, 0x7F0012345678, i * 1000)
    wep = tl.where(i == 1, 7, -1).to(tl.int64)  # int64, as _sh_check passes it
    _sh_record(kind, reg, elem, wep, ring, launch, 2, 745, 32)


def test_a_ring_entry_unpacks_to_what_the_kernel_recorded():
    """The packed ring words (device_checks._sh_record) read back as they were written, the negative
    ones too: no region (-1), never written (-1)."""
    from fuzzrunner.oracles.shadow.gpu import device_checks as dc
    ring = torch.zeros(1 + 32 * dc.WORDS, dtype=torch.int64)
    _records[(3, 1, 2)](ring, 123456, B=4)
    n = int(ring[0])
    got = sorted(dc.unpack(w) for w in ring[1:1 + n * dc.WORDS].view(n, dc.WORDS).tolist())
    want = sorted([k, 2, r, e, p0, 0, p2, 745, w, 123456]
                  for p0 in range(3) for p2 in range(2)
                  for k, r, e, w in ((3, -1, 0x7F0012345678, -1), (2, 41, 1000, 7), (1, 42, 2000, -1)))
    assert n == len(want) and got == want


def test_a_ring_entry_of_an_unknown_launch_is_named_never_dropped_silently():
    """Launch records live for the case, so an entry naming no launch is the oracle's own fault: the
    case says reports may be missing (a tool-limitation), rather than passing in silence."""
    from fuzzrunner.oracles.shadow.gpu import device_checks as dc
    o = GpuShadowOracle("cpu")
    o.start()
    o.begin_op(0, {"op": "step"})
    o._kernel_entries([[dc.STALE, 0, 0, 3, 0, 0, 0, 10, 1, 999]])
    vs = o.finish()
    assert [(v.kind, v.kernel) for v in vs] == [("tool-limitation", "<gpu shadow>")]
    assert "launch 999" in vs[0].message and "may be missing" in vs[0].message


@pytest.mark.parametrize("make", [ShadowOracle, lambda: GpuShadowOracle("cpu")], ids=["cpu", "device"])
def test_a_kernel_launched_inside_quiet_is_checked_in_both_modes(make):
    """``tracking.quiet()`` hides the harness's own torch ops, not kernels: vLLM's registered ops run
    inside it (targets/vllm_lora/api.py) and their kernels' loads are what is checked. A stale read by
    a kernel launched there is reported in both modes, and the quiet torch ops around it are not."""
    from fuzzrunner import tracking
    o = make()
    o.start()
    try:
        slots = track(torch.empty(8, dtype=torch.int32), "slots", per_step=True, initialized=False)
        table = track(torch.arange(32, dtype=torch.float32).reshape(4, 8), "table")
        out, counter = torch.zeros(8, 8), torch.zeros(8, dtype=torch.int32)
        for op, (written, n) in enumerate([(8, 8), (5, 6)]):
            o.begin_op(op, {"op": "step"})
            slots[:written] = 1
            with tracking.quiet():
                slots.sum()  # the harness's own read of the whole buffer: unseen
                _gather[(1,)](slots, table, out, counter, n, W=8, B=8)
    finally:
        vs = o.finish()
    assert [(v.kind, v.tensor, v.details.get("op_index"), tuple(v.details.get("element", ()))) for v in vs] == \
        [("stale-read", "slots", 1, (5,))]


@pytest.mark.parametrize("make", [ShadowOracle, lambda: GpuShadowOracle("cpu")], ids=["cpu", "device"])
def test_a_kernels_bad_read_inside_a_runners_region_names_it_in_both_modes(make):
    """``tracking.region(name)`` (vllm_engine's prompt-path logits calls, known.py's P1): a bad read by a kernel
    launched inside is reported with ``details["region"]``, in the device mode too (it reads back at the region's
    edges: else its one read-back per op would come after the region closed); one launched outside, without."""
    from fuzzrunner import tracking
    o = make()
    o.start()
    try:
        slots = track(torch.empty(8, dtype=torch.int32), "slots", per_step=True, initialized=False)
        table = track(torch.arange(32, dtype=torch.float32).reshape(4, 8), "table")
        out, counter = torch.zeros(8, 8), torch.zeros(8, dtype=torch.int32)
        for op, (written, n, region) in enumerate([(8, 8, None), (5, 6, "step.prompt_logits[0]"), (4, 5, None)]):
            o.begin_op(op, {"op": "step"})
            slots[:written] = 1
            with tracking.region(region) if region else tracking.quiet():
                _gather[(1,)](slots, table, out, counter, n, W=8, B=8)
    finally:
        vs = o.finish()
    assert [(v.kind, v.details.get("op_index"), tuple(v.details.get("element", ())), v.details.get("region"))
            for v in vs] == [("stale-read", 1, (5,), "step.prompt_logits[0]"), ("stale-read", 2, (4,), None)]
