"""The ``vllm_engine`` target's 3D-format MoE LoRA: a model flagged ``is_3d_moe_weight`` (model.ARCH_3D), whose experts
vLLM's manager wraps in ``FusedMoE3DWithLoRA``, loaded from adapters in PEFT's stacked 3D layout (adapters.py), packed
by the manager's ``_stack_moe_lora_weights`` (docs/vllm.md, "The engine target").

Each oracle both ways: a fault-free case (adapters with and without expert weights, rsLoRA among them, removal, a dummy
run) is silent; the 3D fault, and the generic set_lora / activation faults on the 3D layer, are caught in
``step.experts``. The fault found from scratch by a campaign is a slow test.
"""

import sys

import pytest
from test_vllm_engine_moe import CONFIG, FAULT_FREE, _kinds, _run, found_from_scratch, needs_vllm, req, step

MOE_3D = {"experts": 64, "top_k": 2, "format": "3d"}


def _session(ops, **config):
    """The target's Session of a case that ran (the layers as the case left them)."""
    from unittest import mock

    from fuzzrunner.target import load_target
    runner = sys.modules[load_target("vllm_engine").run.func.__module__]
    made = []
    init = runner.Session.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)
    with mock.patch.object(runner.Session, "__init__", keep):
        found = _run(ops, **config)
    [s] = made
    return s, runner.moe, found


@needs_vllm
def test_the_3d_moe_layer_is_vllms_fused_moe3d_with_lora_made_by_the_manager_from_the_models_flag():
    """The model flagged is_3d_moe_weight gets vLLM's FusedMoE3DWithLoRA (one fused w13 slice, stacks [slots, experts,
    2I | H, rank]); the 2D model beside it gets FusedMoEWithLoRA. An adapter's rows do get a delta (the oracle is not
    comparing zeros): vLLM's stacked w13 B of the adapter's slot equals the adapter's own per-expert B."""
    import torch
    s, moe, found = _session([step(req("a", 1, 1), req("b", 0, 1))], moe=MOE_3D)
    assert found == []
    layer = s.model.get_submodule(moe.PATH)
    assert type(layer).__name__ == "FusedMoE3DWithLoRA" and type(layer).__module__ == "vllm.lora.layers.fused_moe"
    assert type(s.model).is_3d_moe_weight
    e, h, r = MOE_3D["experts"], CONFIG["hidden"], CONFIG["max_lora_rank"]
    assert len(layer.w13_lora_b_stacked) == 1 and tuple(layer.w13_lora_b_stacked[0].shape) == (2, e, 2 * h, r)
    assert tuple(layer.w13_lora_a_stacked[0].shape) == (2, e, r, h)
    from targets.vllm_engine import adapters
    spec = s.c["adapters"]["1"]
    (_, b13), _ = adapters.expert_weights_3d(s.c, spec)
    slot = s.runner.lora_manager._adapter_manager.lora_index_to_id.index(1)
    got = layer.w13_lora_b_stacked[0][slot, :, :, :spec["rank"]].float().cpu()
    assert torch.allclose(got, b13 * adapters.scaling(spec), rtol=1e-3, atol=1e-3)
    s2, _, found2 = _session([step(req("a", 1, 1))], moe={"experts": 64, "top_k": 2})
    assert found2 in ([], [v for v in found2 if v.tensor == "step.experts.adapter_rows"])  # R1 releases: rsLoRA's
    assert type(s2.model.get_submodule(moe.PATH)).__name__ == "FusedMoEWithLoRA"


@needs_vllm
def test_fault_free_3d_moe_steps_are_silent_rslora_included():
    """Adapter 2 is rsLoRA: the 3D path scales through the adapter's own scaling (``LoRALayerWeights.optimize``),
    not ``pack_moe``, so R1 is not in it: silent on every release, R1's too."""
    assert _run(FAULT_FREE, moe=MOE_3D) == []
    assert _run(FAULT_FREE, moe=dict(MOE_3D, experts=128, top_k=1), layers=["experts", "qkv_proj"]) == []


# (fault, ops, config, tensor): after an eviction (max_loras 1) the slot of an adapter with expert weights is
# refilled by one without (activation) or with a smaller rank (set_lora): nothing stale may reach its rows
MOE_3D_FAULT_CASES = {
    "fused_moe_3d_swaps_gate_up": ([step(req("a", 2, 1), req("b", 0, 1))], {}, "step.experts.adapter_rows"),
    "activation_keeps_missing_modules": ([step(req("a", 1, 1)), step(req("b", 3, 2), finish=["a"])],
                                         {"max_loras": 1, "max_cpu_loras": 1}, "step.experts.adapter_rows"),
    "set_lora_keeps_old_weights": ([step(req("a", 1, 1)), step(req("b", 2, 2), finish=["a"])],
                                   {"max_loras": 1, "max_cpu_loras": 1}, "step.experts.adapter_rows"),
}


@needs_vllm
@pytest.mark.parametrize("fault", sorted(MOE_3D_FAULT_CASES))
def test_each_3d_moe_fault_is_caught_in_the_experts_rows_and_its_case_is_silent_without_it(fault):
    ops, config, tensor = MOE_3D_FAULT_CASES[fault]
    found = _run(ops, (fault,), moe=MOE_3D, **config)
    assert any(v.kind == "numeric-mismatch" and v.tensor == tensor for v in found), _kinds(found)
    assert _run(ops, moe=MOE_3D, **config) == []


@needs_vllm
def test_the_2d_moe_fault_does_not_touch_the_3d_layer_nor_the_3d_fault_the_2d_layer():
    """Each fault is its own layer's: FusedMoE3DWithLoRA overrides set_lora."""
    ops = [step(req("a", 2, 1), req("b", 0, 1))]
    assert _run(ops, ("fused_moe_swaps_gate_up",), moe=MOE_3D) == []
    adapters = {k: dict(v, rslora=False) for k, v in CONFIG["adapters"].items()}
    assert _run(ops, ("fused_moe_3d_swaps_gate_up",), adapters=adapters) == []


@needs_vllm
@pytest.mark.slow  # a 300-example campaign: ~10 min on the 2-core machine
def test_the_3d_moe_fault_is_found_from_scratch_within_300_examples(tmp_path):
    found_from_scratch(tmp_path, "fused_moe_3d_swaps_gate_up")
