"""Planted faults for the engine target: each replaces one method of vLLM's for the length of a case.

Each fault is a plausible bug of the component it is planted in (the adapter manager, the LoRA layers, the
V2 runner's LoRA bookkeeping), so that the target's oracles are shown to catch such a bug, from scratch,
in a campaign (docs/vllm.md, "The engine target"). ``planted(faults)`` applies them and undoes them after.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from unittest import mock

from . import prompt_logprobs_faults, serving_faults, v1_faults, v2_graph_faults

FAULTS = {
    "mapping_cache_ignores_slots":
        "LoRAModelManager.set_adapter_mapping skips reprogramming when the mapping equals the last one, whatever "
        "slots the adapters sit in now (the cache keyed on the mapping alone): after an adapter moves to another "
        "slot, an identical batch keeps the old slot indices.",
    "set_lora_keeps_old_weights":
        "a *WithLoRA layer's set_lora copies the new adapter into its slot without zeroing the slot first: a "
        "smaller-rank adapter, or one without a packed slice, keeps the previous occupant's weights there.",
    "activation_keeps_missing_modules":
        "LoRAModelManager.activate_adapter does not reset the layers the adapter has no weights for: they keep "
        "the previous occupant of the slot's weights.",
    "lru_activation_skips_touch":
        "LRUCacheLoRAModelManager.activate_adapter does not refresh an adapter that is already active, so the "
        "next activation of the same batch can evict it (the batch then maps an adapter that has no slot).",
    "remove_keeps_slot":
        "LoRAModelManager's deactivation leaves the adapter's id in lora_index_to_id: its slot is never freed.",
    "lora_state_keeps_finished_adapter":
        "the V2 runner's LoraState.add_request, for a request without an adapter, leaves the adapter id the "
        "request index held before (a finished request's): the base-model request runs with that adapter.",
    "logits_mapping_per_request":
        "the V2 runner's LoraState.make_lora_inputs maps one lm_head row per request, whatever the number of "
        "logits rows (1 + draft tokens under speculative decoding).",
    "fused_moe_swaps_gate_up":
        "FusedMoEWithLoRA.set_lora copies each expert's gate (w1) LoRA into the up (w3) slice of the stacked w13 "
        "weights and the up LoRA into the gate slice (the packing order of gate and up confused): an adapter's "
        "expert deltas land on the wrong half of the gated activation.",
    "fused_moe_3d_swaps_gate_up":
        "FusedMoE3DWithLoRA.set_lora reads the fused gate_up LoRA B of a 3D-format adapter as [up; gate] instead of "
        "[gate; up] (the order of the fused w13 output confused): every expert's gate delta lands on its up "
        "projection and the up delta on its gate.",
    "packed_expansion_shares_first_lora_a":
        "MergedColumnParallelLinearWithLoRA.expand_packed_lora, which spreads the packed names of a layer with more "
        "output slices than names over its slices (Qwen3.5's in_proj_qkvz: in_proj_qkv over q, k, v and in_proj_z "
        "over z), gives every slice the first name's lora_a: the z slice computes in_proj_z's B over in_proj_qkv's A.",
}

FAULTS.update(v1_faults.FAULTS)  # the V1 runner's InputBatch and dispatcher (v1_faults.py)
FAULTS.update(v2_graph_faults.FAULTS)  # the V2 runner's graph dispatch (v2_graph_faults.py)
FAULTS.update(prompt_logprobs_faults.FAULTS)  # the V2 runner's prompt logprobs (prompt_logprobs_faults.py)
FAULTS.update(serving_faults.FAULTS)  # the serving layer and the prefix cache (serving_faults.py)


def unavailable(found: dict) -> dict:
    """{fault: why it cannot run on this vLLM}."""
    out = {}
    if found.get("LoraState") is None:
        for f in ("lora_state_keeps_finished_adapter", "logits_mapping_per_request"):
            out[f] = "this vLLM has no V2 runner LoraState (vllm.v1.worker.gpu.lora_utils)"
    elif not found.get("make_lora_inputs_takes_num_logits"):
        out["logits_mapping_per_request"] = ("this vLLM's LoraState.make_lora_inputs already maps one lm_head row per "
                                             "request (it takes no num_logits)")
    if found.get("moe_unavailable"):
        out["fused_moe_swaps_gate_up"] = out["fused_moe_3d_swaps_gate_up"] = found["moe_unavailable"]
    from vllm.lora.layers import MergedColumnParallelLinearWithLoRA
    if not hasattr(MergedColumnParallelLinearWithLoRA, "expand_packed_lora"):
        out["packed_expansion_shares_first_lora_a"] = ("this vLLM's MergedColumnParallelLinearWithLoRA has no "
                                                       "expand_packed_lora (0.21 and later, #37912)")
    return (out | v1_faults.unavailable(found) | v2_graph_faults.unavailable(found)
            | prompt_logprobs_faults.unavailable(found) | serving_faults.unavailable(found))


def _patched(owner, name: str, value):
    """``owner.name`` is ``value`` while the fault is planted, then what it was (inherited: removed again)."""
    return mock.patch.object(owner, name, value)


def _mapping_cache(stack: contextlib.ExitStack) -> None:
    from vllm.lora.model_manager import LoRAModelManager

    def set_adapter_mapping(self, mapping) -> None:
        if self._last_mapping != mapping:
            self._set_adapter_mapping(mapping)
            self._last_mapping = mapping
    stack.enter_context(_patched(LoRAModelManager, "set_adapter_mapping", set_adapter_mapping))


def _lora_classes():
    import vllm.lora.layers as layers
    return [c for c in vars(layers).values() if inspect.isclass(c) and issubclass(c, layers.BaseLayerWithLoRA)]


def _set_lora_without_reset(stack: contextlib.ExitStack) -> None:
    for cls in _lora_classes():
        if "set_lora" not in cls.__dict__:
            continue
        original = cls.__dict__["set_lora"]

        def set_lora(self, index, lora_a, lora_b, *args, _original=original, **kwargs):
            self.__dict__["reset_lora"] = lambda i: None  # the instance's own: set_lora's reset does nothing
            try:
                return _original(self, index, lora_a, lora_b, *args, **kwargs)
            finally:
                del self.__dict__["reset_lora"]
        stack.enter_context(_patched(cls, "set_lora", set_lora))


def _activation_without_reset(stack: contextlib.ExitStack) -> None:
    from vllm.lora.model_manager import LoRAModelManager
    original = LoRAModelManager.__dict__["activate_adapter"]

    def activate_adapter(self, lora_id, *args, **kwargs):
        # the manager's own reset_lora calls (layers the adapter has no weights for) do nothing; set_lora's
        # reset still runs (it calls the class's method through the instance, which we restore around it)
        held = []
        for module in self.modules.values():
            module.__dict__["reset_lora"] = lambda i: None
            held.append(module)
            cls_set = type(module).set_lora

            def set_lora(index, a, b, *rest, _m=module, _set=cls_set, **kw):
                del _m.__dict__["reset_lora"]
                try:
                    return _set(_m, index, a, b, *rest, **kw)
                finally:
                    _m.__dict__["reset_lora"] = lambda i: None
            module.__dict__["set_lora"] = set_lora
        try:
            return original(self, lora_id, *args, **kwargs)
        finally:
            for module in held:
                module.__dict__.pop("reset_lora", None)
                module.__dict__.pop("set_lora", None)
    stack.enter_context(_patched(LoRAModelManager, "activate_adapter", activate_adapter))


def _lru_without_touch(stack: contextlib.ExitStack) -> None:
    from vllm.lora.model_manager import LoRAModelManager, LRUCacheLoRAModelManager

    def activate_adapter(self, lora_id) -> bool:
        if lora_id not in self._active_adapters and len(self._active_adapters) >= self.lora_slots:
            self._active_adapters.remove_oldest()
        return LoRAModelManager.activate_adapter(self, lora_id)
    stack.enter_context(_patched(LRUCacheLoRAModelManager, "activate_adapter", activate_adapter))


def _remove_keeps_slot(stack: contextlib.ExitStack) -> None:
    from vllm.lora.model_manager import LoRAModelManager
    stack.enter_context(_patched(LoRAModelManager, "_deactivate_adapter", lambda self, lora_id: None))


def _state_keeps_adapter(stack: contextlib.ExitStack, found: dict) -> None:
    cls = found["LoraState"]
    original = cls.__dict__["add_request"]

    def add_request(self, req_id, req_index, lora_request):
        if lora_request is None:
            return None
        return original(self, req_id, req_index, lora_request)
    stack.enter_context(_patched(cls, "add_request", add_request))


def _logits_per_request(stack: contextlib.ExitStack, found: dict) -> None:
    cls = found["LoraState"]
    original = cls.__dict__["make_lora_inputs"]

    def make_lora_inputs(self, req_ids, idx_mapping, num_scheduled_tokens, num_logits=None):
        ones = None if num_logits is None else num_logits * 0 + 1
        return original(self, req_ids, idx_mapping, num_scheduled_tokens, ones)
    stack.enter_context(_patched(cls, "make_lora_inputs", make_lora_inputs))


def _moe_swaps_gate_up(stack: contextlib.ExitStack) -> None:
    from vllm.lora.layers import FusedMoEWithLoRA
    original = FusedMoEWithLoRA.__dict__["set_lora"]

    def set_lora(self, index, lora_a, lora_b, *args, **kwargs):
        (w1a, w2a, w3a), (w1b, w2b, w3b) = lora_a, lora_b
        return original(self, index, [w3a, w2a, w1a], [w3b, w2b, w1b], *args, **kwargs)
    stack.enter_context(_patched(FusedMoEWithLoRA, "set_lora", set_lora))


def _moe_3d_swaps_gate_up(stack: contextlib.ExitStack) -> None:
    from vllm.lora.layers import FusedMoE3DWithLoRA
    original = FusedMoE3DWithLoRA.__dict__["set_lora"]

    def set_lora(self, index, lora_a, lora_b, *args, **kwargs):
        w13_b, w2_b = lora_b  # w13_b: [experts, 2 * intermediate, rank], the gate's rows first
        half = w13_b.size(1) // 2
        swapped = w13_b.new_empty(w13_b.shape)
        swapped[:, :half], swapped[:, half:] = w13_b[:, half:], w13_b[:, :half]
        return original(self, index, lora_a, [swapped, w2_b], *args, **kwargs)
    stack.enter_context(_patched(FusedMoE3DWithLoRA, "set_lora", set_lora))


def _expansion_shares_first_a(stack: contextlib.ExitStack) -> None:
    from vllm.lora.layers import MergedColumnParallelLinearWithLoRA
    original = MergedColumnParallelLinearWithLoRA.__dict__["expand_packed_lora"]

    def expand_packed_lora(self, lora_a, lora_b):
        a, b = original(self, lora_a, lora_b)
        first = next((x for x in a if x is not None), None)
        return [None if x is None else first for x in a], b
    stack.enter_context(_patched(MergedColumnParallelLinearWithLoRA, "expand_packed_lora", expand_packed_lora))


_PLANT = {
    "mapping_cache_ignores_slots": lambda stack, found: _mapping_cache(stack),
    "set_lora_keeps_old_weights": lambda stack, found: _set_lora_without_reset(stack),
    "activation_keeps_missing_modules": lambda stack, found: _activation_without_reset(stack),
    "lru_activation_skips_touch": lambda stack, found: _lru_without_touch(stack),
    "remove_keeps_slot": lambda stack, found: _remove_keeps_slot(stack),
    "lora_state_keeps_finished_adapter": _state_keeps_adapter,
    "logits_mapping_per_request": _logits_per_request,
    "fused_moe_swaps_gate_up": lambda stack, found: _moe_swaps_gate_up(stack),
    "fused_moe_3d_swaps_gate_up": lambda stack, found: _moe_3d_swaps_gate_up(stack),
    "packed_expansion_shares_first_lora_a": lambda stack, found: _expansion_shares_first_a(stack),
    **v1_faults.PLANT,
    **v2_graph_faults.PLANT,
    **prompt_logprobs_faults.PLANT,
    **serving_faults.PLANT,
}


@contextlib.contextmanager
def planted(faults, found: dict) -> Iterator[None]:
    """vLLM with ``faults`` planted, for the length of the block."""
    with contextlib.ExitStack() as stack:
        for f in faults:
            _PLANT[f](stack, found)
        yield
