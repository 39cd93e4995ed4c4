"""The shadow oracle's device mode (fuzzrunner/oracles/shadow/gpu/) against the CPU oracle's verdicts:
the pair suite's Triton, tracking and index pairs, and the reference runner's memory faults. On the
CPU it runs through Triton's interpreter; ``-m gpu`` runs it compiled on a GPU, tensors on the GPU."""

import os

import pytest
import torch
import triton
import triton.language as tl
from shadow_pairs import GPU_PAIRS, PAIRS
from shadow_pairs.device_mode import CPU_CAUSES, DEVICE_CAUSES, NOT_ON_DEVICE, verdict

from fuzzrunner import Case, _env, env_defaults, replay
from fuzzrunner.context import Context
from fuzzrunner.finding import primary
from fuzzrunner.oracles.shadow import shadow_oracle
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
from fuzzrunner.settings import Settings


@triton.jit
def _copy(src, dst, N: tl.constexpr):  # the captured kernel of the CUDA-graph tests
    i = tl.arange(0, N)
    tl.store(dst + i, tl.load(src + i))


CHECKED = [p for p in PAIRS + GPU_PAIRS if p.cause in DEVICE_CAUSES and p.name not in NOT_ON_DEVICE]
CHECKED_ON_CPU = [p for p in PAIRS if p.cause in CPU_CAUSES and p.name not in NOT_ON_DEVICE]
MEMORY_FAULTS = {  # fault: ops, and the CPU oracle's report (tests/power/test_oracles_catch_faults.py)
    "dummy_run_skips_mapping": ([{"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}],
                                ("uninitialized-read", "embeddings_indices", "aten.add.Tensor",
                                 "fuzzrunner/runner/punica.py")),
    "padding_not_mapped": ([{"op": "step", "requests": [{"adapter_id": 0, "tokens": [1, 2, 3]}]}],
                           ("uninitialized-read", "embeddings_indices", "aten.add.Tensor",
                            "fuzzrunner/runner/punica.py")),
    "stale_after_all_no_lora": ([{"op": "add_adapter", "adapter_id": 1, "rank": 4},
                                 {"op": "step", "requests": [{"adapter_id": 1, "tokens": [1, 2, 3]}]},
                                 {"op": "step", "requests": [{"adapter_id": 0, "tokens": [1, 2, 3]}]}],
                                ("stale-read", "token_meta.token_lora_mapping", "_lora_bgmv_kernel",
                                 "fuzzrunner/kernels/lora_bgmv.py:28")),
}
CFG = {"max_loras": 2, "capture_sizes": [1, 2, 4, 8]}


@pytest.mark.skipif(not _env.interpreted(), reason="the CPU half (Triton's interpreter)")
@pytest.mark.parametrize("p", CHECKED_ON_CPU, ids=lambda p: f"{p.cause}-{p.name}")
def test_device_mode_gives_the_cpu_verdict_on_the_cpu(p):
    v, why = verdict(p, "cpu")
    assert v == "exact", f"{p.name}: {v}\n{why}"


@pytest.mark.gpu
@pytest.mark.parametrize("p", CHECKED, ids=lambda p: f"{p.cause}-{p.name}")
def test_device_mode_gives_the_cpu_verdict_on_the_gpu(p):
    v, why = verdict(p, "cuda")
    assert v == "exact", f"{p.name}: {v}\n{why}"


def _faults_found(device: str, fault: str):
    ops, (kind, tensor, kernel, where) = MEMORY_FAULTS[fault]
    old = os.environ.get("FUZZRUNNER_SHADOW")
    os.environ["FUZZRUNNER_SHADOW"] = "device"
    try:
        here = Context.resolve(env_defaults.apply(Settings(device=device)), in_process=True)
        assert isinstance(shadow_oracle(here), GpuShadowOracle)  # `--oracle shadow` is the device mode here
        vs = replay(Case("reference_runner", CFG, ops, [fault]), oracles=["shadow"], device=device)
        clean = replay(Case("reference_runner", CFG, ops), oracles=["shadow"], device=device)
    finally:
        if old is None:
            del os.environ["FUZZRUNNER_SHADOW"]
        else:
            os.environ["FUZZRUNNER_SHADOW"] = old
    assert vs, f"the device mode missed {fault}"
    v = primary(vs)
    assert (v.kind, v.tensor, v.kernel) == (kind, tensor, kernel) and v.location.startswith(where)
    assert clean == []


@pytest.mark.skipif(not _env.interpreted(), reason="the CPU half (Triton's interpreter)")
@pytest.mark.parametrize("fault", sorted(MEMORY_FAULTS))
def test_device_mode_finds_the_memory_faults_on_the_cpu(fault):
    _faults_found("cpu", fault)


@pytest.mark.gpu
@pytest.mark.parametrize("fault", sorted(MEMORY_FAULTS))
def test_device_mode_finds_the_memory_faults_on_the_gpu(fault):
    assert torch.cuda.is_available()
    _faults_found("cuda", fault)


@pytest.mark.gpu
def test_a_case_gives_the_same_reports_in_every_run(monkeypatch):
    """A kernel's programs race to append their bad reads to the ring: still, every run of a case reports
    the same bad reads, with the same element and program id first (``DeviceShadow.ring_entries``). The
    dummy run reads several unwritten entries, in several programs."""
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    ops, _ = MEMORY_FAULTS["dummy_run_skips_mapping"]
    case = Case("reference_runner", CFG, ops + [ADD, {"op": "step", "requests": [{"adapter_id": 1, "tokens": [4, 5]}]}],
                ["dummy_run_skips_mapping"])

    def reports() -> list:
        return [(v.kind, v.tensor, v.kernel, v.location, v.message, v.details.get("op_index"))
                for v in replay(case, oracles=["shadow"], device="cuda")]

    first = reports()
    assert len({r[1] for r in first}) > 1, first
    assert [reports() for _ in range(5)] == [first] * 5


# Replays of real CUDA graphs (the dummy-run bug class): what the CPU oracle reports for the replay ops of
# these cases (its graphs are emulated: the body re-runs), the device mode must report from the replays.
ADD = {"op": "add_adapter", "adapter_id": 1, "rank": 4}
GRAPH_FAULTS = {  # fault: ops, the CPU oracle's reports in the replay ops (kind, tensor, kernel, line, op)
    "stale_after_all_no_lora": (
        [ADD, {"op": "capture", "size": 4},
         {"op": "replay", "requests": [{"adapter_id": 1, "tokens": [1, 2, 3]}]},
         {"op": "replay", "requests": [{"adapter_id": 0, "tokens": [1, 2, 3]}]}],
        {("stale-read", "token_meta.token_lora_mapping", "_lora_bgmv_kernel", "fuzzrunner/kernels/lora_bgmv.py:28",
          3)}),
    "padding_not_mapped": (
        [{"op": "capture", "size": 4}, {"op": "replay", "requests": [{"adapter_id": 0, "tokens": [1, 2, 3]}]}],
        {("stale-read", "embeddings_indices", "aten.add.Tensor", "fuzzrunner/runner/punica.py:103", 1),
         ("stale-read", "token_meta.token_lora_mapping", "_lora_bgmv_kernel", "fuzzrunner/kernels/lora_bgmv.py:28",
          1)}),
}


def _graph_fault(device: str, fault: str) -> None:
    ops, want = GRAPH_FAULTS[fault]
    first_replay = next(i for i, op in enumerate(ops) if op["op"] == "replay")
    vs = replay(Case("reference_runner", CFG, ops, [fault]), oracles=["shadow"], device=device)
    got = {(v.kind, v.tensor, v.kernel, v.location, v.details.get("op_index")) for v in vs
           if v.details.get("op_index", -1) >= first_replay}
    assert got == want, vs
    assert replay(Case("reference_runner", CFG, ops), oracles=["shadow"], device=device) == []


@pytest.mark.skipif(not _env.interpreted(), reason="the CPU half (Triton's interpreter)")
def test_device_mode_reports_what_a_replayed_graph_reads_on_the_cpu(monkeypatch):
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    _graph_fault("cpu", "padding_not_mapped")


@pytest.mark.gpu
@pytest.mark.parametrize("fault", sorted(GRAPH_FAULTS))
def test_device_mode_reports_what_a_replayed_cuda_graph_reads(fault, monkeypatch):
    """Kernels and torch ops captured in a real ``torch.cuda.CUDAGraph`` are checked at every replay,
    against the replaying op's epoch: their reports name that op."""
    assert torch.cuda.is_available()
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    _graph_fault("cuda", fault)


@pytest.mark.gpu
@pytest.mark.parametrize("bug", [True, False])
def test_a_captured_torch_read_and_kernel_read_are_checked_at_each_replay(bug):
    from fuzzrunner import track

    o = GpuShadowOracle("cuda")
    o.start()
    try:
        o.begin_op(0, {"op": "capture"})
        m = track(torch.zeros(8, device="cuda"), "m", per_step=True)
        y, z = torch.empty(8, device="cuda"), torch.empty(8, device="cuda")
        _copy[(1,)](m, z, N=8)  # compiles outside the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            torch.add(m, 1, out=y)
            _copy[(1,)](m, z, N=8)
        for op in (1, 2):
            o.begin_op(op, {"op": "replay"})
            if op == 1 or not bug:
                m.fill_(float(op))
            g.replay()
        o.end_op()
    finally:
        vs = o.finish()
    got = sorted((v.kind, v.tensor, v.kernel, v.details.get("op_index")) for v in vs)
    assert got == ([("stale-read", "m", "_copy", 2), ("stale-read", "m", "aten.add.out", 2)] if bug else [])


@pytest.mark.gpu
@pytest.mark.parametrize("bug", [True, False])
def test_a_table_made_inside_a_capture_serves_no_launch_outside_its_graph(bug):
    """A launch table made inside a capture is filled only when its graph replays. A launch of the same
    kernel on the same buffers after the capture (eager, or in a second capture of the same step, as a
    runner that captures one size twice does) must not use it: it would check against an unfilled table
    and find every lane outside it (what a reference_runner campaign showed on an H200, 2026-12-03)."""
    from fuzzrunner import track

    o = GpuShadowOracle("cuda")
    o.start()
    try:
        o.begin_op(0, {"op": "capture"})
        _copy[(1,)](torch.zeros(8, device="cuda"), torch.empty(8, device="cuda"), N=8)  # compiles, other buffers
        m = track(torch.zeros(8, device="cuda"), "m", per_step=True)
        z = torch.empty(8, device="cuda")
        first = torch.cuda.CUDAGraph()
        with torch.cuda.graph(first):
            _copy[(1,)](m, z, N=8)  # the table of (m, z) is made here: filled at first's replays only
        o.begin_op(1, {"op": "step"})
        m.fill_(1.0)
        _copy[(1,)](m, z, N=8)  # eager, before any replay of first
        second = torch.cuda.CUDAGraph()
        with torch.cuda.graph(second):
            _copy[(1,)](m, z, N=8)
        del first
        o.begin_op(2, {"op": "replay"})
        if not bug:
            m.fill_(2.0)
        second.replay()
        o.end_op()
    finally:
        vs = o.finish()
    got = sorted((v.kind, v.tensor, v.kernel, v.details.get("op_index")) for v in vs)
    assert got == ([("stale-read", "m", "_copy", 2)] if bug else []), vs


@pytest.mark.gpu
def test_pinned_table_slots_are_never_handed_out_twice_in_a_process():
    """A graph captured under one DeviceShadow (an earlier case, another oracle) replays its table copy
    from its pinned slot: a later DeviceShadow must not be given that slot."""
    from fuzzrunner.oracles.shadow.gpu import regions
    a = regions.DeviceShadow("cuda")
    first = a._pinned(7, False)
    b = regions.DeviceShadow("cuda")  # the next case's
    second = b._pinned(7, False)
    lo, hi = first.data_ptr(), first.data_ptr() + 7 * 8
    assert not (lo <= second.data_ptr() < hi or second.data_ptr() <= lo < second.data_ptr() + 7 * 8)


@pytest.mark.gpu
def test_the_oracles_kernels_launched_past_the_binder_give_what_their_jit_launches_give():
    """``internal_launch`` reuses a compiled kernel only for arguments of its specialization: unaligned views,
    1 and multiples of 16 as sizes, per-step or not; each launch's output equals ``kernel[grid](...)``'s."""
    from fuzzrunner.oracles.shadow.gpu import device_checks as dc
    from fuzzrunner.oracles.shadow.gpu import internal_launch as il
    dev = torch.device("cuda", torch.cuda.current_device())
    il._COMPILED.clear()
    gen = torch.Generator().manual_seed(0)
    for trial in range(60):
        n, off = [1, 3, 16, 17, 1500][trial % 5], trial % 3
        lo, hi = (-5 if trial % 2 else 0), 30
        ix = torch.randint(-8, 40, (n + 4,), generator=gen, dtype=(torch.int32, torch.int64)[trial % 2]).cuda()[off:off + n]
        got = [torch.empty_like(ix), torch.full((4,), -7, dtype=torch.int64, device=dev)]
        want = [torch.empty_like(ix), torch.full((4,), -7, dtype=torch.int64, device=dev)]
        il.launch(dc.index_bounds, dev, (ix, got[0], n, lo, hi, got[1]), (1024,))
        dc.index_bounds[(1,)](ix, want[0], n, lo, hi, want[1], 1024)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), (trial, got, want)
        epochs = torch.randint(-1, 6, (n + 4,), generator=gen, dtype=torch.int32).cuda()[off:off + n]
        cell = torch.full((1,), 4, dtype=torch.int64, device=dev)
        rows = torch.zeros((2, 4), dtype=torch.int64, device=dev)
        consts = (bool(trial % 2), False, False, 1024)
        il.launch(dc.check_epochs, dev, (epochs, epochs, n, cell, rows[0]), consts)
        dc.check_epochs[(1,)](epochs, epochs, n, cell, rows[1], *consts)
        assert torch.equal(rows[0], rows[1]), (trial, rows)
    probe = dc.index_bounds[(1,)](ix, want[0], n, lo, hi, want[1], 1024)
    assert il._STATE["direct"] and il._COMPILED, (  # the direct path ran (and never fell back)
        type(probe), il._hooks(), [a for a in ("run", "function", "packed_metadata") if not hasattr(probe, a)])
