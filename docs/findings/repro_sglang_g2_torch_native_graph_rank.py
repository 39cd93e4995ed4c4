"""G2, standalone (SGLang's torch ops and torch only; CPU or GPU): SGLang's torch-native LoRA ops for decode graphs
against its eager ops and a float64 reference, on the memory pool's layout.

    python docs/findings/repro_sglang_g2_torch_native_graph_rank.py [SGLANG_SITE]   # default .cache/sglang/0.5.23/site

Loads ``sglang/srt/lora/torch_ops/{lora_ops,graph_lora_ops}.py`` by file (they import torch only), lays out one
adapter slot as ``LoRAMemoryPool.load_lora_weight_to_buffer`` does (A: slice s of an adapter of rank r at rows
[s*r, (s+1)*r) of a [slices * max_rank, K] buffer; B: columns [:r] of [out, max_rank]; the rest as an earlier,
higher-rank adapter left it), and runs a qkv-like (3 slices) and an o-like (1 slice, reused slot) shrink + expand.
Exit 1 when the graph ops differ from the reference (the bug), 0 when they agree (a fixed tree: the patch's
``lora_ranks`` argument is passed where the graph ops take it), 2 when it could not run (the ops do not load, or
crash).
"""

import importlib.util
import inspect
import sys
import traceback
from pathlib import Path

import torch


def load(site: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, site / "sglang/srt/lora/torch_ops" / f"{name}.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def case(ops, graph, slices: int, rank: int, max_rank: int, stale: bool, device: str) -> float:
    g = torch.Generator().manual_seed(slices * 10 + rank)
    K, out_per_slice, tokens = 16, 8, 3
    a_buf = torch.zeros(1, slices * max_rank, K)
    b_buf = torch.zeros(1, slices * out_per_slice, max_rank)
    if stale:  # an evicted adapter of the max rank held this slot: the pool overwrites only [:rank]
        a_buf.normal_(generator=g)
        b_buf.normal_(generator=g)
    a = torch.randn(slices * rank, K, generator=g)  # the adapter's A, its slices packed by its rank
    b = torch.randn(slices * out_per_slice, rank, generator=g)
    a_buf[0, : slices * rank] = a
    b_buf[0, :, :rank] = b
    x = torch.randn(tokens, K, generator=g)
    # float64 reference: each slice s: x @ A_s^T @ B_s^T (scaling 1)
    ref = torch.cat([(x.double() @ a[s * rank:(s + 1) * rank].double().T)
                     @ b[s * out_per_slice:(s + 1) * out_per_slice].double().T for s in range(slices)], dim=-1)
    offsets = torch.arange(slices + 1, dtype=torch.int32) * out_per_slice
    dev = lambda t: t.to(device)  # noqa: E731
    ranks, scalings = torch.tensor([rank], dtype=torch.int32), torch.ones(1)
    seg = torch.ones(tokens, dtype=torch.int32)
    wi = torch.zeros(tokens, dtype=torch.int32)  # every token on slot 0 (a decode graph's per-token indices)
    eager = ops.sgemm_lora_b_fwd(
        ops.sgemm_lora_a_fwd(x, a_buf, torch.zeros(1, dtype=torch.int32), torch.tensor([tokens], dtype=torch.int32),
                             ranks, scalings, slices),
        b_buf, torch.zeros(1, dtype=torch.int32), torch.tensor([tokens], dtype=torch.int32), ranks, offsets)
    extra = {"lora_ranks": dev(ranks)} if "lora_ranks" in inspect.signature(graph.sgemm_lora_a_graph_fwd).parameters \
        else {}
    shrink = graph.sgemm_lora_a_graph_fwd(dev(x), dev(a_buf), dev(wi), dev(seg), dev(scalings), slices, **extra)
    got = graph.sgemm_lora_b_graph_fwd(shrink, dev(b_buf), dev(wi), dev(seg), dev(offsets)).cpu()
    err_eager = float((eager.double() - ref).abs().max())
    err_graph = float((got.double() - ref).abs().max())
    print(f"  slices {slices}, rank {rank} of max {max_rank}, {'reused' if stale else 'fresh'} slot: "
          f"eager ops max error {err_eager:.3g}, graph ops max error {err_graph:.3g}")
    return err_graph


def main() -> int:
    site = Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/sglang/0.5.23/site")
    ops, graph = load(site, "lora_ops"), load(site, "graph_lora_ops")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"SGLang torch ops from {site} on {device}")
    worst = max(case(ops, graph, 3, 2, 4, False, device),   # qkv_proj: 3 slices, rank 2 of 4, fresh slot
                case(ops, graph, 1, 2, 4, True, device),    # o_proj: rank 2 after a rank-4 adapter in the slot
                case(ops, graph, 3, 4, 4, False, device))   # at the max rank: right either way
    bad = worst > 1e-3
    print("G2 present: the graph ops give other weights than the adapter's" if bad else "graph ops agree")
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - an engine that does not import or crashes: "could not run" (2), never "bug" (1)
        traceback.print_exc()
        print("could not run (exit 2)", file=sys.stderr)
        sys.exit(2)
