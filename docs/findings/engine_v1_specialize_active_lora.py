#!/usr/bin/env python3
"""V1 at the engine level: with ``specialize_active_lora=True``, an adapter's request decoded in one batch with
base-model requests gets the base model's output. Needs a GPU, vLLM installed (0.17 or later), a small model.

NOT RUN by us: our CPU machine has no GPU and no full vLLM, our GPU machine has no network (no weights).

    python engine_v1_specialize_active_lora.py [--model Qwen/Qwen2.5-0.5B-Instruct] [--lora DIR] [--enforce-eager]

Without ``--lora`` a random rank-8 adapter for q_proj/v_proj is written to a temporary folder (PEFT layout), large
enough to change greedy outputs. Three generations, greedy, same prompt P:
  (a) P with the adapter, alone in its batch           -> the adapter's output
  (b) P with the adapter, beside two base-model prompts -> must equal (a); with V1 it equals (c)
  (c) P without the adapter                             -> the base model's output
Exit 1 when (b) differs from (a) (V1 present), 0 when (b) == (a) != (c), 2 when vLLM does not start or crashes
(could not run) or when the adapter changes nothing
(then nothing can be told). ``--enforce-eager`` (no CUDA graphs) must give 0 on any release: the control.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback


def random_adapter(model: str, rank: int = 8, scale: float = 0.08) -> str:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(model)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    outs = {"q_proj": cfg.num_attention_heads * head_dim, "v_proj": cfg.num_key_value_heads * head_dim}
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(cfg.num_hidden_layers):
        for mod, out in outs.items():
            key = f"base_model.model.model.layers.{layer}.self_attn.{mod}"
            tensors[f"{key}.lora_A.weight"] = (scale * torch.randn(rank, cfg.hidden_size, generator=g)).half()
            tensors[f"{key}.lora_B.weight"] = (scale * torch.randn(out, rank, generator=g)).half()
    path = tempfile.mkdtemp(prefix="v1_lora_")
    save_file(tensors, os.path.join(path, "adapter_model.safetensors"))
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(outs),
                   "base_model_name_or_path": model, "bias": "none", "task_type": "CAUSAL_LM"}, f)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    p.add_argument("--lora", help="a LoRA adapter folder for --model (default: a random one)")
    p.add_argument("--enforce-eager", action="store_true", help="the control: no CUDA graphs")
    a = p.parse_args()
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest
    lora_path = a.lora or random_adapter(a.model)
    llm = LLM(model=a.model, enable_lora=True, max_loras=1, max_lora_rank=8, specialize_active_lora=True,
              max_num_seqs=8, gpu_memory_utilization=0.5, enforce_eager=a.enforce_eager, seed=0)
    sp = SamplingParams(temperature=0.0, max_tokens=32)
    lora = LoRARequest("v1_adapter", 1, lora_path)
    prompt = "Write one sentence about the sea."
    others = ["List three prime numbers.", "What is the capital of France?"]
    alone = llm.generate([prompt], sp, lora_request=lora)[0].outputs[0].text
    mixed = llm.generate([prompt, *others], sp, lora_request=[lora, None, None])[0].outputs[0].text
    base = llm.generate([prompt], sp)[0].outputs[0].text
    print(f"(a) adapter, alone:             {alone!r}")
    print(f"(b) adapter, beside base prompts: {mixed!r}")
    print(f"(c) base model:                  {base!r}")
    if alone == base:
        print("RESULT: the adapter does not change this prompt's output; use a stronger --lora (exit 2)")
        return 2
    if mixed != alone:
        print(f"RESULT: V1 PRESENT (exit 1): in a mixed batch the adapter's request got "
              f"{'the base model output' if mixed == base else 'a different output'}")
        return 1
    print("RESULT: no V1 here (exit 0): the mixed batch kept the adapter")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - an engine that does not import or crashes: "could not run" (2), never "bug" (1)
        traceback.print_exc()
        print("could not run (exit 2)", file=sys.stderr)
        sys.exit(2)
