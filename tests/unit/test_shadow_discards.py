"""A kernel's read of never-written (or stale) lanes whose value it drops with ``tl.where`` is silent; any use of
such a lane is reported at the load, as before (oracles/shadow/discards.py). SGLang's ``triton_v2`` expand kernel
loads a block of its workspace under the pool's max rank and selects the slot's live rank after the load ("Select,
not multiply: the unselected lanes may hold anything"): reported at the load, every fault-free ``sglang_engine``
campaign on that backend ended in a finding (a new user's trial). The CPU mode (Triton's interpreter)."""

import pytest
import torch
import triton
import triton.language as tl

from fuzzrunner.oracles.shadow.oracle import ShadowOracle

pytestmark = pytest.mark.skipif(not __import__("fuzzrunner")._env.interpreted(), reason="the CPU mode's interpreter")
WRITTEN = 3  # lanes 0..2 written, 3..7 never


@triton.jit
def _select(x_ptr, y_ptr, live, BLOCK: tl.constexpr, HOW: tl.constexpr):
    k = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + k)
    if HOW == 1:    # cast and scale first, then select: the taint follows element-wise ops lane by lane
        v = v.to(tl.float64) * 2.0 + 1.0
    if HOW == 2:    # a reduction of the loaded block before the select: used
        tl.store(y_ptr + BLOCK, tl.sum(v, axis=0))
    if HOW == 3:    # the select's condition read from the unwritten lanes: the choice itself is garbage
        v = tl.where(v > 0, 1.0, 0.0)
    if HOW == 4:    # loaded and never used: reported at the launch's end (nothing shows it was dropped)
        v = tl.zeros((BLOCK,), dtype=tl.float32)
    if HOW == 5:    # broadcast to 2-D, select per column, dot: as SGLang's expand (lhs, k_mask[None, :])
        m = tl.broadcast_to(v[None, :], (16, BLOCK))
        m = tl.where((k < live)[None, :], m, 0.0)
        acc = tl.dot(m, tl.full((BLOCK, BLOCK), 1.0, tl.float32))
        tl.store(y_ptr + k, tl.sum(acc, axis=0))
        return
    if HOW != 3 and HOW != 4:
        v = tl.where(k < live, v, 0.0)
    tl.store(y_ptr + k, v.to(tl.float32))


def _violations(live: int, how: int = 0) -> list:
    oracle = ShadowOracle(check_triton=True)
    oracle.start()
    try:
        oracle.begin_op(0, {"op": "step"})
        x = torch.empty(16)
        x[:WRITTEN] = 1.0
        _select[(1,)](x, torch.zeros(17), live, BLOCK=16, HOW=how)
        oracle.end_op()
    finally:
        violations = oracle.finish()
    return violations


def _run(live: int, how: int = 0) -> list:
    return [(v.kind, v.location.rsplit(":", 1)[0], v.tensor.rsplit(":", 1)[0]) for v in _violations(live, how)]


READ = [("uninitialized-read", "test_shadow_discards.py", "torch.empty@test_shadow_discards.py")]


@pytest.mark.parametrize("how", [0, 1, 5], ids=["select", "cast-then-select", "broadcast-select-dot"])
def test_unwritten_lanes_the_kernel_drops_are_silent(how):
    assert _run(live=WRITTEN, how=how) == []


@pytest.mark.parametrize("how", [0, 1, 5], ids=["select", "cast-then-select", "broadcast-select-dot"])
def test_an_unwritten_lane_the_select_keeps_is_reported_at_its_load(how):
    """The planted fault of the class: the live rank one past what was written."""
    assert _run(live=WRITTEN + 1, how=how) == READ


@pytest.mark.parametrize("how", [2, 3, 4], ids=["reduced-before-select", "select-on-the-value", "never-used"])
def test_a_value_used_otherwise_or_never_is_reported(how):
    assert _run(live=WRITTEN, how=how) == READ


def test_the_report_is_the_loads_own():
    """Deferred, the report is as it was: the load's line and element, "never written"."""
    [v] = _violations(live=WRITTEN + 1)
    assert "_select (program (0, 0, 0)) read torch.empty@" in v.message and f"[{WRITTEN}]" in v.message, v.message
    assert "never written" in v.message and v.details["access"] == "read", v.message


@triton.jit
def _partly_escaping(x_ptr, y_ptr, off, live, BLOCK: tl.constexpr):
    k = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + k + tl.where(k >= BLOCK // 2, off, 0))  # the upper half lands in another tensor
    tl.store(y_ptr + k, tl.where(k < live, v, 0.0))


@pytest.mark.parametrize("live", [WRITTEN, WRITTEN + 1], ids=["dropped", "kept"])
def test_a_load_whose_other_lanes_left_the_argument_defers_its_unwritten_lanes_alone(live):
    """One load, some lanes out of their argument's storage into another tensor (oracles/shadow/sub_buffers.py: reported
    and switched off before the check), the rest in it and partly never written (deferred, discards.py): the deferred
    lanes are the checked ones only. Before, the deferral was laid over every active lane and the oracle failed
    ("cannot assign 8 input values to the 16 output values": a tool limitation instead of the two reports)."""
    oracle = ShadowOracle(check_triton=True)
    oracle.start()
    try:
        oracle.begin_op(0, {"op": "step"})
        x, other = torch.empty(16), torch.ones(64)
        x[:WRITTEN] = 1.0
        _partly_escaping[(1,)](x, torch.zeros(16), (other.data_ptr() - x.data_ptr()) // 4, live, BLOCK=16)
        oracle.end_op()
    finally:
        violations = oracle.finish()
    got = sorted((v.kind, v.tensor.rsplit(":", 1)[0]) for v in violations)
    unwritten = [("uninitialized-read", "torch.empty@test_shadow_discards.py")] if live > WRITTEN else []
    assert got == sorted([("out-of-bounds", "torch.empty@test_shadow_discards.py"), *unwritten]), violations
