"""The MoE block of the engine target's model: SGLang's ``FusedMoE`` and its ``FusedMoEWithLoRA``, as shipped.

A case with ``config["moe"] = {"experts": E, "top_k": k}`` gets Mixtral's sparse block in place of the dense MLP
(``model.layers.N.block_sparse_moe``: SGLang's ``ReplicatedLinear`` router gate, ``TopK`` and ``FusedMoE``, called
as ``MixtralMoE.forward`` calls them). The LoRA manager wraps the experts in ``FusedMoEWithLoRA`` (its
``init_lora_modules``: a ``FusedMoE`` with ``gate_up_proj`` and ``down_proj`` targeted), the pool makes its
4-D ``gate_up_proj_moe`` / ``down_proj_moe`` buffers (the model's config names ``num_local_experts``), PEFT expert
adapters (``experts.<e>.{gate,up,down}_proj``) load through ``load_lora_adapter`` / the pool, and the forward is
the wrapper's: the Triton MoE runner with SGLang's LoRA hooks (``build_lora_hooks``: ``_add_lora_gate_up_delta`` /
``_add_lora_down_delta`` -> the ``fused_moe_lora`` Triton kernel; ``--lora-use-virtual-experts``:
``merged_experts_fused_moe_lora_add``), in Triton's interpreter on the CPU.

What the release needs compiled code for, and how each is answered (docs/sglang.md, "MoE LoRA"):

* the base experts' alignment (``moe_align_block_size``): ``sgl_kernel`` (compiled) except where a batch is tiny
  and the experts many: from 0.5.18 SGLang's own Triton kernel ``moe_align_small_numel`` takes it (``numel <=
  SMALL_NUMEL_LIMIT`` (64) and ``experts + 1 > 64``), on CUDA. On the CPU the align module alone sees ``_is_cuda``
  yes, with the two names its CUDA import binds (``moe_align_small_numel``, ``SMALL_NUMEL_LIMIT``): nothing else
  CUDA-only is reachable there, and a batch past the limit would call the compiled op (not bound: a NameError),
  so the experts are 64 or 128 and a step's tokens * top-k stay within 64 (``fits``);
* the LoRA alignment (``moe_lora_align_block_size``, a JIT CUDA kernel): SGLang's own Python
  ``_naive_moe_lora_align_block_size`` takes it where ``tokens * top_k * 8 <= experts * max_loras`` outside
  capture (0.5.11+); so ``fits`` bounds a step by that too, and MoE cases draw no decode graph (a capture aligns
  with the compiled op into the graph's buffers). ``--lora-use-virtual-experts`` aligns ``experts * max_loras``
  virtual experts with the base experts' ``moe_align_block_size`` (``virtual_experts._align_block_size``): SGLang's
  Triton kernel again, except over a shared-outer factor, whose virtual experts are only ``max_loras`` (under the
  Triton kernel's 64 buckets: the compiled op), so the two knobs are not drawn together; and its gated shrink
  asserts a float16 / bfloat16 model (``fused_moe_triton_kernels.py:865``), so a virtual-experts case is float16;
* ``sglang::fused_moe_lora`` (and its shrink / expand, ``merged_experts_fused_moe_lora_add``): SGLang registers
  its own Python launchers for the CUDA dispatch key only (``direct_register_custom_op``); on the CPU the same
  functions are registered for the CPU key;
* the gated activation and top-k sum (``fused_moe.py``): SGLang's own CPU fallbacks (``F.silu`` * up, the Triton
  ``moe_sum_reduce_triton``) where vLLM is absent: the module's ``_has_vllm_ops`` is set back to no, which the
  target's import placeholder for ``vllm`` (boot.py) had turned to yes;
* the kernel launch shapes: SGLang's ``override_config`` (its API for a fixed fused-MoE config; the tuned-config
  lookup asks for a device name, which the CPU cannot answer).
"""

from __future__ import annotations

import copy
import importlib

import torch

BLOCK = "block_sparse_moe"                  # Mixtral's name for the sparse block, in each decoder layer
EXPERTS = (64, 128)
TOP_K = (1, 2)
PROJS = ("gate_proj", "up_proj", "down_proj")  # the PEFT names of an expert's projections
SMALL_NUMEL = 64                            # SGLang's SMALL_NUMEL_LIMIT (moe_align_small_numel.py)
SPARSITY = 8                                # lora_moe_runners._SPARSITY_FACTOR: the naive LoRA alignment's bound
# the fused-MoE kernels' launch shapes on the CPU: one block covers the small M, few programs
LAUNCH = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1, "num_warps": 4,
          "num_stages": 2}
# where each release keeps a module (the tree moved them: 0.5.16 kernels/ops/moe, 0.5.22 kernels/ops/lora/moe)
_MODULES = {
    "kernel": ("sglang.kernels.ops.lora.moe.fused_moe_lora_kernel", "sglang.kernels.ops.moe.fused_moe_lora_kernel",
               "sglang.srt.lora.triton_ops.fused_moe_lora_kernel"),
    "virtual": ("sglang.kernels.ops.lora.moe.virtual_experts", "sglang.kernels.ops.moe.virtual_experts"),
    "fused_moe": ("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe",),
    "align": ("sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size",),
    "small": ("sglang.kernels.ops.moe.moe_align_small_numel",),
    "hooks": ("sglang.srt.lora.lora_moe_runners",),
}
_DONE: dict = {}
# The sparse block's input: the residual stream RMS-normalized to this scale (Mixtral's post_attention_layernorm
# before block_sparse_moe, its weight this constant; float32 as SGLang's RMSNorm computes it). Before, the block took
# the raw residual stream, which no real model feeds it: an adapter at alpha / r = 8 on q / k / v / o left it at
# |x| ~ 600 (median; up to ~1700), its experts' gate / up at ~5700 and silu(gate) * up at ~7e6 - 1e8 in float64, past
# float16's 65504, so a float16 (virtual-experts) case's experts returned inf (a false numeric-mismatch of
# step.experts). Normalized to 0.5, the worst drawn adapter (r 2, alpha 16 on gate / up / down) keeps the experts'
# gate / up within ~42, silu(gate) * up ~410 and the output ~2300 (float64, 300 draws each); alpha = r: all under 10.
INPUT_SCALE = 0.5
EPS = 1e-6                                   # the model's rms_norm_eps (model.hf_config_dict)


def _module(kind: str):
    for name in _MODULES[kind]:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def unavailable() -> str | None:
    """Why this SGLang cannot run the MoE LoRA path without compiled code, or None (0.5.18 and later)."""
    try:
        from sglang.srt.lora.layers import FusedMoEWithLoRA  # noqa: F401
    except ImportError:
        return "no FusedMoEWithLoRA (MoE LoRA ships from 0.5.10)"
    hooks = _module("hooks")
    if hooks is None or not hasattr(hooks, "_naive_moe_lora_align_block_size"):
        return ("every LoRA alignment is the compiled moe_lora_align_block_size (the naive Python one ships from "
                "0.5.11)")
    if _module("small") is None or _module("align") is None:
        return ("every base-experts alignment is sgl_kernel's moe_align_block_size (compiled; SGLang's Triton "
                "moe_align_small_numel ships from 0.5.18)")
    return None


def fits(c: dict, tokens: int) -> bool:
    """Whether a forward of ``tokens`` tokens takes the paths without compiled code: SGLang's Triton alignment of the
    base experts and its naive LoRA alignment (module doc)."""
    m = c["moe"]
    return (tokens * m["top_k"] <= SMALL_NUMEL
            and tokens * m["top_k"] * SPARSITY <= m["experts"] * c["max_loras_per_batch"])


def max_tokens(c: dict) -> int:
    m = c["moe"]
    return min(SMALL_NUMEL, m["experts"] * c["max_loras_per_batch"] // SPARSITY) // m["top_k"]


# -- the process ---------------------------------------------------------------------------------------
def cpu_answers() -> list[str]:
    """Answer what the MoE LoRA path needs compiled code for on the CPU (module doc), once per process."""
    if "done" in _DONE:
        return _DONE["done"]
    from sglang.srt.utils.common import sglang_lib
    done = []
    kernel, virtual = _module("kernel"), _module("virtual")
    ops = [(op, getattr(kernel, "_" + op)) for op in ("fused_moe_lora", "fused_moe_lora_shrink",
                                                      "fused_moe_lora_expand") if hasattr(kernel, "_" + op)]
    if virtual is not None and hasattr(virtual, "_merged_experts_fused_moe_lora_add_op"):
        ops.append(("merged_experts_fused_moe_lora_add", virtual._merged_experts_fused_moe_lora_add_op))
    for op, fn in ops:
        sglang_lib.impl(op, fn, "CPU")
        done.append(f"sglang::{op} (CPU key)")
    fm = _module("fused_moe")
    if getattr(fm, "_has_vllm_ops", False) and not _real_vllm():
        fm._has_vllm_ops = False
        done.append("fused_moe._has_vllm_ops = False")
    align, small = _module("align"), _module("small")
    align._is_cuda = True
    align.moe_align_small_numel, align.SMALL_NUMEL_LIMIT = small.moe_align_small_numel, small.SMALL_NUMEL_LIMIT
    done.append("moe_align_block_size: _is_cuda (moe_align_small_numel)")
    _DONE["done"] = done
    return done


def _real_vllm() -> bool:
    import sys
    v = sys.modules.get("vllm")
    return v is not None and getattr(v, "__version__", "0.0.0") != "0.0.0"


def launch():
    """SGLang's ``override_config`` with the target's launch shapes (a context manager)."""
    from sglang.srt.layers.moe.moe_runner.triton_utils import override_config
    return override_config(dict(LAUNCH))


def server_knobs(spec: dict | None) -> dict:
    """The MoE LoRA knobs of a case, as ``ServerArgs`` fields: ``--experts-shared-outer-loras`` (0.5.10+: the adapters
    share gate / up lora_A and down lora_B across experts; the case's adapters are written so) and
    ``--lora-use-virtual-experts`` (0.5.11+: ``merged_experts_fused_moe_lora_add`` instead of ``fused_moe_lora``)."""
    if not spec:
        return {}
    return {"experts_shared_outer_loras": bool(spec.get("shared_outer")),
            "lora_use_virtual_experts": bool(spec.get("virtual"))}


# -- the block ------------------------------------------------------------------------------------------
def hf_config(hf, spec: dict | None):
    """The model's config for a case: the engine's, with ``num_local_experts`` (where SGLang's pool reads the expert
    count) for a MoE case."""
    if not spec:
        return hf
    out = copy.deepcopy(hf)
    out.num_local_experts = spec["experts"]
    out.fuzzrunner_moe = dict(spec)
    return out


def block(cfg, layer_id: int, dtype: torch.dtype):
    """Mixtral's sparse block of SGLang's classes (``MixtralMoE.__init__``'s arguments)."""
    from sglang.srt.layers.linear import ReplicatedLinear
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
    from sglang.srt.layers.moe.topk import TopK
    from torch import nn
    spec, H = cfg.fuzzrunner_moe, cfg.hidden_size
    prefix = f"model.layers.{layer_id}.{BLOCK}"

    class SparseBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = ReplicatedLinear(H, spec["experts"], bias=False, params_dtype=dtype, quant_config=None,
                                         prefix=f"{prefix}.gate")
            self.topk = TopK(top_k=spec["top_k"], layer_id=layer_id, renormalize=True)
            self.experts = FusedMoE(num_experts=spec["experts"], top_k=spec["top_k"], layer_id=layer_id,
                                    hidden_size=H, intermediate_size=cfg.intermediate_size, params_dtype=dtype,
                                    prefix=f"{prefix}.experts")
            if hasattr(self.topk, "bind_runner_backend"):
                self.topk.bind_runner_backend(self.experts.runner_backend)
            self.last = None  # (input, TopKOutput, output) of the latest forward: the reference routes as SGLang did

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            logits, _ = self.gate(h)
            topk = self.topk(h, logits)
            with launch():
                out = self.experts(h, topk)
            self.last = (h, topk, out)
            return out
    return SparseBlock()


def block_input(h: torch.Tensor) -> torch.Tensor:
    """The sparse block's input from the residual stream ``h`` (``INPUT_SCALE``'s note): ``INPUT_SCALE * h /
    rms(h)`` per token, computed in float32 (float64 for a float64 ``h``: the reference) and returned in ``h``'s
    dtype."""
    w = h if h.dtype == torch.float64 else h.float()
    return (INPUT_SCALE * w * torch.rsqrt(w.pow(2).mean(-1, keepdim=True) + EPS)).to(h.dtype)


def base(block_, h: torch.Tensor) -> torch.Tensor:
    """The block's output without LoRA, as SGLang runs a batch whose adapters are all inactive: the wrapper's MoE runner
    with the batch's LoRA info marked ``has_active_lora`` no (``build_lora_hooks`` then returns empty hooks). A
    request without an adapter must get exactly this. (Not the runner with no LoRA info at all: with no hooks and
    top-k 1 the fused-MoE kernel writes the output directly and, outside CUDA / HIP / XPU / MUSA, ``moe_combine_topk``
    then sums the never-written ``intermediate_cache3`` into it.)"""
    import dataclasses

    from torch import nn
    gate = block_.gate
    logits = nn.functional.linear(h, getattr(gate, "base_layer", gate).weight)
    topk = block_.topk(h, logits)
    experts = block_.experts
    info = dataclasses.replace(experts._get_lora_info(), has_active_lora=False)
    with launch():
        return experts._forward_with_lora(h, topk, info)


def routes(block_) -> list:
    """Per token of the latest forward: (expert ids, float64 router weights) as SGLang's ``TopK`` picked them."""
    topk = block_.last[1]
    ids, w = topk.topk_ids.detach().cpu(), topk.topk_weights.detach().cpu().double()
    return [(ids[t].tolist(), w[t]) for t in range(ids.shape[0])]


def delta(files, path: str):
    """``delta(e, proj, v)`` for ``reference``: the additions of an adapter's files (an ``AdapterFiles``) to the experts
    at SGLang module ``path``; ``files`` None (a request without an adapter): none."""
    if files is None:
        return lambda e, proj, v: None
    return lambda e, proj, v: files.expert_delta(path, e, proj, v)


def reference(x: torch.Tensor, route: tuple, w13: torch.Tensor, w2: torch.Tensor, delta) -> torch.Tensor:
    """[H] float64 for one token: ``sum_k w_k * (W2_e x' + d_down)`` with ``x' = silu(g) * u``, ``(g, u) = W13_e x +
    d_gate_up``; ``delta(e, proj, v)`` the adapter's addition of expert ``e``'s ``proj`` on ``v`` (None: none)."""
    ids, weights = route
    inter = w2.shape[-1]
    out = torch.zeros(w2.shape[1], dtype=torch.float64)
    for k, e in enumerate(ids):
        gu = w13[e] @ x
        g, u = gu[:inter], gu[inter:]
        dg, du = delta(e, "gate_proj", x), delta(e, "up_proj", x)
        g = g if dg is None else g + dg
        u = u if du is None else u + du
        a = torch.nn.functional.silu(g) * u
        y = w2[e] @ a
        dd = delta(e, "down_proj", a)
        out += weights[k] * (y if dd is None else y + dd)
    return out


__all__ = ["BLOCK", "EXPERTS", "INPUT_SCALE", "TOP_K", "base", "block", "block_input", "cpu_answers", "delta",
           "fits", "hf_config", "max_tokens", "reference", "routes", "server_knobs", "unavailable"]
