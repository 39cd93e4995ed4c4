"""Real PEFT adapter folders (``adapter_config.json`` + ``adapter_model.safetensors``) for the tiny model,
written from a case's adapter specs, and read back (from the files, in float64) for the reference.

A spec (``config["adapters"][name]``): ``r`` (rank), ``alpha`` (``lora_alpha``: SGLang's scaling is
``alpha / r``), ``modules`` (PEFT target module names: ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``,
``gate_proj``, ``up_proj``, ``down_proj``, ``embed_tokens``, ``lm_head``). A load op's ``v`` (version)
changes the weights, not the spec: a reload of the same name can bring new weights.
"""

from __future__ import annotations

import hashlib
import json
import os

import torch

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
PEFT_MODULES = ATTN + MLP + ("embed_tokens", "lm_head")
MOE_BLOCK = "block_sparse_moe"  # moe.BLOCK: a MoE model's experts, where the MLP modules adapt each expert
# SGLang's target-module names (--lora-target-modules) for each PEFT module
SERVER_NAME = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "o_proj": "o_proj",
               "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "down_proj": "down_proj",
               "embed_tokens": "embed_tokens", "lm_head": "lm_head"}


def _dims(cfg) -> dict:
    H, inter, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    return {"q_proj": (H, cfg.num_attention_heads * hd), "k_proj": (H, cfg.num_key_value_heads * hd),
            "v_proj": (H, cfg.num_key_value_heads * hd), "o_proj": (cfg.num_attention_heads * hd, H),
            "gate_proj": (H, inter), "up_proj": (H, inter), "down_proj": (inter, H)}


def _seed(name: str, version: int) -> int:
    return int(hashlib.sha256(f"{name}/{version}".encode()).hexdigest()[:8], 16)


def tensors(cfg, spec: dict, name: str, version: int) -> dict:
    """The adapter's PEFT state dict (float32 values, stored as float16), keyed as PEFT saves them."""
    g = torch.Generator().manual_seed(_seed(name, version))
    r, dims, out = spec["r"], _dims(cfg), {}
    experts = (getattr(cfg, "fuzzrunner_moe", None) or {}).get("experts")
    for layer in range(cfg.num_hidden_layers):
        for mod in spec["modules"]:
            if mod in MLP and experts:  # a MoE model (moe.py): each expert's own gate / up / down LoRA
                out |= _expert_tensors(g, dims[mod], r, experts, f"base_model.model.model.layers.{layer}.{MOE_BLOCK}",
                                       mod, cfg.fuzzrunner_moe.get("shared_outer", False))
            elif mod in dims:
                i, o = dims[mod]
                pre = f"base_model.model.model.layers.{layer}.{'self_attn' if mod in ATTN else 'mlp'}.{mod}"
                out[pre + ".lora_A.weight"] = torch.randn(r, i, generator=g) / i ** 0.5
                out[pre + ".lora_B.weight"] = torch.randn(o, r, generator=g) / r ** 0.5
    if "embed_tokens" in spec["modules"]:
        out["base_model.model.model.embed_tokens.lora_embedding_A"] = torch.randn(r, cfg.vocab_size, generator=g)
        out["base_model.model.model.embed_tokens.lora_embedding_B"] = torch.randn(cfg.hidden_size, r, generator=g) / r
    if "lm_head" in spec["modules"]:
        H = cfg.hidden_size
        out["base_model.model.lm_head.lora_A.weight"] = torch.randn(r, H, generator=g) / H ** 0.5
        out["base_model.model.lm_head.lora_B.weight"] = torch.randn(cfg.vocab_size, r, generator=g) / r ** 0.5
    return {k: v.to(torch.float16).contiguous() for k, v in out.items()}


def _expert_tensors(g, dims: tuple, r: int, experts: int, block: str, mod: str, shared_outer: bool) -> dict:
    """One projection's LoRA of every expert: per expert (``experts.<e>.<mod>``, PEFT's layout), or, for
    ``--experts-shared-outer-loras``, SGLang's shared-outer layout: 3-D ``experts.<mod>`` tensors whose first dimension
    is the expert, 1 for the factor all experts share (gate / up lora_A, down lora_B)."""
    i, o = dims
    if not shared_outer:
        out = {}
        for e in range(experts):
            out[f"{block}.experts.{e}.{mod}.lora_A.weight"] = torch.randn(r, i, generator=g) / i ** 0.5
            out[f"{block}.experts.{e}.{mod}.lora_B.weight"] = torch.randn(o, r, generator=g) / r ** 0.5
        return out
    a_experts, b_experts = (experts, 1) if mod == "down_proj" else (1, experts)
    return {f"{block}.experts.{mod}.lora_A.weight": torch.randn(a_experts, r, i, generator=g) / i ** 0.5,
            f"{block}.experts.{mod}.lora_B.weight": torch.randn(b_experts, o, r, generator=g) / r ** 0.5}


def write(folder: str, cfg, spec: dict, name: str, version: int) -> str:
    """The adapter folder ``folder/NAME-vVERSION`` (written once; its content depends on its inputs only)."""
    from safetensors.torch import save_file
    path = os.path.join(folder, f"{name}-v{version}-r{spec['r']}-a{spec['alpha']}-{'-'.join(spec['modules'])}")
    if not os.path.exists(os.path.join(path, "adapter_config.json")):
        os.makedirs(path, exist_ok=True)
        save_file(tensors(cfg, spec, name, version), os.path.join(path, "adapter_model.safetensors"))
        with open(os.path.join(path, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "r": spec["r"], "lora_alpha": spec["alpha"],
                       "target_modules": list(spec["modules"]), "bias": "none", "task_type": "CAUSAL_LM"}, f)
    return path


class AdapterFiles:
    """An adapter as its files say (float64): the reference's only source of adapter weights."""

    def __init__(self, path: str):
        from safetensors.torch import load_file
        with open(os.path.join(path, "adapter_config.json")) as f:
            conf = json.load(f)
        self.r, self.scaling = conf["r"], conf["lora_alpha"] / conf["r"]
        self.w = {k: v.double() for k, v in load_file(os.path.join(path, "adapter_model.safetensors")).items()}

    def delta(self, path: str, parts: tuple, x: torch.Tensor) -> torch.Tensor | None:
        """The adapter's addition to SGLang module ``path``; ``parts`` the PEFT modules it stacks, each with its
        output width ``(name, width)`` (a part the adapter lacks adds zeros); None when it adapts none."""
        out, any_part = [], False
        for mod, width in parts:
            prefix = "base_model.model.lm_head" if mod == "lm_head" else \
                f"base_model.model.{path.rsplit('.', 1)[0]}.{mod}"
            a, b = self.w.get(f"{prefix}.lora_A.weight"), self.w.get(f"{prefix}.lora_B.weight")
            any_part |= a is not None
            out.append(torch.zeros(width, dtype=torch.float64) if a is None else self.scaling * ((x @ a.T) @ b.T))
        return torch.cat(out, dim=-1) if any_part else None

    def expert_delta(self, path: str, expert: int, proj: str, x: torch.Tensor) -> torch.Tensor | None:
        """Expert ``expert``'s ``proj`` addition of the experts at SGLang module ``path`` (None: not adapted)."""
        a, b = self._expert_factor(path, expert, proj, "A"), self._expert_factor(path, expert, proj, "B")
        return None if a is None else self.scaling * ((x @ a.T) @ b.T)

    def _expert_factor(self, path: str, expert: int, proj: str, which: str) -> torch.Tensor | None:
        own = self.w.get(f"base_model.model.{path}.{expert}.{proj}.lora_{which}.weight")
        if own is not None:
            return own
        stacked = self.w.get(f"base_model.model.{path}.{proj}.lora_{which}.weight")  # shared-outer: [experts or 1, ...]
        return None if stacked is None else stacked[expert if stacked.shape[0] > 1 else 0]

    def embedding_delta(self, token: int) -> torch.Tensor | None:
        a = self.w.get("base_model.model.model.embed_tokens.lora_embedding_A")
        b = self.w.get("base_model.model.model.embed_tokens.lora_embedding_B")
        return None if a is None else self.scaling * (b @ a[:, token])
