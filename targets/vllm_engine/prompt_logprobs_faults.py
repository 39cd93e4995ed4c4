"""Planted faults in the V2 runner's prompt-logprobs path (prompt_logprobs.py, prompt_scores.py): each replaces one
function of vLLM's for the length of a case, as ``faults.py``'s do (which merges these into the target's ``FAULTS``)."""

from __future__ import annotations

import contextlib

FAULTS = {
    "prompt_token_ids_unshifted":
        "the prompt-logprobs worker's token-id lookup (get_prompt_logprobs_token_ids) forgets the shift by one "
        "position: each prompt row is scored against its own token instead of the next one.",
    "prompt_lora_rows_shifted":
        "a fix of P1's per-row lm_head mapping for the prompt-logprobs rows (LoraState."
        "make_prompt_logprobs_lora_inputs, docs/findings/p1_prompt_logprobs_mapping.patch) is off by one row: each "
        "row gets the next row's adapter and the chunk's last row none, as a padded row would.",
    "token_id_scores_previous_row":
        "the prompt-logprobs worker's fixed-id scoring (compute_prompt_token_id_logprobs, 0.31 on) scores each row's "
        "ids under the logits of the row before it (the chunk's first row keeps its own): a prompt_logprob_token_ids "
        "score predicts the wrong position.",
    "prompt_logprob_start_kept":
        "the prompt-logprobs worker's add_request (0.34: prompt_logprob_start per request index) writes the start "
        "only when the request gives one: a request without a start inherits the start of the finished request that "
        "held its index, and its first prompt rows go unscored (or its id scores land on the wrong rows).",
}


def unavailable(found: dict) -> dict:
    out = {}
    if found.get("prompt_logprobs") is None:
        out["prompt_token_ids_unshifted"] = ("this vLLM has no V2 runner PromptLogprobsWorker "
                                             "(vllm/v1/worker/gpu/sample/prompt_logprob.py)")
    if found.get("LoraState") is None or not hasattr(found["LoraState"], "make_prompt_logprobs_lora_inputs"):
        out["prompt_lora_rows_shifted"] = ("this vLLM maps no prompt-logprobs rows of their own (P1: no "
                                           "LoraState.make_prompt_logprobs_lora_inputs; apply "
                                           "docs/findings/p1_prompt_logprobs_mapping.patch with FUZZRUNNER_VLLM_PATCH)")
    scoring = found["prompt_logprobs"].scoring if found.get("prompt_logprobs") else None
    if scoring is None:
        out["token_id_scores_previous_row"] = ("this vLLM's prompt-logprobs worker scores no fixed token ids "
                                               "(compute_prompt_token_id_logprobs: 0.31 and later)")
    if scoring is None or not scoring.start_all:
        out["prompt_logprob_start_kept"] = ("this vLLM's prompt-logprobs worker keeps no prompt_logprob_start per "
                                            "request index (0.34 and later; 0.31 - 0.33 keep it per request)")
    return out


def _token_ids_unshifted(stack: contextlib.ExitStack, found: dict) -> None:
    from .faults import _patched
    module = found["prompt_logprobs"].module
    original = module.get_prompt_logprobs_token_ids

    def get_prompt_logprobs_token_ids(num_tokens, query_start_loc, idx_mapping, num_computed_tokens, all_token_ids):
        return original(num_tokens, query_start_loc, idx_mapping, num_computed_tokens - 1, all_token_ids)
    stack.enter_context(_patched(module, "get_prompt_logprobs_token_ids", get_prompt_logprobs_token_ids))


def _rows_shifted(stack: contextlib.ExitStack, found: dict) -> None:
    from .faults import _patched
    cls = found["LoraState"]
    original = cls.__dict__["make_prompt_logprobs_lora_inputs"]

    def make_prompt_logprobs_lora_inputs(self, req_ids, idx_mapping, num_scheduled_tokens, start, end):
        prompt, token, requests = original(self, req_ids, idx_mapping, num_scheduled_tokens, start, end)
        return prompt[1:] + (0,), token, requests
    stack.enter_context(_patched(cls, "make_prompt_logprobs_lora_inputs", make_prompt_logprobs_lora_inputs))


def _scores_previous_row(stack: contextlib.ExitStack, found: dict) -> None:
    import torch

    from .faults import _patched
    module = found["prompt_logprobs"].module
    original = module.compute_token_logprobs

    def compute_token_logprobs(logits, token_ids):
        return original(torch.cat([logits[:1], logits[:-1]]), token_ids)
    stack.enter_context(_patched(module, "compute_token_logprobs", compute_token_logprobs))


def _start_kept(stack: contextlib.ExitStack, found: dict) -> None:
    from .faults import _patched
    cls = found["prompt_logprobs"].Worker
    original = cls.__dict__["add_request"]

    def add_request(self, req_id, req_idx, sampling_params):
        before = int(self.prompt_logprob_start[req_idx])
        original(self, req_id, req_idx, sampling_params)
        if sampling_params.prompt_logprob_start is None:
            self.prompt_logprob_start[req_idx] = before
    stack.enter_context(_patched(cls, "add_request", add_request))


PLANT = {"prompt_token_ids_unshifted": _token_ids_unshifted, "prompt_lora_rows_shifted": _rows_shifted,
         "token_id_scores_previous_row": _scores_previous_row, "prompt_logprob_start_kept": _start_kept}
