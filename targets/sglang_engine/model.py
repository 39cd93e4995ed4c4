"""A tiny decoder made of SGLang's own layer classes, shaped as SGLang's model code is, and its float64 twin.

``Tiny`` has the module tree of SGLang's ``LlamaForCausalLM`` that the LoRA manager walks
(``model.embed_tokens``, ``model.layers.N.self_attn.{qkv_proj,o_proj}``, ``model.layers.N.mlp.{gate_up_proj,
down_proj}``, ``lm_head``), each SGLang's class (``VocabParallelEmbedding``, ``QKVParallelLinear``,
``RowParallelLinear``, ``MergedColumnParallelLinear``, ``ParallelLMHead``), so ``LoRAManager.init_lora_modules``
wraps them with its own LoRA layers. Attention is replaced by a token-local mix (``q + k + v``, the KV heads
repeated to the query heads): LoRA acts on the projections, and the mix keeps every slice of ``qkv_proj``
in the output, so a wrong q, k or v delta shows. ``forward`` calls the modules as SGLang's model code does
(``layer(x)`` returning ``(out, bias)`` for linears). With ``tie_word_embeddings`` (a case's ``tie``) ``lm_head`` is
``model.embed_tokens`` itself, as SGLang's ``LlamaForCausalLM.__init__`` ties it.

``reference`` is the same computation in float64 from the base weights and, per token, its request's
adapter as read back from the adapter's own files (``adapters.AdapterFiles``), never from SGLang's pool.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from . import moe as sparse

DIMS = {"hidden_size": 32, "intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "num_hidden_layers": 1, "vocab_size": 64}


def hf_config_dict() -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 256,
            "rms_norm_eps": 1e-6, "torch_dtype": "float16", "tie_word_embeddings": False, **DIMS}


def case_config(hf, tie: bool):
    """The model config for a case: ``hf`` (not changed), with ``tie_word_embeddings`` where the case ties (``tie``):
    the Hugging Face field SGLang's model code reads to make ``lm_head`` the embedding itself."""
    if not tie:
        return hf
    out = copy.deepcopy(hf)
    out.tie_word_embeddings = True
    return out


def build(cfg, dtype: torch.dtype, device: torch.device):
    """``Tiny`` with deterministic base weights (seeded; scaled so activations stay near 1)."""
    from sglang.srt.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
    from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
    H, hd, nh, nkv, inter = (cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads,
                             cfg.intermediate_size)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv_proj = QKVParallelLinear(H, hd, nh, nkv, bias=False, params_dtype=dtype)
            self.o_proj = RowParallelLinear(nh * hd, H, bias=False, params_dtype=dtype)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_up_proj = MergedColumnParallelLinear(H, [inter] * 2, bias=False, params_dtype=dtype)
            self.down_proj = RowParallelLinear(inter, H, bias=False, params_dtype=dtype)

    class Layer(nn.Module):
        def __init__(self, layer_id: int):
            super().__init__()
            self.self_attn = Attention()
            if getattr(cfg, "fuzzrunner_moe", None):  # a MoE case: Mixtral's sparse block (moe.py)
                setattr(self, sparse.BLOCK, sparse.block(cfg, layer_id, dtype))
            else:
                self.mlp = MLP()

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, H, params_dtype=dtype)
            self.layers = nn.ModuleList([Layer(i) for i in range(cfg.num_hidden_layers)])

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.config = cfg
            self.model = Inner()
            if getattr(cfg, "tie_word_embeddings", False):  # LlamaForCausalLM: lm_head = model.embed_tokens
                self.lm_head = self.model.embed_tokens
            else:
                self.lm_head = ParallelLMHead(cfg.vocab_size, H, params_dtype=dtype)

    with torch.device(device):
        m = Tiny()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in m.named_parameters():
            fan_in = p.shape[-1] if "embed_tokens" not in name else 1
            p.copy_((torch.randn(p.shape, generator=g) / fan_in ** 0.5).to(dtype))
    return m


def _mix(qkv: torch.Tensor, cfg) -> torch.Tensor:
    """The token-local stand-in for attention: q + k + v, the KV heads repeated to the query heads."""
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
    rep = nh // nkv
    k = k.reshape(-1, nkv, 1, hd).expand(-1, nkv, rep, hd).reshape(-1, nh * hd)
    v = v.reshape(-1, nkv, 1, hd).expand(-1, nkv, rep, hd).reshape(-1, nh * hd)
    return (q + k + v).contiguous()


def hidden(m, ids: torch.Tensor) -> torch.Tensor:
    """The final hidden states (what SGLang's model hands its ``LogitsProcessor``), calling each (LoRA-wrapped)
    module as SGLang's model code does."""
    cfg = m.config
    h = m.model.embed_tokens(ids)
    for layer in m.model.layers:
        qkv, _ = layer.self_attn.qkv_proj(h)
        o, _ = layer.self_attn.o_proj(_mix(qkv, cfg))
        h = h + o
        if hasattr(layer, sparse.BLOCK):  # MixtralMoE.forward: gate, TopK, the (LoRA-wrapped) experts
            h = h + getattr(layer, sparse.BLOCK)(sparse.block_input(h))  # post_attention_layernorm (moe.py)
            continue
        gu, _ = layer.mlp.gate_up_proj(h)
        gate, up = gu.chunk(2, dim=-1)
        d, _ = layer.mlp.down_proj((nn.functional.silu(gate) * up).contiguous())
        h = h + d
    return h


def forward(m, ids: torch.Tensor, last: list | None = None) -> torch.Tensor:
    """Logits with ``lm_head`` called on ``last`` (an extend batch's last token per request; None: every row):
    the decode graphs' captured forward (graphs.py: SGLang's LogitsProcessor keeps every row of a decode batch)."""
    cfg = m.config
    h = hidden(m, ids)
    if last is not None:
        h = h[last].contiguous()
    if hasattr(m.lm_head, "base_layer"):  # LoRA-wrapped: the LogitsProcessor calls it (ParallelLMHeadWithLoRA)
        return m.lm_head(h)[:, : cfg.vocab_size]
    return nn.functional.linear(h, m.lm_head.weight)[:, : cfg.vocab_size]  # else it multiplies by its weight


def base_weights(m) -> dict:
    """The base model's weights in float64, by SGLang module path (``model.layers.0.self_attn.qkv_proj``); a tied
    ``lm_head`` (one parameter, which ``named_parameters`` names once) is the embedding's."""
    out = {}
    for name, p in m.named_parameters():
        key = name.replace(".base_layer", "").removesuffix(".weight")
        out[key] = p.detach().double().cpu()
    out.setdefault("lm_head", out["model.embed_tokens"])
    return out


def routes(m) -> list:
    """Per decoder layer: the latest forward's routing per token (moe.routes), or None for a dense layer."""
    return [sparse.routes(getattr(layer, sparse.BLOCK)) if hasattr(layer, sparse.BLOCK) else None
            for layer in m.model.layers]


def reference(cfg, base: dict, ids: list[int], adapters: list, last: list | None = None,
              routing: list | None = None) -> torch.Tensor:
    """float64 logits: token ``t`` with ``adapters[t]`` (an ``AdapterFiles`` or None), from the files only; a MoE
    layer routes each token to the experts SGLang's ``TopK`` picked (``routing``: ``routes``), with its weights."""
    nh, nkv, hd, inter = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size
    parts = {"qkv_proj": (("q_proj", nh * hd), ("k_proj", nkv * hd), ("v_proj", nkv * hd)),
             "o_proj": (("o_proj", cfg.hidden_size),), "gate_up_proj": (("gate_proj", inter), ("up_proj", inter)),
             "down_proj": (("down_proj", cfg.hidden_size),), "lm_head": (("lm_head", cfg.vocab_size),)}
    rows = []
    for tok, ad in zip(ids, adapters):
        def lin(x, path, _ad=ad):
            y = x @ base[path].T
            d = None if _ad is None else _ad.delta(path, parts[path.rsplit(".", 1)[-1]], x)
            return y if d is None else y + d
        h = base["model.embed_tokens"][tok].clone()
        d = None if ad is None else ad.embedding_delta(tok)
        if d is not None:
            h = h + d
        for i in range(cfg.num_hidden_layers):
            pre = f"model.layers.{i}"
            qkv = lin(h, f"{pre}.self_attn.qkv_proj")
            h = h + lin(_mix(qkv[None], cfg)[0], f"{pre}.self_attn.o_proj")
            if routing is not None and routing[i] is not None:
                moe_pre = f"{pre}.{sparse.BLOCK}.experts"
                h = h + sparse.reference(sparse.block_input(h), routing[i][len(rows)], base[f"{moe_pre}.w13_weight"],
                                         base[f"{moe_pre}.w2_weight"], sparse.delta(ad, moe_pre))
                continue
            gate, up = lin(h, f"{pre}.mlp.gate_up_proj").chunk(2, dim=-1)
            h = h + lin(nn.functional.silu(gate) * up, f"{pre}.mlp.down_proj")
        rows.append(lin(h, "lm_head")[: cfg.vocab_size])
    out = torch.stack(rows)
    return out if last is None else out[last]


def base_path_logits(m, ids: torch.Tensor, last: list | None = None, logits=None) -> torch.Tensor:
    """The base model's logits through the base layers only (no LoRA wrapper runs): what a request without an
    adapter must get exactly. ``logits(hidden, lm_head)``: SGLang's LogitsProcessor over the base ``lm_head`` (the
    rows and passes it multiplies are the LoRA'd forward's), else ``lm_head`` on ``last``."""
    cfg = m.config

    def base(mod, x):
        inner = getattr(mod, "base_layer", mod)
        return nn.functional.linear(x, inner.weight)
    emb = m.model.embed_tokens
    h = nn.functional.embedding(ids, getattr(emb, "base_layer", emb).weight)
    for layer in m.model.layers:
        qkv = base(layer.self_attn.qkv_proj, h)
        h = h + base(layer.self_attn.o_proj, _mix(qkv, cfg))
        if hasattr(layer, sparse.BLOCK):
            h = h + sparse.base(getattr(layer, sparse.BLOCK), sparse.block_input(h))
            continue
        gate, up = base(layer.mlp.gate_up_proj, h).chunk(2, dim=-1)
        h = h + base(layer.mlp.down_proj, (nn.functional.silu(gate) * up).contiguous())
    if logits is not None:
        return logits(h, getattr(m.lm_head, "base_layer", m.lm_head))[:, : cfg.vocab_size]
    if last is not None:
        h = h[last].contiguous()
    return base(m.lm_head, h)[:, : cfg.vocab_size]
