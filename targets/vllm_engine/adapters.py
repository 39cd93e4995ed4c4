"""Adapters as PEFT folders on disk (what vLLM loads through its own path), and their float64 deltas.

A case's ``config["adapters"]`` maps an adapter id to ``{"rank", "alpha", "rslora", "targets", "seed"}``:
``targets`` are adapter-visible module names of the model's layout (model.py: ``q_proj``... or the fused
``qkv_proj``; ``embed_tokens``; ``lm_head``; with a linear-attention layout, ``in_proj_qkv`` / ``in_proj_z``: an
adapter may target either alone, a partial adapter of the packed ``in_proj_qkvz``). Each adapter is written once per
process as PEFT writes it,
``adapter_config.json`` and ``adapter_model.safetensors`` (``base_model.model.<module>.lora_A.weight``
[rank, in], ``lora_B.weight`` [out, rank]; the embedding as ``lora_embedding_A`` [rank, vocab] and
``lora_embedding_B`` [hidden, rank]), and vLLM loads it from there (``WorkerLoRAManager._load_adapter``:
``PEFTHelper.from_local_dir``, ``LoRAModel.from_local_checkpoint``).

With ``experts`` in its targets (a case with a MoE block, moe.py), an adapter has LoRA weights for every
expert's ``w1`` / ``w2`` / ``w3`` (``...block_sparse_moe.experts.<e>.w1.lora_A.weight``, as PEFT writes a
Mixtral adapter; vLLM packs them with ``PackedLoRALayerWeights.pack_moe``, which needs all three of every
expert).

In a ``moe`` case of the 3D format (``"format": "3d"``: a model flagged ``is_3d_moe_weight``, whose experts vLLM
wraps in ``FusedMoE3DWithLoRA``), the expert weights are written as PEFT writes a LoRA of stacked 3D expert
parameters (``target_parameters``: ``experts.gate_up_proj`` [E, H, 2I] and ``experts.down_proj`` [E, I, H];
PEFT's ``ParamWrapper`` nests, so the first parameter's LoRA is saved under ``experts.base_layer`` and the second's
under ``experts``): per parameter one ``lora_A.weight`` [E * rank, in] and one ``lora_B.weight`` [out, rank * E],
expert e's factors being ``A.reshape(E, rank, in)[e]`` and ``B.reshape(out, rank, E)[:, :, e]`` (PEFT's
``ParamWrapper.get_delta_weight``); gate and up share one A, and the gate is the first half of the 2I outputs.

The reference delta of a row uses only these weights and the PEFT scaling (``alpha / rank``, or
``alpha / sqrt(rank)`` with rsLoRA), never vLLM's stacked tensors or metadata.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import math
import os
import shutil
import tempfile

import torch

from . import moe
from .model import LAYER, sub_shapes

_DIR: list[str] = []  # this process's folder of adapters, made on first use


def _folder() -> str:
    if not _DIR:
        d = tempfile.mkdtemp(prefix="fuzzrunner-vllm-adapters-")
        atexit.register(shutil.rmtree, d, ignore_errors=True)
        _DIR.append(d)
    return _DIR[0]


def peft_name(sub: str) -> str:
    """The module's name in the adapter's tensors (its path in the model)."""
    if sub == "embed_tokens":
        return "model.embed_tokens"
    if sub == "lm_head":
        return "lm_head"
    if sub.startswith("in_proj_"):  # Qwen3.5's linear attention (model.GDN)
        return f"{LAYER}.linear_attn.{sub}"
    part = "self_attn" if sub in ("q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj") else "mlp"
    return f"{LAYER}.{part}.{sub}"


def scaling(spec: dict) -> float:
    r, a = spec["rank"], spec["alpha"]
    return a / math.sqrt(r) if spec.get("rslora") else a / r


def weights(c: dict, spec: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{sub-module: (A [rank, in], B [out, rank])} in float32, values exact in the model's dtype (so that vLLM's
    cast to the LoRA dtype changes nothing), drawn from the adapter's seed."""
    shapes = sub_shapes(c)
    exact = getattr(torch, c.get("dtype", "float16"))
    g = torch.Generator().manual_seed(1009 * spec["seed"] + spec["rank"])
    out = {}
    for sub in sorted(shapes):
        if sub not in spec["targets"]:
            continue
        o, i = shapes[sub]
        a = (0.25 * torch.randn(spec["rank"], i, generator=g)).to(exact).float()
        b = (0.25 * torch.randn(o, spec["rank"], generator=g)).to(exact).float()
        out[sub] = (a, b)
    return out


def fused(c: dict) -> bool:
    """The case's expert adapters are in the 3D format (``FusedMoE3DWithLoRA``)."""
    return (c.get("moe") or {}).get("format") == "3d"


def expert_weights(c: dict, spec: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]] | None:
    """{w1|w2|w3: (A [E, rank, in], B [E, out, rank])} in float32 (exact in the model's dtype), or None where
    the adapter has no expert weights; drawn from the adapter's seed, apart from the dense modules' draws. In the
    3D format, w1 and w3 share their A (``expert_weights_3d``)."""
    if not c.get("moe") or moe.LAYER not in spec["targets"]:
        return None
    if fused(c):
        (a13, b13), (a2, b2) = expert_weights_3d(c, spec)
        i = b13.size(1) // 2
        return {"w1": (a13, b13[:, :i]), "w2": (a2, b2), "w3": (a13, b13[:, i:])}
    exact = getattr(torch, c.get("dtype", "float16"))
    g = torch.Generator().manual_seed(7919 * spec["seed"] + spec["rank"] + 1)
    e, r = c["moe"]["experts"], spec["rank"]
    out = {}
    for proj, (o, i) in sorted(moe.shapes(c).items()):  # half the dense modules' scale: the block's values stay
        a = (0.125 * torch.randn(e, r, i, generator=g)).to(exact).float()  # O(1) through its two float16
        b = (0.125 * torch.randn(e, o, r, generator=g)).to(exact).float()  # roundings (moe.INPUT_SCALE)
        out[proj] = (a, b)
    return out


Pair = tuple[torch.Tensor, torch.Tensor]


def expert_weights_3d(c: dict, spec: dict) -> tuple[Pair, Pair]:
    """((A13 [E, rank, H], B13 [E, 2I, rank]), (A2 [E, rank, I], B2 [E, H, rank])): a 3D-format adapter's expert
    weights, per expert (float32, exact in the model's dtype); B13's first I rows are the gate's (w1)."""
    exact = getattr(torch, c.get("dtype", "float16"))
    g = torch.Generator().manual_seed(7919 * spec["seed"] + spec["rank"] + 2)
    e, r = c["moe"]["experts"], spec["rank"]
    (i, h), out = moe.shapes(c)["w1"], []
    for o, n in ((2 * i, h), (h, i)):  # half the dense modules' scale, as expert_weights
        a = (0.125 * torch.randn(e, r, n, generator=g)).to(exact).float()
        b = (0.125 * torch.randn(e, o, r, generator=g)).to(exact).float()
        out.append((a, b))
    return out[0], out[1]


def peft_3d(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-expert (A [E, r, in], B [E, out, r]) as PEFT's ``ParamWrapper`` stores them: ``lora_A.weight``
    [E * r, in] (row ``e * r + j``), ``lora_B.weight`` [out, r * E] (column ``j * E + e``)."""
    e, r, n = a.shape
    return a.reshape(e * r, n).contiguous(), b.permute(1, 2, 0).reshape(b.size(1), r * e).contiguous()


def folder(c: dict, spec: dict) -> str:
    """The adapter's PEFT folder (written on first use; keyed by its spec and the model's shapes)."""
    key = hashlib.sha256(json.dumps([sub_shapes(c), spec, c.get("dtype", "float16"), c.get("moe")],
                                    sort_keys=True).encode()).hexdigest()[:16]
    d = os.path.join(_folder(), key)
    if os.path.isdir(d):
        return d
    from safetensors.torch import save_file
    tensors = {}
    for sub, (a, b) in weights(c, spec).items():
        name = f"base_model.model.{peft_name(sub)}"
        if sub == "embed_tokens":
            tensors[f"{name}.lora_embedding_A"], tensors[f"{name}.lora_embedding_B"] = a, b
        else:
            tensors[f"{name}.lora_A.weight"], tensors[f"{name}.lora_B.weight"] = a, b
    experts = expert_weights(c, spec) or {}
    extra = {}
    if experts and fused(c):  # PEFT's nested ParamWrappers: gate_up_proj under experts.base_layer, down_proj, experts
        for sub, (a, b) in zip(("base_layer.", ""), expert_weights_3d(c, spec)):
            name = f"base_model.model.{moe.PATH}.{sub}"
            tensors[f"{name}lora_A.weight"], tensors[f"{name}lora_B.weight"] = peft_3d(a, b)
        extra = {"target_parameters": [f"{moe.LAYER}.gate_up_proj", f"{moe.LAYER}.down_proj"]}
    else:
        for proj, (a, b) in experts.items():
            for e in range(a.size(0)):
                name = f"base_model.model.{moe.PATH}.{e}.{proj}"
                tensors[f"{name}.lora_A.weight"], tensors[f"{name}.lora_B.weight"] = (a[e].contiguous(),
                                                                                      b[e].contiguous())
    targets = sorted(t for t in spec["targets"] if t != moe.LAYER) + (list(moe.PROJS) if experts and not extra
                                                                       else [])
    tmp = d + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    save_file(tensors, os.path.join(tmp, "adapter_model.safetensors"))
    with open(os.path.join(tmp, "adapter_config.json"), "w", encoding="utf-8") as f:
        json.dump({"peft_type": "LORA", "r": spec["rank"], "lora_alpha": spec["alpha"],
                   "use_rslora": bool(spec.get("rslora")), "target_modules": targets,
                   "bias": "none", "task_type": "CAUSAL_LM", **extra}, f)
    os.replace(tmp, d)
    return d


class Deltas:
    """Float64 LoRA deltas of one case's adapters, per runtime module (the slices packed in it): the output columns of
    a packed module are its packed names' in order, each name's delta over the columns it covers (``in_proj_qkv``'s
    over q, k and v of ``in_proj_qkvz``, ``in_proj_z``'s over z), and 0 over a name the adapter does not target."""

    def __init__(self, c: dict, packing: dict[str, tuple[str, ...]], wrapped: set[str]):
        self.c, self.packing, self.wrapped = c, packing, wrapped
        self._w = {int(i): (weights(c, spec), scaling(spec)) for i, spec in c["adapters"].items()}
        self.shapes = sub_shapes(c)

    def linear(self, module: str, adapter: int, x: torch.Tensor) -> torch.Tensor:
        """[rows, out] delta of ``module`` for rows ``x`` under ``adapter`` (0: none)."""
        cols = []
        w, s = self._w.get(adapter, ({}, 0.0))
        for sub in self.packing[module]:
            o = self.shapes[sub][0]
            if adapter and module in self.wrapped and sub in w:
                a, b = w[sub]
                cols.append(s * (x.double() @ a.double().T @ b.double().T))
            else:
                cols.append(torch.zeros(x.size(0), o, dtype=torch.float64))
        return torch.cat(cols, dim=1)

    def experts(self, adapter: int) -> tuple[dict | None, float]:
        """(the adapter's expert weights or None, its scaling): None for no adapter, an adapter without expert
        weights, or experts the deployment filter leaves unwrapped."""
        spec = self.c["adapters"].get(str(adapter))
        if not adapter or spec is None or moe.LAYER not in self.wrapped:
            return None, 0.0
        return expert_weights(self.c, spec), scaling(spec)

    def embedding(self, adapter: int, ids: torch.Tensor) -> torch.Tensor:
        """[rows, hidden] delta of the embedding for token ``ids`` under ``adapter``."""
        w, s = self._w.get(adapter, ({}, 0.0))
        h = self.shapes["embed_tokens"][0]
        if not adapter or "embed_tokens" not in self.wrapped or "embed_tokens" not in w:
            return torch.zeros(ids.numel(), h, dtype=torch.float64)
        a, b = w["embed_tokens"]
        return s * (b.double() @ a.double()[:, ids]).T
