"""Pairs beyond the issue's list: compound indexing, out= writes, dtype views, atomics,
functional scatters, reads of what a kernel did not write."""

import torch
import triton
import triton.language as tl

from fuzzrunner.tracking import track

from .harness import pair

U, S, OOB = "uninitialized-read", "stale-read", "out-of-bounds"


@pair("adversarial", U, "{alloc}")
def indexed_increment(ctx, bug):
    counts = torch.empty(6, dtype=torch.int64)  # ALLOC
    counts[:3] = 0
    idx = torch.tensor([0, 2, 4 if bug else 1])
    counts[idx] += 1  # BAD


@pair("adversarial", U, "{alloc}")
def cumsum_out_prefix(ctx, bug):
    indptr = torch.empty(5, dtype=torch.int64)  # ALLOC
    if not bug:
        indptr[0] = 0
    torch.cumsum(torch.tensor([2, 1, 3]), 0, out=indptr[1:4])
    starts = indptr[:4].clone()  # BAD


@pair("adversarial", U, "{alloc}")
def dtype_view_fill(ctx, bug):
    raw = torch.empty(4, dtype=torch.int64)  # ALLOC
    halves = raw.view(torch.int32)
    halves[:7 if bug else 8] = 0
    s = raw.sum()  # BAD


@pair("adversarial", U, "{alloc}")
def index_put_row_col_pairs(ctx, bug):
    m = torch.empty(3, 3)  # ALLOC
    r = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    c = torch.tensor([0, 1, 2] * 3)
    keep = 8 if bug else 9
    m.index_put_((r[:keep], c[:keep]), torch.ones(keep))
    t = m.sum()  # BAD


@pair("adversarial", U, "{alloc}")
def put_flat_positions(ctx, bug):
    x = torch.empty(2, 3)  # ALLOC
    x.put_(torch.tensor([0, 1, 2, 3, 4] + ([] if bug else [5])), torch.ones(5 if bug else 6))
    y = x.sum()  # BAD


@pair("adversarial", U, "{alloc}")
def scatter_reduce_without_self(ctx, bug):
    out = torch.empty(3)  # ALLOC
    idx = torch.tensor([0, 1, 1] if bug else [0, 1, 2])
    out.scatter_reduce_(0, idx, torch.ones(3), "amax", include_self=False)
    m = out.min()  # BAD


@pair("adversarial", U, "{alloc}")
def slice_scatter_functional(ctx, bug):
    base = torch.empty(6)  # ALLOC
    base[:2] = 0.0
    y = torch.slice_scatter(base, torch.ones(3 if bug else 4), start=2 if bug else 2, end=5 if bug else 6)  # BAD


@triton.jit
def _atomic_count(x, n, B: tl.constexpr):
    i = tl.arange(0, B)
    tl.atomic_add(x + i, 1, mask=i < n)  # BAD:atomics_into_empty


@pair("adversarial", U, "{alloc}")
def atomics_into_empty(ctx, bug):
    hist = torch.empty(8, dtype=torch.int32)  # ALLOC
    if not bug:
        hist.zero_()
    _atomic_count[(1,)](hist, 8, B=8)


@triton.jit
def _prefix(x, out, n, B: tl.constexpr):
    i = tl.arange(0, B)
    v = tl.load(x + i, mask=i < n, other=0)
    tl.store(out + i, tl.cumsum(v, 0), mask=i < n)


@pair("adversarial", U, "{alloc}")
def torch_reads_past_what_the_kernel_wrote(ctx, bug):
    lens = torch.tensor([3, 1, 2, 2], dtype=torch.int32)
    out = torch.empty(6, dtype=torch.int32)  # ALLOC
    _prefix[(1,)](lens, out, 4, B=8)
    n = 5 if bug else 4
    total = out[:n].max()  # BAD


@pair("adversarial", S, "block_table")
def stale_rows_of_a_2d_table(ctx, bug):
    table = track(torch.zeros(4, 3, dtype=torch.int32), "block_table", per_step=True)
    ctx.step()
    rows = torch.tensor([0, 2])
    table[rows] = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int32)
    read = torch.tensor([0, 2]) if not bug else torch.tensor([0, 1])
    got = table.index_select(0, read)  # BAD
