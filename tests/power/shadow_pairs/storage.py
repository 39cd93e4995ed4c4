"""Every allocation and alias path: the empty family, resize_, set_, storages inside storages."""

import torch

from fuzzrunner.tracking import track

from .harness import pair

U, S, OOB = "uninitialized-read", "stale-read", "out-of-bounds"


@pair("allocation", U, "{alloc}")
def empty_permuted(ctx, bug):
    x = torch.empty_permuted((2, 3), (1, 0))  # ALLOC
    x[:, :2] = 1.0
    if not bug:
        x[:, 2] = 1.0
    y = x.sum()  # BAD


@pair("allocation", U, "{alloc}")
def empty_strided_padded_rows(ctx, bug):
    x = torch.empty_strided((3, 4), (8, 1))  # ALLOC
    x.copy_(torch.ones(3, 4))
    wide = x.as_strided((2, 8), (8, 1))  # rows with their padding
    n = 8 if bug else 4
    s = wide[:, :n].sum()  # BAD


@pair("allocation", U, "{alloc}")
def new_empty_like(ctx, bug):
    ref = torch.zeros(4)
    out = ref.new_empty(4)  # ALLOC
    out[:3] = ref[:3]
    if not bug:
        out[3] = 0
    r = out.max()  # BAD


@pair("allocation", U, "{alloc}")
def empty_like_partial(ctx, bug):
    h = torch.randn(3, 2)
    o = torch.empty_like(h)  # ALLOC
    o[:2] = h[:2]
    if not bug:
        o[2:] = 0
    z = o @ torch.ones(2)  # BAD


@pair("allocation", U, "resize_@{at}")
def resize_grow(ctx, bug):
    buf = torch.zeros(4)
    buf.resize_(8)  # ALLOC
    buf[4:7] = 1.0
    if not bug:
        buf[7] = 1.0
    t = buf.sum()  # BAD


@pair("allocation", U, "{alloc}")
def resize_shrink_then_grow(ctx, bug):
    buf = torch.empty(8)  # ALLOC
    buf[:8 if not bug else 6] = 0.0
    buf.resize_(2)
    buf.resize_(8)  # the storage kept its bytes: 6 and 7 are as they were
    t = buf.sum()  # BAD


@pair("allocation", U, "{alloc}")
def set_onto_tracked_storage(ctx, bug):
    backing = torch.empty(12)  # ALLOC
    backing[:10] = 1.0
    if not bug:
        backing[10:] = 1.0
    view = torch.empty(0).set_(backing.untyped_storage(), 6, (2, 3), (3, 1))
    s = view.sum()  # BAD


@pair("allocation", U, "{alloc}")
def alias_at_an_offset(ctx, bug):
    big = torch.empty(16, dtype=torch.int32)  # ALLOC
    tail = torch.from_dlpack(big[8:])  # its own storage object, starting inside big's
    tail[:7] = 0
    if not bug:
        tail[7] = 0
    y = tail + 1  # BAD


@pair("allocation", U, "resize_@{at}")
def untyped_storage_growth(ctx, bug):
    t = torch.zeros(2, dtype=torch.int64)
    t.resize_(6)  # ALLOC
    t[2:5] = 3
    if not bug:
        t[5] = 3
    v = t.cumsum(0)  # BAD


@pair("allocation", S, "slots")
def per_step_view_of_preallocated(ctx, bug):
    pool = torch.zeros(32, dtype=torch.int32)
    slots = track(pool[8:16], "slots", per_step=True)
    ctx.step()
    slots[:5] = 1
    if not bug:
        slots[5:] = 1
    s = pool[8:16].sum()  # BAD


@pair("oob-index", OOB, "table")
def embedding_minus_one_sentinel(ctx, bug):
    table = track(torch.randn(4, 3), "table")
    ids = torch.tensor([0, -1 if bug else 2, 1])
    e = torch.nn.functional.embedding(ids, table)  # BAD


@pair("oob-index", OOB, "<(5, 2) tensor>")
def index_select_untracked_weights(ctx, bug):
    w = torch.randn(5, 2)
    ids = torch.tensor([1, 5 if bug else 4])
    rows = w.index_select(0, ids)  # BAD


@pair("oob-index", U, "{alloc}")
def zero_length_dummy_run(ctx, bug):
    ids = torch.empty(4, dtype=torch.int64)  # ALLOC
    table = torch.randn(6, 2)
    n = 0  # a dummy run with no tokens: empty views of never-written ids are legal
    a, b, c = table.index_select(0, ids[:n]), torch.nn.functional.embedding(ids[:n], table), table[ids[:n]]
    ctx.step()
    m = 1 if bug else 2
    ids[:m] = torch.tensor([3, 4])[:m]
    d = table[ids[:2]]  # BAD


@pair("allocation", U, "UntypedStorage@{at}")
def untyped_storage_set_onto_a_tensor(ctx, bug):
    st = torch.UntypedStorage(8 * 4)  # ALLOC
    t = torch.empty(0, dtype=torch.float32).set_(st, 0, (8,), (1,))
    t[:6] = 0.0
    if not bug:
        t[6:] = 0.0
    s = t.sum()  # BAD
