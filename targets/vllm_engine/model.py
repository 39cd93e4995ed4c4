"""A one-layer Llama-shaped model made of vLLM's own layer classes, for vLLM's LoRA manager to wrap.

vLLM builds a model from its Hugging Face config (``ModelConfig``) and a class registered in its
``ModelRegistry``; the LoRA manager then replaces every supported module by its ``*WithLoRA`` layer.
This module is that class: ``VocabParallelEmbedding`` (``embed_tokens``), ``QKVParallelLinear``
(``qkv_proj``), ``RowParallelLinear`` (``o_proj``, ``down_proj``), ``MergedColumnParallelLinear``
(``gate_up_proj``), ``ParallelLMHead`` and ``LogitsProcessor``, as vLLM's Llama has them, with the
packing drawn by the case (``layout``):

* ``qkv``: ``merged`` (adapters train ``q_proj``/``k_proj``/``v_proj``: ``MergedQKVParallelLinearWithLoRA``,
  three slices) or ``fused`` (one ``qkv_proj``: ``QKVParallelLinearWithLoRA``);
* ``gate_up``: ``merged`` (``gate_proj``/``up_proj``: ``MergedColumnParallelLinearWithLoRA``) or ``fused``
  (one ``gate_up_proj``: ``ColumnParallelLinearWithLoRA``);
* ``gdn`` (optional; absent: ``none``): the input projection of a Qwen3.5 linear-attention (GatedDeltaNet) layer,
  ``linear_attn``, in the shapes vLLM's Qwen3.5 declares (``GDN``): ``qkvz``, one ``MergedColumnParallelLinear``
  ``in_proj_qkvz`` over the output slices [q, k, v, z] whose ``packed_modules_mapping`` packs two adapter-visible
  names, ``in_proj_qkv`` (covering q, k and v) and ``in_proj_z`` (vLLM 0.21 and later, #37912; 0.17 - 0.19 under
  LoRA too), so that vLLM's LoRA layer has more output slices than packed names (``expand_packed_lora``); or
  ``split``, the two projections as separate modules, ``in_proj_qkv`` (a ``MergedColumnParallelLinear`` over
  [q, k, v] that packs itself: one name over three slices) and ``in_proj_z`` (a ``ColumnParallelLinear``): Qwen3.5
  under LoRA in 0.20 (``create_in_proj_qkvz=False``).

The shapes live in the config.json the case writes (``model_dir``), under ``fuzzrunner_layout``, so
vLLM's ``ModelConfig`` reads them as it reads any model's. Base weights are drawn from the case's seed. A case
with a ``moe`` knob also gets a Mixtral-shaped sparse block of vLLM's ``FusedMoE`` (moe.py), under
``fuzzrunner_moe``.
"""

from __future__ import annotations

import json
import os

import torch

ARCH = "FuzzrunnerTinyLoRAForCausalLM"
# the same model flagged ``is_3d_moe_weight`` (as vLLM's Qwen3-VL-MoE, GPT-OSS: expert weights stacked 3D on disk), so
# that vLLM's LoRA manager wraps its experts in ``FusedMoE3DWithLoRA`` (a ``moe`` case with ``"format": "3d"``)
ARCH_3D = "FuzzrunnerTiny3DMoELoRAForCausalLM"
HEAD_DIM = 8
LAYER = "model.layers.0"

# module (the runtime name vLLM wraps) -> the adapter-visible sub-modules packed in it, per layout
PACKED = {
    ("qkv", "merged"): ("qkv_proj", ("q_proj", "k_proj", "v_proj")),
    ("qkv", "fused"): ("qkv_proj", ("qkv_proj",)),
    ("gate_up", "merged"): ("gate_up_proj", ("gate_proj", "up_proj")),
    ("gate_up", "fused"): ("gate_up_proj", ("gate_up_proj",)),
}
# where each runtime module sits in the model
PATHS = {"embed_tokens": "model.embed_tokens", "qkv_proj": f"{LAYER}.self_attn.qkv_proj",
         "o_proj": f"{LAYER}.self_attn.o_proj", "gate_up_proj": f"{LAYER}.mlp.gate_up_proj",
         "down_proj": f"{LAYER}.mlp.down_proj", "lm_head": "lm_head"}
LAYERS = tuple(PATHS)  # the layers a step can run: each *WithLoRA module, and the logits processor for lm_head

# the Qwen3.5 linear-attention input projection per ``gdn`` layout: {runtime module: (output sizes, packed names)},
# as vLLM's qwen3_5.py / gdn_linear_attn.py declare them (output sizes in units of key_dim k and value_dim v; one
# output size: a ColumnParallelLinear)
GDN = {
    "none": {},
    "qkvz": {"in_proj_qkvz": (("k", "k", "v", "v"), ("in_proj_qkv", "in_proj_z"))},
    "split": {"in_proj_qkv": (("k", "k", "v"), ("in_proj_qkv",)), "in_proj_z": (("v",), ("in_proj_z",))},
}
GDN_PATHS = {m: f"{LAYER}.linear_attn.{m}" for m in ("in_proj_qkvz", "in_proj_qkv", "in_proj_z")}
KEY_DIM, VALUE_DIM = HEAD_DIM, 2 * HEAD_DIM  # one key head, two value heads: q, k and z, v of different sizes


def gdn(layout: dict) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """The layout's linear-attention modules (``GDN``; none for a layout without ``gdn``, as every case before)."""
    return GDN[layout.get("gdn", "none")]


def gdn_sizes(module: str, layout: dict) -> list[int]:
    """The output sizes of a linear-attention module of ``layout`` (vLLM's ``output_sizes``)."""
    return [{"k": KEY_DIM, "v": VALUE_DIM}[x] for x in gdn(layout)[module][0]]


def path(module: str) -> str:
    """Where a runtime module sits in the model."""
    return PATHS.get(module) or GDN_PATHS[module]


def dims(c: dict) -> dict:
    """The model's sizes from a case config: hidden H, heads of HEAD_DIM, one KV head, MLP 2H, vocab."""
    h = c["hidden"]
    return {"hidden": h, "heads": h // HEAD_DIM, "kv_heads": 1, "intermediate": 2 * h, "vocab": c["vocab"]}


def packing(layout: dict) -> dict[str, tuple[str, ...]]:
    """{runtime module: adapter-visible sub-modules} for this layout (every other module packs itself)."""
    out = {m: (m,) for m in PATHS}
    for part in ("qkv", "gate_up"):
        name, subs = PACKED[(part, layout[part])]
        out[name] = subs
    return out | {m: names for m, (_, names) in gdn(layout).items()}


def sub_shapes(c: dict) -> dict[str, tuple[int, int]]:
    """(out, in) of every adapter-visible module of this layout (embed_tokens: (hidden, vocab))."""
    d = dims(c)
    h, q, kv, i, v = d["hidden"], d["heads"] * HEAD_DIM, d["kv_heads"] * HEAD_DIM, d["intermediate"], d["vocab"]
    shapes = {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "qkv_proj": (q + 2 * kv, h), "o_proj": (h, q),
              "gate_proj": (i, h), "up_proj": (i, h), "gate_up_proj": (2 * i, h), "down_proj": (h, i),
              "lm_head": (v, h), "embed_tokens": (h, v),
              "in_proj_qkv": (2 * KEY_DIM + VALUE_DIM, h), "in_proj_z": (VALUE_DIM, h)}
    subs = [s for m in packing(c["layout"]).values() for s in m]
    return {s: shapes[s] for s in subs}


def input_size(c: dict, module: str) -> int:
    d = dims(c)
    return {"o_proj": d["heads"] * HEAD_DIM, "down_proj": d["intermediate"]}.get(module, d["hidden"])


def arch(c: dict) -> str:
    """The case's model class name: ``ARCH_3D`` for a MoE block whose adapters are in the 3D format."""
    return ARCH_3D if (c.get("moe") or {}).get("format") == "3d" else ARCH


def write_config(c: dict, folder: str) -> str:
    """The model's Hugging Face config.json (what vLLM's ModelConfig reads); returns the folder."""
    d = dims(c)
    os.makedirs(folder, exist_ok=True)
    cfg = {"architectures": [arch(c)], "model_type": "llama", "hidden_size": d["hidden"],
           "intermediate_size": d["intermediate"], "num_attention_heads": d["heads"],
           "num_key_value_heads": d["kv_heads"], "head_dim": HEAD_DIM, "num_hidden_layers": 1,
           "vocab_size": d["vocab"], "max_position_embeddings": 64, "torch_dtype": "float16", "rms_norm_eps": 1e-5,
           "tie_word_embeddings": False, "fuzzrunner_layout": dict(c["layout"])}
    if c.get("moe"):
        cfg["fuzzrunner_moe"] = dict(c["moe"])
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    return folder


def model_classes() -> dict:
    """{architecture: model class} (vLLM imported here, once): both registered in vLLM's ModelRegistry by vllm_env.
    ``ARCH_3D`` is ``ARCH`` with vLLM's ``SupportsLoRA.is_3d_moe_weight`` set, the flag by which vLLM's LoRA manager
    picks ``FusedMoE3DWithLoRA`` for its experts (``LoRAModelManager._is_3d_moe_model``)."""
    cls = model_class()

    class FuzzrunnerTiny3DMoELoRAForCausalLM(cls):  # type: ignore[misc, valid-type]
        is_3d_moe_weight = True
    FuzzrunnerTiny3DMoELoRAForCausalLM.__name__ = FuzzrunnerTiny3DMoELoRAForCausalLM.__qualname__ = ARCH_3D
    return {ARCH: cls, ARCH_3D: FuzzrunnerTiny3DMoELoRAForCausalLM}


def model_class():
    """The model class (vLLM imported here, once): registered in vLLM's ModelRegistry by vllm_env."""
    from torch import nn
    from vllm.model_executor.layers.linear import (
        ColumnParallelLinear,
        MergedColumnParallelLinear,
        QKVParallelLinear,
        RowParallelLinear,
    )
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
    from vllm.model_executor.models.interfaces import SupportsLoRA

    class FuzzrunnerTinyLoRAForCausalLM(nn.Module, SupportsLoRA):
        embedding_modules = {"embed_tokens": "input_embeddings", "lm_head": "output_embeddings"}

        def __init__(self, *, vllm_config, prefix: str = ""):
            super().__init__()
            hf = vllm_config.model_config.hf_config
            self.config = hf
            layout = dict(hf.fuzzrunner_layout)
            self.packed_modules_mapping = {m: list(s) for m, s in packing(layout).items()
                                           if m in ("qkv_proj", "gate_up_proj") or m in gdn(layout)}
            h, i, v = hf.hidden_size, hf.intermediate_size, hf.vocab_size
            heads, kv = hf.num_attention_heads, hf.num_key_value_heads
            self.model = nn.Module()
            self.model.embed_tokens = VocabParallelEmbedding(v, h, prefix="model.embed_tokens")
            layer = nn.Module()
            layer.self_attn, layer.mlp = nn.Module(), nn.Module()
            layer.self_attn.qkv_proj = QKVParallelLinear(h, HEAD_DIM, heads, kv, bias=False,
                                                         prefix=f"{LAYER}.self_attn.qkv_proj")
            layer.self_attn.o_proj = RowParallelLinear(heads * HEAD_DIM, h, bias=False,
                                                       prefix=f"{LAYER}.self_attn.o_proj")
            layer.mlp.gate_up_proj = MergedColumnParallelLinear(h, [i, i], bias=False,
                                                                prefix=f"{LAYER}.mlp.gate_up_proj")
            layer.mlp.down_proj = RowParallelLinear(i, h, bias=False, prefix=f"{LAYER}.mlp.down_proj")
            if gdn(layout):  # Qwen3.5's linear attention: its input projection(s), as create_qkvz_proj makes them
                layer.linear_attn = nn.Module()
                for m in gdn(layout):  # 0.20's in_proj_z of the split form: a ColumnParallelLinear
                    sizes = gdn_sizes(m, layout)
                    setattr(layer.linear_attn, m,
                            MergedColumnParallelLinear(h, sizes, bias=False, prefix=GDN_PATHS[m]) if len(sizes) > 1
                            else ColumnParallelLinear(h, sizes[0], bias=False, prefix=GDN_PATHS[m]))
            if getattr(hf, "fuzzrunner_moe", None):
                from .moe import block
                layer.block_sparse_moe = block(hf)
            self.model.layers = nn.ModuleList([layer])
            self.lm_head = ParallelLMHead(v, h, prefix="lm_head")
            self.logits_processor = LogitsProcessor(v)

        def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.model.embed_tokens(input_ids)

        def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            return self.embed_input_ids(input_ids)

        def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
            return self.logits_processor(self.lm_head, hidden_states)

    from .moe import model_mapping
    mapping = model_mapping()
    if mapping is not None:  # a release whose experts do not map their checkpoint names (moe.py)
        FuzzrunnerTinyLoRAForCausalLM.get_expert_mapping = mapping  # type: ignore[attr-defined]
    FuzzrunnerTinyLoRAForCausalLM.__name__ = FuzzrunnerTinyLoRAForCausalLM.__qualname__ = ARCH
    return FuzzrunnerTinyLoRAForCausalLM


def build(cls, vllm_config, device, seed: int):
    """The model on ``device`` in the model's dtype, as vLLM's loader builds it (vLLM's layers allocate their
    parameters with torch.empty; a checkpoint would fill them: here, random values from ``seed``)."""
    dtype = vllm_config.model_config.dtype
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = cls(vllm_config=vllm_config)
    finally:
        torch.set_default_dtype(old)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_((0.25 * torch.randn(p.shape, generator=g)).to(p.dtype))
    return model
