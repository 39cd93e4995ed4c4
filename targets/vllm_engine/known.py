"""The real vLLM bugs ``vllm_engine`` finds on a release as shipped (docs/vllm.md, "What it found in vLLM";
docs/findings/), told apart in a campaign's report by their op, output and message: a finding that is one of
them is not new. Used by the integration tests and the GPU acceptance step
``vllm-engine`` (scripts/gpu/acceptance_steps.py).
"""

from __future__ import annotations


def known_bug(finding: dict, *, logits_mapped_per_row: bool) -> str | None:
    """"P1", "S1", "E1", "E2" or "V1" where ``finding`` (a report's finding: ``violation``, ``case``) is that bug, else
    None. ``logits_mapped_per_row``: this vLLM's ``LoraState.make_lora_inputs`` takes ``num_logits`` (0.34 and
    later), so a wrong lm_head row is not S1 (nor in a V1-runner case: that runner maps 1 + drafts rows). V1 is
    told by a graph replay's mismatch in a layer (the logits run outside the graph) under ``specialize_active_lora``,
    in a V1-runner case (v1_runner.py) or a V2-runner case with CUDA graphs (v2_graphs.py)."""
    v = finding["violation"]
    case = finding["case"]
    tensor, message = v.get("tensor") or "", v.get("message") or ""
    at = (v.get("details") or {}).get("op_index")
    op = case["ops"][at] if at is not None and at < len(case["ops"]) else {}
    if "prompt_logits" in tensor:
        return "P1"  # the prompt-logprobs rows under the sampled rows' mapping (vllm-project/vllm#53842)
    if v["kind"] == "crash" and "warmup_" in message and "/not/a/real/path" in message:
        return "E1"  # a runtime dummy run evicts a real adapter holding a warm-up id, then loads it
    if v["kind"] == "crash" and op.get("op") == "dummy_run" and (
            v.get("kernel") == "KeyError" or (v.get("kernel") == "ValueError"
                                              and "punica_wrapper/utils.py" in (v.get("location") or ""))):
        # its second form: a pinned adapter, more dummies activated than free slots; convert_mapping finds no
        # slot for the evicted dummy: KeyError (a dict of ids: 0.28 on), ValueError (list.index: 0.24)
        return "E1"
    if v["kind"] == "crash" and "StopIteration" in message and \
            set(case["config"].get("target_modules") or []) <= {"lm_head"}:
        return "E2"  # LoRA on lm_head alone: an empty dummy adapter
    v1_runner = case["config"].get("runner") == "v1"
    if tensor.startswith("replay.") and not tensor.startswith("replay.logits") and \
            case["config"].get("specialize_active_lora"):
        return "V1"  # a graph of key k replays a batch of k adapters and base-model rows with grid z = k
    if tensor.startswith("step.logits") and not logits_mapped_per_row and not v1_runner:
        return "S1"  # one lm_head row per request under speculative decoding (fixed in 0.34)
    return None
