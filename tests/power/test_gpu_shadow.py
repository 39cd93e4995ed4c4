"""The shadow oracle's device mode (fuzzrunner/oracles/shadow/gpu/) against the CPU oracle's verdicts:
the pair suite's Triton, tracking and index pairs, and the reference runner's memory faults. On the
CPU it runs through Triton's interpreter; ``-m gpu`` runs it compiled on a GPU, tensors on the GPU."""

import os

import pytest
import torch
from shadow_pairs import PAIRS
from shadow_pairs.device_mode import CPU_CAUSES, DEVICE_CAUSES, NOT_ON_DEVICE, verdict

from fuzzrunner import Case, _env, replay
from fuzzrunner.finding import primary
from fuzzrunner.oracles.shadow import shadow_oracle
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle

CHECKED = [p for p in PAIRS if p.cause in DEVICE_CAUSES and p.name not in NOT_ON_DEVICE]
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
        assert isinstance(shadow_oracle(), GpuShadowOracle)  # `--oracle shadow` is the device mode here
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
