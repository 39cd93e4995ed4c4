"""``sglang_engine``'s MoE block stays within float16's range (moe.INPUT_SCALE, docs/sglang.md "MoE LoRA").

A clean 0.5.23 campaign (seed 0) reported ``numeric-mismatch of step.experts`` on float16 (virtual-experts) cases:
the experts returned inf. The float64 reference was past float16 too: the block took the raw residual stream (an
adapter at alpha / r = 8 on q / k / v / o left it at |x| ~ 600) and its experts' ``silu(gate) * up`` reached ~1e7.
No SGLang is needed here: the float64 model (``model.reference``, the composition the engine's forward mirrors) over
the base weights' distribution (``model.build``) and the adapters' tensors as a case writes them (``adapters.tensors``:
what ``AdapterFiles`` reads back; safetensors is SGLang's environment's, not this one's).
"""

import types

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from targets.sglang_engine import adapters, cases, model, moe

FLOAT16_MAX = 65504.0


def _hf(spec: dict):
    return types.SimpleNamespace(**model.DIMS, num_local_experts=spec["experts"], fuzzrunner_moe=dict(spec))


def _base(hf, seed: int) -> dict:
    """Base weights with ``model.build``'s distribution (randn / sqrt(fan in); the embedding unscaled), float64."""
    g = torch.Generator().manual_seed(seed)
    H, inter, E = hf.hidden_size, hf.intermediate_size, hf.num_local_experts
    qkv = (hf.num_attention_heads + 2 * hf.num_key_value_heads) * hf.head_dim
    shapes = {"model.embed_tokens": (hf.vocab_size, H), "model.layers.0.self_attn.qkv_proj": (qkv, H),
              "model.layers.0.self_attn.o_proj": (H, hf.num_attention_heads * hf.head_dim),
              f"model.layers.0.{moe.BLOCK}.experts.w13_weight": (E, 2 * inter, H),
              f"model.layers.0.{moe.BLOCK}.experts.w2_weight": (E, H, inter), "lm_head": (hf.vocab_size, H)}
    return {k: torch.randn(s, generator=g, dtype=torch.float64) / (1 if k == "model.embed_tokens" else s[-1] ** 0.5)
            for k, s in shapes.items()}


def _block_outputs(hf, base: dict, files: list, routing: list, monkeypatch) -> list:
    """Each token's block output as ``model.reference`` computes it (its call of ``moe.reference`` observed)."""
    seen, real = [], moe.reference
    monkeypatch.setattr(moe, "reference", lambda *a: seen.append(real(*a)) or seen[-1])
    model.reference(hf, base, list(range(len(files))), files, routing=[routing])
    return seen


def _files(hf, spec: dict, name: str):
    """An ``AdapterFiles`` holding what ``adapters.write`` stores for the adapter."""
    ad = adapters.AdapterFiles.__new__(adapters.AdapterFiles)
    ad.r, ad.scaling = spec["r"], spec["alpha"] / spec["r"]
    ad.w = {k: v.half().double() for k, v in adapters.tensors(hf, spec, name, 0).items()}
    return ad


def _routing(spec: dict, tokens: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(tokens):
        ids = torch.randperm(spec["experts"], generator=g)[: spec["top_k"]].tolist()
        out.append((ids, torch.softmax(torch.randn(spec["top_k"], generator=g, dtype=torch.float64), -1)))
    return out


@st.composite
def _float16_moe_configs(draw):
    c = draw(cases.sglang_engine_cases(moe=True)).config
    if not (c.get("moe") and c["dtype"] == "float16"):  # the virtual-experts layout: the float16 MoE cases
        spec = {"experts": draw(st.sampled_from(moe.EXPERTS)), "top_k": draw(st.sampled_from(moe.TOP_K)),
                "shared_outer": False, "virtual": True}
        c = dict(c, moe=spec, dtype="float16")
    return c


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(c=_float16_moe_configs(), seed=st.integers(0, 2 ** 16))
def test_a_float16_moe_cases_block_stays_in_float16s_range(c, seed, monkeypatch):
    """Property over drawn float16 MoE cases: every adapter's experts, on every token of the vocabulary, give an
    output well inside float16 (1/8 of its largest finite value: room for the kernels' float16 intermediates)."""
    hf = _hf(c["moe"])
    base = _base(hf, seed)
    for name, spec in c["adapters"].items():
        files = [_files(hf, spec, name)] * hf.vocab_size
        with monkeypatch.context() as m:
            outs = _block_outputs(hf, base, files, _routing(c["moe"], hf.vocab_size, seed), m)
        worst = max(float(o.abs().max()) for o in outs)
        assert worst < FLOAT16_MAX / 8, (name, spec, worst)
