"""Running a lora_kernels case: shrink, expand and bgmv alone, against their float64 references.

One persistent ``LoRAKernelMeta`` serves every launch of a case, so a launch after a
larger one sees the larger one's leftovers past its own tokens (the stale states of
vLLM's persistent buffers). Each op prepares the metadata for its slots and launches
with ``pad`` extra rows that no token maps to: those rows must come back untouched.
"""

from __future__ import annotations

import torch

from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidCase
from fuzzrunner.kernels import KernelConfig, lora_bgmv, lora_expand, lora_shrink, torch_ref
from fuzzrunner.runner.kernel_meta import LoRAKernelMeta


def _check(case: Case) -> dict:
    """What the schema cannot say: slots and sizes relative to the config."""
    c = case.config
    for i, op in enumerate(case.ops):
        slots = op.get("slots", [])
        if any(not -1 <= s < c["max_loras"] for s in slots):
            raise InvalidCase(f"op {i}: slots must be in [-1, max_loras={c['max_loras']}).")
        if len(slots) + op.get("pad", 0) > c["max_num_tokens"]:
            raise InvalidCase(f"op {i}: slots + pad exceed max_num_tokens={c['max_num_tokens']}.")
    return c


def run(case: Case, ctx) -> None:
    c = _check(case)
    device = torch.device(ctx.device)
    dtype = getattr(torch, c["dtype"])
    L, H, R, N = c["max_loras"], c["hidden"], c["rank"], c["slices"]
    kc = KernelConfig(interpreted=ctx.context.interpreted)  # the run's Triton mode
    meta = LoRAKernelMeta.make("meta", L, c["max_num_tokens"], device)
    g = torch.Generator().manual_seed(len(N) * 1000 + R)
    lora_a = ctx.track(torch.randn(len(N), L, R, H, generator=g).to(device, dtype), "lora_a")
    lora_b = ctx.track(torch.randn(len(N), L, max(N), R, generator=g).to(device, dtype), "lora_b")
    slice_n = ctx.track(torch.tensor(N, dtype=torch.int32, device=device), "slice_n")
    offsets = ctx.track(torch.tensor([sum(N[:i]) for i in range(len(N))], dtype=torch.int32, device=device),
                        "slice_offsets")
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            slots = list(op["slots"])
            kernel = op["kernel"]
            if kernel == "bgmv":  # bgmv reads the mapping per row: pad rows are mapped to -1
                slots += [-1] * op.get("pad", 0)
            M = len(op["slots"]) + op.get("pad", 0)
            slots_t = torch.tensor(slots, dtype=torch.int32, device=device)
            meta.prepare(slots_t)
            all_slots = torch.tensor(slots + [-1] * (M - len(slots)), dtype=torch.int32)
            gen = torch.Generator().manual_seed(op.get("seed", 0))
            grid = meta.grid_width(False)
            flag = meta.no_lora_flag_cpu
            if kernel == "shrink":
                x = torch.randn(M, H, generator=gen).to(device, dtype)
                out = torch.empty(len(N), M, R, dtype=torch.float32, device=device)
                lora_shrink(x, lora_a, out, *meta.meta_args(M)[:5], flag, grid, 0.5, kc)
                if bool(flag.item()):
                    continue  # nothing launched, output untouched by contract
                expected = torch_ref.shrink_ref(x.cpu(), lora_a.cpu(), all_slots, 0.5)
                ctx.compare("shrink.out", out, expected, dtype)
            elif kernel == "expand":
                x = torch.randn(len(N), M, R, generator=gen).to(device, torch.float32)
                y = torch.randn(M, sum(N), generator=gen).to(device, dtype)
                expected = torch_ref.expand_ref(x.cpu(), lora_b.cpu(), y.cpu(), all_slots,
                                                slice_n.cpu(), offsets.cpu())
                lora_expand(x, lora_b, y, *meta.meta_args(M)[:5], flag, grid, slice_n, offsets, kc)
                ctx.compare("expand.out", y, expected, dtype)
            else:
                a, b = lora_a[0], lora_b[0, :, :N[0]].contiguous()
                x = torch.randn(M, H, generator=gen).to(device, dtype)
                y = torch.randn(M, N[0], generator=gen).to(device, dtype)
                expected = torch_ref.bgmv_ref(x.cpu(), a.cpu(), b.cpu(), y.cpu(), all_slots, 0.5)
                if not bool(flag.item()):
                    lora_bgmv(x, a, b, y, meta.token_lora_mapping[:M], 0.5, kc)
                ctx.compare("bgmv.out", y, expected, dtype)

