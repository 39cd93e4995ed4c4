"""Indexed and in-place writes and reads: exact element sets, not whole tensors."""

import torch

from fuzzrunner.tracking import track

from .harness import pair

U, S = "uninitialized-read", "stale-read"


@pair("indexed-write", U, "{alloc}")
def index_put_rows(ctx, bug):
    buf = torch.empty(8, dtype=torch.int64)  # ALLOC
    idx = torch.tensor([0, 1, 2]) if bug else torch.tensor([0, 1, 2, 3])
    buf[idx] = 7  # a partial write into empty memory is legal
    out = buf[:4] * 2  # BAD


@pair("indexed-write", U, "{alloc}")
def index_put_bool_mask(ctx, bug):
    buf = torch.empty(6)  # ALLOC
    keep = torch.tensor([True, True, False, True, False, False])
    buf[keep] = 1.0
    if not bug:
        buf[~keep] = 0.0
    total = buf[2].item()  # BAD


@pair("indexed-write", U, "{alloc}")
def index_put_2d_columns(ctx, bug):
    buf = torch.empty(3, 5)  # ALLOC
    cols = torch.tensor([0, 2, 4])
    buf[:, cols] = 1.0
    buf[:, torch.tensor([1])] = 2.0
    if not bug:
        buf[:, 3] = 0.0
    s = buf[1].sum()  # BAD


@pair("indexed-write", U, "{alloc}")
def scatter_into_empty(ctx, bug):
    out = torch.empty(2, 4)  # ALLOC
    idx = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]])
    src = torch.arange(8.0).view(2, 4)
    out.scatter_(1, idx if not bug else idx[:, :3], src if not bug else src[:, :3])
    m = out.max()  # BAD


@pair("indexed-write", U, "{alloc}")
def masked_fill_partial(ctx, bug):
    x = torch.empty(5)  # ALLOC
    pad = torch.tensor([False, False, False, True, True])
    x.masked_fill_(pad, 0.0)
    x[:3 if not bug else 2] = 1.0
    y = x.sum()  # BAD


@pair("indexed-write", U, "{alloc}")
def index_copy_rows(ctx, bug):
    table = torch.empty(4, 3)  # ALLOC
    rows = torch.tensor([0, 2]) if bug else torch.tensor([0, 1, 2, 3])
    table.index_copy_(0, rows, torch.ones(len(rows), 3))
    y = table[1] + 1  # BAD


@pair("indexed-write", U, "{alloc}")
def index_fill_then_read(ctx, bug):
    t = torch.empty(3, 4)  # ALLOC
    t.index_fill_(1, torch.tensor([0, 1, 2, 3]) if not bug else torch.tensor([0, 1, 3]), -1.0)
    z = t[:, 2].clone()  # BAD


@pair("indexed-write", U, "{alloc}")
def index_add_reads_its_target(ctx, bug):
    acc = torch.empty(4)  # ALLOC
    if not bug:
        acc.zero_()
    acc.index_add_(0, torch.tensor([1, 3]), torch.ones(2))  # BAD


@pair("indexed-write", S, "positions")
def scatter_per_step_stale(ctx, bug):
    pos = track(torch.zeros(6, dtype=torch.int64), "positions", per_step=True)
    ctx.step()
    n = 4
    pos.scatter_(0, torch.arange(n if not bug else 3), torch.arange(n))
    first = pos[:n].sum()  # BAD


@pair("indexed-write", U, "{alloc}")
def unsqueeze_inplace_is_metadata(ctx, bug):
    h = torch.empty(4)  # ALLOC
    h.unsqueeze_(0)
    h[0, :3] = 1.0
    if not bug:
        h[0, 3] = 1.0
    v = h.mean()  # BAD


@pair("indexed-write", U, "{alloc}")
def masked_scatter_prefix(ctx, bug):
    t = torch.empty(6)  # ALLOC
    mask = torch.tensor([1, 0, 1, 0, 1, 0], dtype=torch.bool)
    t.masked_scatter_(mask, torch.arange(3.0))
    t.masked_fill_(~mask if not bug else torch.zeros(6, dtype=torch.bool), 0.0)
    r = t.sum()  # BAD


@pair("indexed-read", U, "{alloc}")
def gather_only_gathered(ctx, bug):
    logits = torch.empty(3, 8)  # ALLOC
    logits[:, :4] = torch.randn(3, 4)
    idx = torch.tensor([[0], [3], [5 if bug else 2]])
    picked = logits.gather(1, idx)  # BAD


@pair("indexed-read", U, "{alloc}")
def advanced_index_on_dim1(ctx, bug):
    kv = torch.empty(2, 10, 4)  # ALLOC
    kv[:, :6] = 1.0
    slots = torch.tensor([0, 5, 7 if bug else 1])
    got = kv[:, slots]  # BAD


@pair("indexed-read", U, "{alloc}")
def bool_mask_read(ctx, bug):
    x = torch.empty(6)  # ALLOC
    x[:4] = torch.arange(4.0)
    valid = torch.tensor([1, 1, 1, 1, int(bug), 0], dtype=torch.bool)
    sel = x[valid]  # BAD


@pair("indexed-read", U, "{alloc}")
def where_reads_the_side_it_picks(ctx, bug):
    x = torch.empty(5)  # ALLOC
    x[:3] = 2.0
    live = torch.arange(5) < (4 if bug else 3)
    y = torch.where(live, x, torch.zeros(5))  # BAD


@pair("indexed-read", U, "{alloc}")
def index_select_dim1(ctx, bug):
    w = torch.empty(4, 6)  # ALLOC
    w[:, ::2] = 1.0
    cols = torch.tensor([0, 2, 3 if bug else 4])
    sub = w.index_select(1, cols)  # BAD


@pair("indexed-read", U, "{alloc}")
def masked_select_read(ctx, bug):
    x = torch.empty(2, 3)  # ALLOC
    x[0] = 1.0
    m = torch.tensor([[True, False, True], [bool(bug), False, False]])
    vals = torch.masked_select(x, m)  # BAD


@pair("indexed-read", U, "{alloc}")
def take_flat(ctx, bug):
    x = torch.empty(3, 3)  # ALLOC
    x.diagonal().fill_(1.0)
    v = torch.take(x, torch.tensor([0, 4, 5 if bug else 8]))  # BAD


@pair("indexed-read", U, "{alloc}")
def functional_scatter_keeps_unwritten(ctx, bug):
    base = torch.empty(4)  # ALLOC
    base[:2] = 0.0
    out = base.scatter(0, torch.tensor([2, 3] if not bug else [2, 2]), torch.ones(2))  # BAD


@pair("indexed-read", U, "{alloc}")
def functional_masked_fill(ctx, bug):
    x = torch.empty(4)  # ALLOC
    x[:2] = 1.0
    y = x.masked_fill(torch.tensor([False, False, True, not bug]), 0.0)  # BAD


@pair("metadata", U, "{alloc}")
def is_pinned_reads_nothing(ctx, bug):
    buf = torch.empty(8, dtype=torch.int32)  # ALLOC
    pinned = buf.is_pinned()
    same = buf.view(8)
    buf[:7] = 0
    if not bug:
        buf[7] = 0
    s = same.sum()  # BAD


@pair("metadata", U, "{alloc}")
def dlpack_roundtrip_is_a_view(ctx, bug):
    buf = torch.empty(6)  # ALLOC
    alias = torch.from_dlpack(buf)
    alias[:5] = 3.0
    if not bug:
        alias[5] = 3.0
    t = buf.sum()  # BAD
