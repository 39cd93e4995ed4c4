"""Planted faults in the V1 model runner's LoRA inputs and graph choice (v1_runner.py): each replaces one method of
vLLM's for the length of a case, as ``faults.py``'s do (which merges these into the target's ``FAULTS``)."""

from __future__ import annotations

import contextlib

FAULTS = {
    "condense_drops_lora_mapping":
        "the V1 runner's InputBatch.condense moves a request down into a freed index without its entry of "
        "request_lora_mapping: the moved request runs with the freed index's entry (no adapter).",
    "swap_states_skips_lora_mapping":
        "the V1 runner's InputBatch.swap_states (the attention backend's decode-first reorder) swaps every "
        "per-request field but request_lora_mapping: each of the two requests runs with the other's adapter.",
    "dispatcher_ignores_lora":
        "CudagraphDispatcher.dispatch keys the graph on the batch's size alone (has_lora=False, "
        "num_active_loras=0): a batch with adapters replays the graph captured without LoRA.",
    "v1_prompt_rows_shifted":
        "the V1 runner's _get_prompt_logprobs_dict takes each request's prompt hidden states one row late (its "
        "query_start_loc offset + 1): each prompt position is scored under the next position's logits, and the "
        "batch's last request runs past its rows.",
}


def unavailable(found: dict) -> dict:
    if found.get("v1") is None:
        return {f: "this vLLM has no V1 model runner (vllm/v1/worker/gpu_input_batch.py; 0.34 and later)"
                for f in FAULTS}
    return {}


def _keep_mapping(stack: contextlib.ExitStack, found: dict, name: str) -> None:
    """``InputBatch.<name>`` with ``request_lora_mapping`` as it was before the call."""
    from .faults import _patched
    cls = found["v1"].InputBatch
    original = cls.__dict__[name]

    def method(self, *args, **kwargs):
        saved = self.request_lora_mapping.copy()
        try:
            return original(self, *args, **kwargs)
        finally:
            self.request_lora_mapping[:] = saved
    stack.enter_context(_patched(cls, name, method))


def _dispatch_without_lora(stack: contextlib.ExitStack, found: dict) -> None:
    from .faults import _patched
    cls = found["v1"].CudagraphDispatcher
    original = cls.__dict__["dispatch"]

    def dispatch(self, num_tokens, uniform_decode=False, has_lora=False, num_active_loras=0, **kwargs):
        return original(self, num_tokens, uniform_decode, False, 0, **kwargs)
    stack.enter_context(_patched(cls, "dispatch", dispatch))


def _prompt_rows_shifted(stack: contextlib.ExitStack, found: dict) -> None:
    """``_get_prompt_logprobs_dict`` as if its ``offset = self.query_start_loc.np[req_idx].item()`` read ``+ 1``."""
    from types import SimpleNamespace

    from .faults import _patched
    cls = found["v1"].prompt_logprobs.runner_class
    original = cls.__dict__["_get_prompt_logprobs_dict"]

    def _get_prompt_logprobs_dict(self, hidden_states, num_scheduled_tokens):
        starts = self.query_start_loc
        self.query_start_loc = SimpleNamespace(np=starts.np + 1)
        try:
            return original(self, hidden_states, num_scheduled_tokens)
        finally:
            self.query_start_loc = starts
    stack.enter_context(_patched(cls, "_get_prompt_logprobs_dict", _get_prompt_logprobs_dict))


PLANT = {
    "condense_drops_lora_mapping": lambda stack, found: _keep_mapping(stack, found, "condense"),
    "swap_states_skips_lora_mapping": lambda stack, found: _keep_mapping(stack, found, "swap_states"),
    "dispatcher_ignores_lora": _dispatch_without_lora,
    "v1_prompt_rows_shifted": _prompt_rows_shifted,
}
