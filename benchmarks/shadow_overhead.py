"""Plain Triton interpreter vs shadow-checked, on the reference runner's LoRA kernels.

Prints one row per size: median seconds per step (shrink + expand + bgmv launches,
as one LoRA layer of the runner issues them) with and without the shadow oracle, and
the ratio of medians and of minima (the minimum is the steadier on a shared machine),
all measured in this one run, interleaved. Two load-heavy rows follow: a
gather kernel (an index load and a row load per token, almost no arithmetic), with its
table and index persistent (``gather``) or per-step buffers rewritten each step
(``gather/per_step``: every load's epochs are checked, the slow path). CPU only (the hook lives in the
interpreter). Usage: PYTHONPATH=. python benchmarks/shadow_overhead.py [--reps 7] [--sizes small,gather]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("FUZZRUNNER_DEVICE", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fuzzrunner import _env  # noqa: E402

_env.configure()  # TRITON_INTERPRET must be set before Triton is imported (triton.language's own jit helpers)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from fuzzrunner import tracking  # noqa: E402
from fuzzrunner.kernels import KernelConfig, lora_bgmv, lora_expand, lora_shrink  # noqa: E402
from fuzzrunner.oracles.shadow import ShadowOracle  # noqa: E402
from fuzzrunner.runner.kernel_meta import LoRAKernelMeta  # noqa: E402

SIZES = {  # name: (tokens M, hidden K, rank R, max_loras L, slices)
    "small": (4, 32, 8, 2, (32, 16, 16)),
    "medium": (16, 64, 16, 4, (64, 32, 32)),
    "large": (64, 128, 64, 8, (128, 64, 64)),
}


def make(size):
    M, K, R, L, N = size
    g = torch.Generator().manual_seed(0)
    slots = torch.randint(-1, L, (M,), generator=g, dtype=torch.int32)
    meta = LoRAKernelMeta.make("token_meta", L, M, torch.device("cpu"))
    meta.prepare(slots)
    a = tracking.track(torch.randn(len(N), L, R, K, generator=g), "lora_a")
    b = tracking.track(torch.randn(len(N), L, max(N), R, generator=g), "lora_b")
    sn = tracking.track(torch.tensor(N, dtype=torch.int32), "slice_n")
    so = tracking.track(torch.tensor([sum(N[:i]) for i in range(len(N))], dtype=torch.int32), "slice_off")
    x = torch.randn(M, K, generator=g)
    y = torch.zeros(M, sum(N))
    ga, gb, z = a[0].contiguous(), b[0, :, :K].contiguous(), torch.zeros(M, K)
    kc = KernelConfig(interpreted=True)

    def step():
        buf = torch.empty(len(N), M, R)
        args = meta.meta_args(M)
        lora_shrink(x, a, buf, *args[:5], args[5], L + 1, 0.5, kc)
        lora_expand(buf, b, y, *args[:5], args[5], L + 1, sn, so, kc)
        lora_bgmv(x, ga, gb if gb.shape[1] == K else gb, z, meta.token_lora_mapping[:M], 0.5, kc)
    return step


@triton.jit
def _gather_kernel(table, idx, out, T, W: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    w = tl.arange(0, W)
    for it in range(ITERS):
        t = (tl.program_id(0) * ITERS + it) * BLOCK + tl.arange(0, BLOCK)
        row = tl.load(idx + t, mask=t < T, other=0)
        x = tl.load(table + row[:, None] * W + w[None, :], mask=(t < T)[:, None])
        tl.store(out + t[:, None] * W + w[None, :], x, mask=(t < T)[:, None])


GATHER = {"gather": False, "gather/per_step": True}  # name: per-step buffers


def make_gather(per_step: bool, T=4096, rows=512, W=16, BLOCK=64, ITERS=8):
    g = torch.Generator().manual_seed(0)
    table = tracking.track(torch.empty(rows, W), "table", per_step=per_step, initialized=False)
    idx = tracking.track(torch.empty(T, dtype=torch.int64), "idx", per_step=per_step, initialized=False)
    out = torch.empty(T, W)

    def step():
        if per_step:  # rewritten each step, as a runner's per-step metadata is
            table.copy_(torch.randn(rows, W, generator=g))
            idx.copy_(torch.randint(0, rows, (T,), generator=g))
        grid = (triton.cdiv(T, BLOCK * ITERS),)
        _gather_kernel[grid](table, idx, out, T, W=W, BLOCK=BLOCK, ITERS=ITERS)
    if not per_step:
        table.copy_(torch.randn(rows, W, generator=g))
        idx.copy_(torch.randint(0, rows, (T,), generator=g))
    return step


def timed(fn, shadow: bool, size) -> float:
    oracle = ShadowOracle() if shadow else None
    if oracle:
        oracle.start()
        oracle.begin_op(0, {"op": "bench"})
    try:
        step = make_gather(GATHER[size]) if isinstance(size, str) else make(size)  # registered when on
        if oracle:
            oracle.begin_op(0, {"op": "bench"})
        t0 = time.perf_counter()
        step()
        return time.perf_counter() - t0
    finally:
        if oracle:
            assert oracle.finish() == [], "the shadow oracle reported a violation on correct launches"


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--sizes", default=",".join([*SIZES, *GATHER]),
                   help="rows to run, comma-separated (default: all): " + ", ".join([*SIZES, *GATHER]))
    args = p.parse_args(argv)
    rows = args.sizes.split(",")
    unknown = [r for r in rows if r not in SIZES and r not in GATHER]
    if unknown:
        p.error(f"unknown size {unknown[0]!r}")
    assert _env.interpreted(), "run on the CPU (TRITON_INTERPRET=1)"
    print(f"shadow-oracle overhead, Triton interpreter, torch {torch.__version__}, {args.reps} reps, median")
    print(f"{'size':8} {'M,K,R,L,slices':22} {'plain s':>9} {'shadow s':>9} {'ratio':>6} {'min ratio':>9}")
    for name, size in [(n, s) for n, s in SIZES.items() if n in rows]:
        timed(None, False, size), timed(None, True, size)  # warm-up
        plain, shadow = [], []
        for _ in range(args.reps):
            plain.append(timed(None, False, size))
            shadow.append(timed(None, True, size))
        p_, s_ = statistics.median(plain), statistics.median(shadow)
        desc = f"{size[0]},{size[1]},{size[2]},{size[3]},{len(size[4])}"
        print(f"{name:8} {desc:22} {p_:9.4f} {s_:9.4f} {s_ / p_:6.2f} {min(shadow) / min(plain):9.2f}")
    for name in [n for n in GATHER if n in rows]:
        timed(None, False, name), timed(None, True, name)
        plain, shadow = [], []
        for _ in range(args.reps):  # interleaved, as above: a load spike hits both
            plain.append(timed(None, False, name))
            shadow.append(timed(None, True, name))
        p_, s_ = statistics.median(plain), statistics.median(shadow)
        print(f"{name:16} {'T=4096,rows=512,W=16':14} {p_:9.4f} {s_:9.4f} {s_ / p_:6.2f} "
              f"{min(shadow) / min(plain):9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
