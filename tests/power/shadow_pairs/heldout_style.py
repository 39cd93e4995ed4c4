"""Held-out style pairs, written as an outsider would: metadata building the way other engines'
runners do it (cumsum / searchsorted / repeat_interleave / bincount / argsort), out= variants,
views of every kind (expand, as_strided, dtype views, complex views, channels_last, transposes),
numpy and DLPack round trips, custom ops, and Triton kernels with 2-D grids, masks with
``other=``, atomics and offsets loaded from memory."""

import warnings

import numpy as np
import torch
import triton
import triton.language as tl

from fuzzrunner.tracking import carry_over, track

from .harness import pair

U, S, OOB = "uninitialized-read", "stale-read", "out-of-bounds"


# -- indexed and in-place writes -----------------------------------------------------------------
@pair("indexed-write", U, "{alloc}")
def index_fill_negative_index_wraps(ctx, bug):
    mask = torch.empty(3, 4, dtype=torch.int32)  # ALLOC
    mask[:, :3] = 1
    last = torch.tensor([-2 if bug else -1])  # index_fill_ wraps negative indices
    mask.index_fill_(1, last, 0)
    s = mask.sum(1)  # BAD


@pair("indexed-write", U, "{alloc}")
def index_reduce_without_self(ctx, bug):
    per_lora = torch.empty(4, 2)  # ALLOC
    ids = torch.tensor([0, 1, 3, 3]) if bug else torch.tensor([0, 1, 2, 3])
    with warnings.catch_warnings():  # index_reduce is "in beta"
        warnings.simplefilter("ignore")
        per_lora.index_reduce_(0, ids, torch.ones(4, 2), "amax", include_self=False)
    top = per_lora.amax(0)  # BAD


@pair("indexed-write", U, "{alloc}")
def index_reduce_with_self_reads_target(ctx, bug):
    acc = torch.empty(3)  # ALLOC
    acc[:2] = 1.0
    if not bug:
        acc[2] = 1.0
    with warnings.catch_warnings():  # index_reduce is "in beta"
        warnings.simplefilter("ignore")
        acc.index_reduce_(0, torch.tensor([0, 2]), torch.tensor([2.0, 3.0]), "prod")  # BAD


@pair("indexed-write", U, "{alloc}")
def scatter_scalar_value_2d(ctx, bug):
    onehot = torch.empty(3, 4)  # ALLOC
    (onehot[:2] if bug else onehot).zero_()
    onehot.scatter_(1, torch.tensor([[1], [0], [3]]), 1.0)
    cls = onehot.argmax(1)  # BAD


@pair("indexed-write", U, "{alloc}")
def index_put_accumulate_pairs(ctx, bug):
    counts = torch.empty(2, 3, dtype=torch.int64)  # ALLOC
    counts[0] = 0
    if not bug:
        counts[1] = 0
    r, c = torch.tensor([0, 1, 1]), torch.tensor([2, 0, 0])
    counts.index_put_((r, c), torch.ones(3, dtype=torch.int64), accumulate=True)  # BAD


@pair("indexed-write", U, "{alloc}")
def masked_fill_broadcast_mask(ctx, bug):
    hidden = torch.empty(4, 3)  # ALLOC
    hidden[:2] = 1.0
    pad_rows = torch.tensor([[False], [False], [True], [not bug]])
    hidden.masked_fill_(pad_rows, 0.0)  # a (4, 1) mask over (4, 3)
    out = hidden.sum()  # BAD


@pair("indexed-write", U, "{alloc}")
def index_copy_dim1_of_3d(ctx, bug):
    kv = torch.empty(2, 5, 3)  # ALLOC
    slots = torch.tensor([0, 1, 2, 4] if bug else [0, 1, 2, 3])
    kv.index_copy_(1, slots, torch.ones(2, 4, 3))
    page = kv[:, :4]
    v = page.sum()  # BAD


@pair("indexed-write", U, "{alloc}")
def copy_broadcast_row_into_slice(ctx, bug):
    bias = torch.empty(4, 6)  # ALLOC
    row = torch.arange(5.0)
    bias[:, :5].copy_(row[None])  # broadcast one row to four
    if not bug:
        bias[:, 5:].copy_(torch.zeros(1, 1))
    out = bias.mean(1)  # BAD


@pair("indexed-write", U, "{alloc}")
def index_add_counts_from_zero(ctx, bug):
    ntok = torch.empty(4, dtype=torch.int32)  # ALLOC
    ntok[:3] = 0
    if not bug:
        ntok[3] = 0
    lora_of_token = torch.tensor([0, 0, 3, 1])
    ntok.index_add_(0, lora_of_token, torch.ones(4, dtype=torch.int32))  # BAD


@pair("indexed-write", U, "{alloc}")
def put_accumulate_flat(ctx, bug):
    hist = torch.empty(2, 2, dtype=torch.int64)  # ALLOC
    hist.view(-1)[:3] = 0
    if not bug:
        hist[1, 1] = 0
    hist.put_(torch.tensor([0, 3]), torch.ones(2, dtype=torch.int64), accumulate=True)  # BAD


@pair("indexed-write", U, "{alloc}")
def select_fill_column(ctx, bug):
    table = torch.empty(3, 3, dtype=torch.int64)  # ALLOC
    for c in range(3 if not bug else 2):
        table.select(1, c).fill_(c)
    flat = table.flatten().tolist()  # BAD


@pair("indexed-write", U, "{alloc}")
def split_parts_written_separately(ctx, bug):
    meta = torch.empty(9, dtype=torch.int32)  # ALLOC
    starts, lens, ids = torch.split(meta, [4, 4, 1])
    starts.copy_(torch.tensor([0, 2, 5, 6], dtype=torch.int32))
    lens.fill_(1)
    if not bug:
        ids.zero_()
    packed = meta.clone()  # BAD


@pair("indexed-write", U, "{alloc}")
def unbind_rows_written(ctx, bug):
    tab = torch.empty(3, 2)  # ALLOC
    rows = tab.unbind(0)
    for r in rows[: 3 if not bug else 2]:
        r.fill_(1.0)
    s = torch.stack(rows).sum()  # BAD


# -- reads through views and indexing ------------------------------------------------------------
@pair("indexed-read", U, "{alloc}")
def take_along_dim_picks(ctx, bug):
    logprobs = torch.empty(2, 6)  # ALLOC
    logprobs[:, :3] = -1.0
    tok = torch.tensor([[0], [4 if bug else 2]])
    picked = torch.take_along_dim(logprobs, tok, dim=1)  # BAD


@pair("indexed-read", U, "{alloc}")
def negative_advanced_index(ctx, bug):
    hidden = torch.empty(5, 2)  # ALLOC
    hidden[:4] = 1.0
    last = torch.tensor([0, -2 if not bug else -1])
    h = hidden[last]  # BAD


@pair("indexed-read", U, "{alloc}")
def bool_mask_2d_rows(ctx, bug):
    x = torch.empty(3, 4)  # ALLOC
    x[0] = 1.0
    x[2] = 2.0
    keep = torch.tensor([True, bug, True])
    y = x[keep]  # BAD


@pair("indexed-read", U, "{alloc}")
def index_two_dims_broadcast(ctx, bug):
    grid = torch.empty(4, 4)  # ALLOC
    grid[:2, :2] = 1.0
    r = torch.tensor([[0], [1]])
    c = torch.tensor([[0, 1 if not bug else 2]])
    block = grid[r, c]  # BAD


@pair("indexed-read", U, "{alloc}")
def expand_view_read(ctx, bug):
    scale = torch.empty(4)  # ALLOC
    scale[:3] = 0.5
    if not bug:
        scale[3] = 0.5
    y = torch.ones(3, 4) * scale.expand(3, 4)  # BAD


@pair("indexed-read", U, "{alloc}")
def as_strided_windows(ctx, bug):
    tokens = torch.empty(8, dtype=torch.int64)  # ALLOC
    tokens[:5] = torch.arange(5)
    n_windows = 4 if bug else 3
    win = tokens.as_strided((n_windows, 3), (1, 1))  # sliding windows of three
    ngram = win.sum(1)  # BAD


@pair("indexed-read", U, "{alloc}")
def narrow_past_written(ctx, bug):
    pos = torch.empty(10, dtype=torch.int64)  # ALLOC
    pos[2:7] = torch.arange(5)
    seg = pos.narrow(0, 2, 6 if bug else 5)
    rope = seg.float().cos()  # BAD


@pair("indexed-read", U, "{alloc}")
def transposed_write_then_row_read(ctx, bug):
    w = torch.empty(4, 3)  # ALLOC
    wt = w.t()  # (3, 4), non-contiguous
    wt[:, : 3 if bug else 4] = 1.0
    row = w[3].clone()  # BAD


@pair("indexed-read", U, "{alloc}")
def channels_last_partial_channels(ctx, bug):
    img = torch.empty(1, 3, 2, 2, memory_format=torch.channels_last)  # ALLOC
    img[:, :2] = 0.0
    if not bug:
        img[:, 2] = 0.0
    pooled = img.mean((2, 3))  # BAD


@pair("indexed-read", U, "{alloc}")
def complex_view_as_real_half_written(ctx, bug):
    freqs = torch.empty(4, dtype=torch.complex64)  # ALLOC
    parts = torch.view_as_real(freqs)
    parts[..., 0] = 1.0
    if not bug:
        parts[..., 1] = 0.0
    mag = freqs.abs()  # BAD


@pair("indexed-read", U, "{alloc}")
def int32_pairs_read_as_int64(ctx, bug):
    raw = torch.empty(8, dtype=torch.int32)  # ALLOC
    raw[:6 if bug else 8] = 0
    wide = raw.view(torch.int64)
    v = wide[:4].sum()  # BAD


@pair("indexed-read", U, "{alloc}")
def byte_view_partial_write(ctx, bug):
    f = torch.empty(2, dtype=torch.float32)  # ALLOC
    f.view(torch.uint8)[: 7 if bug else 8] = 0
    g = f * 2  # BAD


# -- out= variants -------------------------------------------------------------------------------
@pair("out-variants", U, "{alloc}")
def where_with_out(ctx, bug):
    res = torch.empty(6)  # ALLOC
    n = 4
    cond = torch.tensor([True, False, True, False])
    torch.where(cond, torch.ones(n), torch.zeros(n), out=res[:n])
    if not bug:
        res[n:] = 0.0
    s = res.sum()  # BAD


@pair("out-variants", U, "{alloc}")
def index_select_with_out(ctx, bug):
    table = torch.randn(5, 2)
    rows = torch.empty(4, 2)  # ALLOC
    torch.index_select(table, 0, torch.tensor([1, 3, 0]), out=rows[:3])
    if not bug:
        rows[3] = 0.0
    h = rows @ torch.ones(2)  # BAD


@pair("out-variants", U, "{alloc}")
def gather_with_out(ctx, bug):
    probs = torch.randn(2, 5)
    chosen = torch.empty(2, 2)  # ALLOC
    torch.gather(probs, 1, torch.tensor([[0], [3]]), out=chosen[:, :1])
    if not bug:
        chosen[:, 1] = 0.0
    s = chosen.sum(1)  # BAD


@pair("out-variants", U, "{alloc}")
def cat_into_out(ctx, bug):
    ids = torch.empty(7, dtype=torch.int64)  # ALLOC
    parts = [torch.tensor([1, 2]), torch.tensor([3, 4, 5])]
    torch.cat(parts, out=ids[:5])
    n = 6 if bug else 5
    dev = ids[:n].clone()  # BAD


@pair("out-variants", U, "{alloc}")
def stack_into_out(ctx, bug):
    qk = torch.empty(3, 4)  # ALLOC
    torch.stack([torch.ones(4), torch.zeros(4)], out=qk[:2])
    if not bug:
        qk[2] = 0.0
    m = qk.max()  # BAD


@pair("out-variants", U, "{alloc}")
def cumsum_out_then_searchsorted(ctx, bug):
    cu = torch.empty(5, dtype=torch.int64)  # ALLOC
    cu[0] = 0
    lens = torch.tensor([2, 3, 1])
    torch.cumsum(lens, 0, out=cu[1:4])
    nreq = 4 if bug else 3
    token_req = torch.searchsorted(cu[1:nreq + 1], torch.arange(6), right=True)  # BAD


# -- metadata built the way runners build it ----------------------------------------------------
class SegmentMeta:
    """A runner's per-step LoRA metadata: sorted tokens, per-adapter counts and start offsets."""

    def __init__(self, max_tokens=8, max_loras=4):
        self.token_lora = track(torch.empty(max_tokens, dtype=torch.int64), "token_lora", per_step=True,
                                initialized=False)
        self.num_tokens_per_lora = track(torch.empty(max_loras + 1, dtype=torch.int64), "num_tokens_per_lora",
                                         per_step=True, initialized=False)
        self.lora_start_loc = track(torch.empty(max_loras + 2, dtype=torch.int64), "lora_start_loc",
                                    per_step=True, initialized=False)
        self.max_loras = max_loras


@pair("style-metadata", U, "token_lora")
def repeat_interleave_token_mapping(ctx, bug):
    m = SegmentMeta()
    req_lora = torch.tensor([2, 0, 1])
    seq_lens = torch.tensor([3, 1, 2])
    ctx.step()
    n = int(seq_lens.sum())
    m.token_lora[:n] = torch.repeat_interleave(req_lora, seq_lens)
    padded = 8 if bug else n
    ids, counts = torch.unique(m.token_lora[:padded], return_counts=True)  # BAD


@pair("style-metadata", U, "token_lora")
def argsort_tokens_by_lora(ctx, bug):
    m = SegmentMeta()
    ctx.step()
    m.token_lora[:5] = torch.tensor([1, 0, 1, 2, 0])
    n = 6 if bug else 5
    order = torch.argsort(m.token_lora[:n], stable=True)  # BAD


@pair("style-metadata", U, "num_tokens_per_lora")
def bincount_then_cumsum_start_loc(ctx, bug):
    m = SegmentMeta()
    ctx.step()
    m.token_lora[:4] = torch.tensor([0, 2, 2, 1])
    counts = torch.bincount(m.token_lora[:4], minlength=3)
    m.num_tokens_per_lora[:3] = counts
    k = 4 if bug else 3
    m.lora_start_loc[0] = 0
    m.lora_start_loc[1:k + 1] = torch.cumsum(m.num_tokens_per_lora[:k], 0)  # BAD


@pair("style-metadata", S, "lora_start_loc")
def start_loc_from_last_step(ctx, bug):
    m = SegmentMeta()
    ctx.step()
    m.lora_start_loc[:4] = torch.tensor([0, 2, 5, 6])
    ctx.step()  # this step has one adapter fewer
    m.lora_start_loc[:3] = torch.tensor([0, 3, 4])
    k = 4 if bug else 3
    seg = torch.diff(m.lora_start_loc[:k])  # BAD


@pair("style-metadata", U, "token_lora")
def bincount_reads_padding(ctx, bug):
    m = SegmentMeta()
    ctx.step()
    n, padded = 3, 4
    m.token_lora[:n] = torch.tensor([1, 1, 0])
    if not bug:
        m.token_lora[n:padded] = 0
    per_lora = torch.bincount(m.token_lora[:padded].clamp(0, 3), minlength=4)  # BAD


@pair("style-metadata", U, "{alloc}")
def searchsorted_token_to_request(ctx, bug):
    qsl = torch.empty(5, dtype=torch.int32)  # ALLOC
    qsl[0] = 0
    qsl[1:3] = torch.tensor([2, 5], dtype=torch.int32)
    if not bug:
        qsl[3] = 6
    req_of_token = torch.searchsorted(qsl[1:4], torch.arange(6, dtype=torch.int32), right=True)  # BAD


@pair("style-metadata", U, "{alloc}")
def one_hot_from_mapping(ctx, bug):
    mapping = torch.empty(6, dtype=torch.int64)  # ALLOC
    mapping[:4] = torch.tensor([0, 1, 1, 2])
    if not bug:
        mapping[4:] = 0
    oh = (mapping[:, None] == torch.arange(3)).int()  # BAD


# -- host side: numpy and DLPack ------------------------------------------------------------------
class HostBuf:
    """A runner's host staging buffer: a tensor, its numpy view, the device-side copy."""

    def __init__(self, n, dtype=torch.int64):
        self.cpu = torch.empty(n, dtype=dtype)  # ALLOC:numpy_query_start_loc,numpy_positions_from_repeat,numpy_fancy_index_write,numpy_bool_mask_write,numpy_add_out_positions
        self.np = self.cpu.numpy()
        self.dev = torch.zeros(n, dtype=dtype)

    def copy_to_dev(self, n):
        self.dev[:n].copy_(self.cpu[:n], non_blocking=True)  # BAD:numpy_query_start_loc,numpy_positions_from_repeat,numpy_bool_mask_write,numpy_add_out_positions
        return self.dev[:n]


@pair("host", U, "{alloc}")
def numpy_query_start_loc(ctx, bug):
    qsl = HostBuf(6, torch.int32)
    num_sched = np.array([3, 1, 2], dtype=np.int32)
    if not bug:
        qsl.np[0] = 0
    np.cumsum(num_sched, out=qsl.np[1:4])
    qsl.copy_to_dev(4)


@pair("host", U, "{alloc}")
def numpy_positions_from_repeat(ctx, bug):
    positions = HostBuf(8)
    num_computed = np.array([4, 0])
    num_sched = np.array([2, 3])
    req_idx = np.repeat(np.arange(2), num_sched)
    cu = np.cumsum(num_sched)
    arange = np.arange(cu[-1]) - np.repeat(cu - num_sched, num_sched)
    total = int(cu[-1])
    np.add(num_computed[req_idx], arange, out=positions.np[:total])
    padded = 6
    if not bug:
        positions.np[total:padded] = 0
    positions.copy_to_dev(padded)


@pair("host", U, "{alloc}")
def numpy_fancy_index_write(ctx, bug):
    block = HostBuf(6)
    block.np[[0, 2, 4]] = 7
    block.np[[1, 3] if bug else [1, 3, 5]] = 0
    v = block.cpu.max()  # BAD


@pair("host", U, "{alloc}")
def numpy_bool_mask_write(ctx, bug):
    temps = HostBuf(5, torch.float32)
    greedy = np.array([True, False, True, False, False])
    temps.np[greedy] = 0.0
    temps.np[~greedy if not bug else np.array([False, True, False, True, False])] = 0.8
    temps.copy_to_dev(5)


@pair("host", U, "{alloc}")
def numpy_add_out_positions(ctx, bug):
    pos = HostBuf(4)
    np.add(np.arange(3), 10, out=pos.np[:3])
    if not bug:
        pos.np[3:] = 0
    pos.copy_to_dev(4)


@pair("host", U, "{alloc}")
def numpy_item_of_never_written(ctx, bug):
    num_tokens = torch.empty(3, dtype=torch.int64)  # ALLOC
    nt = num_tokens.numpy()
    nt[:2] = (5, 6)
    total = nt.item(2 if bug else 1)  # BAD


@pair("host", U, "{alloc}")
def from_numpy_program_owned_into_tracked(ctx, bug):
    host = np.array([4, 5, 6], dtype=np.int64)  # memory the program owns, not a torch tensor
    ids = torch.empty(4, dtype=torch.int64)  # ALLOC
    ids[:3].copy_(torch.from_numpy(host))
    if not bug:
        ids[3] = 0
    e = torch.nn.functional.embedding(ids, torch.randn(8, 2))  # BAD


@pair("host", U, "{alloc}")
def numpy_from_dlpack_written(ctx, bug):
    slots = torch.empty(6, dtype=torch.int64)  # ALLOC
    view = np.from_dlpack(slots[:4])  # numpy sees the first four through DLPack
    view[:] = np.arange(4)
    n = 5 if bug else 4
    s = slots[:n].sum()  # BAD


@pair("host", U, "{alloc}")
def torch_from_dlpack_of_numpy_then_tracked_copy(ctx, bug):
    arr = np.arange(4, dtype=np.float32)
    t = torch.from_dlpack(arr)  # program-owned numpy memory seen by torch
    dst = torch.empty(5)  # ALLOC
    dst[:4] = t
    k = 5 if bug else 4
    y = dst[:k].sum()  # BAD


@pair("host", S, "seq_lens")
def numpy_per_step_tolist(ctx, bug):
    seq_lens = track(torch.zeros(4, dtype=torch.int32), "seq_lens", per_step=True)
    sl = seq_lens.numpy()
    ctx.step()
    sl[:3] = (5, 6, 7)
    ctx.step()
    sl[:2] = (8, 9)
    k = 3 if bug else 2
    host = sl[:k].tolist()  # BAD


# -- storage and allocation paths -----------------------------------------------------------------
@pair("allocation", U, "{alloc}")
def new_empty_strided_gap(ctx, bug):
    ref = torch.zeros(2)
    kv = ref.new_empty_strided((2, 3), (4, 1))  # ALLOC
    kv.fill_(1.0)
    row0 = kv.as_strided((1, 4), (4, 1))  # the first row with its padding element
    v = row0[:, : 4 if bug else 3].sum()  # BAD


@pair("allocation", U, "resize_@{at}")
def resize_as_grow(ctx, bug):
    buf = torch.zeros(2, 2)
    buf.resize_as_(torch.zeros(3, 2))  # ALLOC
    if not bug:
        buf[2] = 0.0
    t = buf.sum()  # BAD


@pair("allocation", U, "{alloc}")
def set_source_tensor_alias(ctx, bug):
    backing = torch.empty(6)  # ALLOC
    backing[:5] = 1.0
    if not bug:
        backing[5] = 1.0
    alias = torch.empty(0).set_(backing)
    s = alias.sum()  # BAD


@pair("allocation", U, "{alloc}")
def to_dtype_of_partly_written(ctx, bug):
    seq = torch.empty(4, dtype=torch.int32)  # ALLOC
    seq[: 3 if bug else 4] = 1
    seq64 = seq.to(torch.int64)  # BAD


@pair("allocation", U, "{alloc}")
def empty_like_channels_last(ctx, bug):
    x = torch.randn(1, 2, 2, 2).contiguous(memory_format=torch.channels_last)
    y = torch.empty_like(x)  # ALLOC
    y[:, 0] = 1.0
    if not bug:
        y[:, 1] = 1.0
    z = y.contiguous()  # BAD


# -- custom ops -----------------------------------------------------------------------------------
@torch.library.custom_op("heldout::scatter_rows_", mutates_args=("dst",))
def scatter_rows_(dst: torch.Tensor, rows: torch.Tensor, src: torch.Tensor) -> None:
    dst.index_copy_(0, rows, src)


@pair("custom-op", U, "{alloc}")
def custom_op_index_copy_mutates(ctx, bug):
    kv = torch.empty(4, 2)  # ALLOC
    rows = torch.tensor([0, 1, 3] if bug else [0, 1, 2, 3])
    scatter_rows_(kv, rows, torch.ones(len(rows), 2))
    out = kv.sum()  # BAD


@torch.library.custom_op("heldout::masked_rows", mutates_args=())
def masked_rows(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return x[keep].clone()  # BAD:custom_op_bool_mask_read


@pair("custom-op", U, "{alloc}")
def custom_op_bool_mask_read(ctx, bug):
    x = torch.empty(4, 2)  # ALLOC
    x[:3] = 1.0
    keep = torch.tensor([True, False, True, bug])
    y = masked_rows(x, keep)


_lib = torch.library.Library("heldout_lib", "DEF")
_lib.define("head_sum(Tensor x, int n) -> Tensor")
_lib.impl("head_sum", lambda x, n: x[:n].sum(0, keepdim=True), "CPU")  # BAD:library_op_reads_a_prefix


@pair("custom-op", U, "{alloc}")
def library_op_reads_a_prefix(ctx, bug):
    x = torch.empty(6)  # ALLOC
    x[:3] = 2.0
    y = torch.ops.heldout_lib.head_sum(x, 4 if bug else 3)  # blamed inside the op's Python body


# -- out-of-bounds indices --------------------------------------------------------------------------
@pair("oob-index", OOB, "lora_scaling")
def gather_past_tracked_table(ctx, bug):
    scaling = track(torch.ones(3, 1), "lora_scaling")
    ids = torch.tensor([[0], [2], [3 if bug else 1]])
    s = scaling.expand(3, 4).gather(0, ids.expand(3, 4))  # BAD


@pair("oob-index", OOB, "adapter_ranks")
def take_past_tracked_ranks(ctx, bug):
    ranks = track(torch.tensor([8, 16, 4]), "adapter_ranks")
    slot = torch.tensor([0, 2, 5 if bug else 1])
    r = torch.take(ranks, slot)  # BAD


# -- tracking API ----------------------------------------------------------------------------------
@pair("tracking-api", S, "block_table")
def carry_over_a_column(ctx, bug):
    table = track(torch.zeros(3, 4, dtype=torch.int32), "block_table", per_step=True)
    ctx.step()
    table[:, :2] = 1
    ctx.step()
    carry_over(table[:, 0])  # only the first block of each request is still valid
    cols = 2 if bug else 1
    blocks = table[:, :cols].clone()  # BAD


@pair("tracking-api", S, "mapping")
def retrack_uninitialized_each_step(ctx, bug):
    buf = torch.empty(6, dtype=torch.int64)
    for step in range(2):
        ctx.step()
        mapping = track(buf, "mapping", per_step=True, initialized=False)  # every step, as runners do
        mapping[: 4 if step == 0 else 3] = 0
    n = 4 if bug else 3
    s = buf[:n].sum()  # BAD


# -- Triton ---------------------------------------------------------------------------------------
@triton.jit
def _tile_kernel(src, dst, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    r = pm * BM + tl.arange(0, BM)
    c = pn * BN + tl.arange(0, BN)
    m = (r < M)[:, None] & (c < N)[None, :]
    x = tl.load(src + r[:, None] * stride + c[None, :], mask=m, other=0.0)  # BAD:triton_2d_grid_tiles
    tl.store(dst + r[:, None] * N + c[None, :], x, mask=m)


@pair("triton", U, "{alloc}")
def triton_2d_grid_tiles(ctx, bug):
    src = torch.empty(4, 4)  # ALLOC
    src[:, :2] = 1.0
    if not bug:
        src[:, 2:] = 2.0
    dst = torch.zeros(4, 4)
    _tile_kernel[(2, 2)](src, dst, 4, 4, src.stride(0), BM=2, BN=2)


@triton.jit
def _masked_other_kernel(x, out, n, B: tl.constexpr):
    i = tl.arange(0, B)
    v = tl.load(x + i, mask=i < n, other=-1)  # BAD:triton_load_with_other
    tl.store(out + i, v)


@pair("triton", U, "{alloc}")
def triton_load_with_other(ctx, bug):
    ids = torch.empty(8, dtype=torch.int32)  # ALLOC
    ids[:5] = 3
    out = torch.empty(8, dtype=torch.int32)
    _masked_other_kernel[(1,)](ids, out, 6 if bug else 5, B=8)


@triton.jit
def _masked_store_kernel(out, n, B: tl.constexpr):
    i = tl.arange(0, B)
    tl.store(out + i, i * 2, mask=i < n)


@pair("triton", U, "{alloc}")
def triton_masked_store_then_torch(ctx, bug):
    out = torch.empty(8, dtype=torch.int32)  # ALLOC
    _masked_store_kernel[(1,)](out, 6, B=8)
    m = out[: 7 if bug else 6].max()  # BAD


@triton.jit
def _atomic_max_kernel(x, vals, n, B: tl.constexpr):
    i = tl.arange(0, B)
    v = tl.load(vals + i, mask=i < n, other=0)
    tl.atomic_max(x + (i % 2), v, mask=i < n)  # BAD:triton_atomic_max_stale


@pair("triton", S, "max_seq_len")
def triton_atomic_max_stale(ctx, bug):
    mx = track(torch.zeros(2, dtype=torch.int32), "max_seq_len", per_step=True)
    vals = torch.tensor([3, 9, 4, 1], dtype=torch.int32)
    ctx.step()
    if not bug:
        mx.zero_()
    _atomic_max_kernel[(1,)](mx, vals, 4, B=4)


@triton.jit
def _offsets_kernel(offs, data, out, B: tl.constexpr):
    pid = tl.program_id(0)
    start = tl.load(offs + pid).to(tl.int64)  # BAD:triton_int64_offsets_from_memory
    start = tl.minimum(tl.maximum(start, 0), 8)  # the kernel clamps its offsets
    i = tl.arange(0, B)
    v = tl.load(data + start + i)
    tl.store(out + pid * B + i, v)


@pair("triton", U, "{alloc}")
def triton_int64_offsets_from_memory(ctx, bug):
    offs = torch.empty(3, dtype=torch.int64)  # ALLOC
    offs[:2] = torch.tensor([0, 4])
    if not bug:
        offs[2] = 8
    data = torch.arange(12, dtype=torch.float32)
    out = torch.zeros(12)
    _offsets_kernel[(3,)](offs, data, out, B=4)


@triton.jit
def _segment_sum_kernel(starts, vals, out, B: tl.constexpr):
    pid = tl.program_id(0)
    lo = tl.load(starts + pid)
    hi = tl.load(starts + pid + 1)
    i = tl.arange(0, B)
    v = tl.load(vals + lo + i, mask=lo + i < hi, other=0.0)  # BAD:triton_segments_read_unwritten_values
    tl.store(out + pid, tl.sum(v, 0))


@pair("triton", U, "{alloc}")
def triton_segments_read_unwritten_values(ctx, bug):
    vals = torch.empty(8)  # ALLOC
    vals[:5] = 1.0
    starts = torch.tensor([0, 2, 6 if bug else 5], dtype=torch.int32)
    out = torch.zeros(2)
    _segment_sum_kernel[(2,)](starts, vals, out, B=4)


@triton.jit
def _lookup_rows_kernel(ids, table, out, n, W: tl.constexpr, B: tl.constexpr):
    i = tl.arange(0, B)
    s = tl.load(ids + i, mask=i < n, other=0)  # BAD:triton_garbage_index_into_table
    w = tl.arange(0, W)
    row = tl.load(table + s[:, None] * W + w[None, :], mask=(i < n)[:, None])  # BAD:triton_oob_row_of_tracked_table
    tl.store(out + i[:, None] * W + w[None, :], row, mask=(i < n)[:, None])


@pair("triton", OOB, "lora_table")
def triton_oob_row_of_tracked_table(ctx, bug):
    table = track(torch.randn(3, 4), "lora_table")
    ids = torch.tensor([0, 2, 3 if bug else 1, 1], dtype=torch.int32)
    out = torch.zeros(4, 4)
    _lookup_rows_kernel[(1,)](ids, table, out, 4, W=4, B=4)


@triton.jit
def _desc_tile_kernel(src, dst, M: tl.constexpr, N: tl.constexpr):
    pid = tl.program_id(0)
    d = tl.make_tensor_descriptor(src, shape=[M, N], strides=[N, 1], block_shape=[2, N])
    x = d.load([pid * 2, 0])  # BAD:triton_descriptor_per_program_tile
    tl.store(dst + (pid * 2 + tl.arange(0, 2))[:, None] * N + tl.arange(0, N)[None, :], x)


@pair("triton", U, "{alloc}")
def triton_descriptor_per_program_tile(ctx, bug):
    src = torch.empty(4, 4)  # ALLOC
    src[:3] = 1.0
    if not bug:
        src[3] = 1.0
    dst = torch.zeros(4, 4)
    _desc_tile_kernel[(2,)](src, dst, M=4, N=4)


@triton.jit
def _fill_kernel(out, n, val, B: tl.constexpr):
    i = tl.arange(0, B)
    tl.store(out + i, tl.full((B,), val, tl.int32), mask=i < n)


@triton.jit
def _read_kernel(x, out, n, B: tl.constexpr):
    i = tl.arange(0, B)
    v = tl.load(x + i, mask=i < n)  # BAD:triton_two_kernels_one_step
    tl.store(out + i, v + 1, mask=i < n)


@pair("triton", S, "slot_mapping")
def triton_two_kernels_one_step(ctx, bug):
    slots = track(torch.empty(8, dtype=torch.int32), "slot_mapping", per_step=True, initialized=False)
    out = torch.zeros(8, dtype=torch.int32)
    _fill_kernel[(1,)](slots, 8, 1, B=8)
    ctx.step()
    _fill_kernel[(1,)](slots, 4, 2, B=8)
    _read_kernel[(1,)](slots, out, 5 if bug else 4, B=8)


# -- runner styles ----------------------------------------------------------------------------------
class V2IdxMapping:
    """vLLM V2: per-request state lives in persistent rows; a step gathers through idx_mapping."""

    def __init__(self, max_reqs=4):
        self.lora_of_row = track(torch.empty(max_reqs, dtype=torch.int32), "lora_of_row", initialized=False)
        self.idx_mapping = track(torch.empty(max_reqs, dtype=torch.int64), "idx_mapping", per_step=True,
                                 initialized=False)

    def add(self, row, lora):
        self.lora_of_row[row] = lora


@pair("style-vllm-v2", U, "lora_of_row")
def v2_gather_row_never_added(ctx, bug):
    st = V2IdxMapping()
    st.add(0, 1)
    st.add(2, 0)
    if not bug:
        st.add(1, 2)
    ctx.step()
    st.idx_mapping[:3] = torch.tensor([2, 0, 1])
    lora_per_req = st.lora_of_row[st.idx_mapping[:3]]  # BAD


@pair("style-dp-idle", U, "num_tokens_across_dp")
def dp_num_tokens_across_ranks(ctx, bug):
    across = track(torch.empty(4, dtype=torch.int32), "num_tokens_across_dp", per_step=True,
                   initialized=False)
    ctx.step("dp_idle")
    rank = 1
    across[rank] = 0
    if not bug:
        across[:rank] = 3
        across[rank + 1:] = 3
    max_tokens = int(across.max())  # BAD


@pair("style-graphs", U, "query_start_loc")
def graph_padding_repeats_last_start(ctx, bug):
    qsl = track(torch.empty(6, dtype=torch.int32), "query_start_loc", per_step=True, initialized=False)
    ctx.step()
    num_reqs, padded_reqs = 2, 4
    qsl[: num_reqs + 1] = torch.tensor([0, 3, 5], dtype=torch.int32)
    if not bug:
        qsl[num_reqs + 1: padded_reqs + 1].fill_(5)  # padded requests are empty
    lens = qsl[1: padded_reqs + 1] - qsl[:padded_reqs]  # BAD


@pair("style-sglang", S, "seg_lens")
def sglang_seg_lens_kept_from_previous_batch(ctx, bug):
    seg_lens = track(torch.zeros(4, dtype=torch.int32), "seg_lens", per_step=True)
    ctx.step()
    seg_lens[:3] = torch.tensor([1, 2, 3], dtype=torch.int32)
    ctx.step()
    bs = 2
    seg_lens[: bs - int(bug)] = torch.tensor([4, 4], dtype=torch.int32)[: bs - int(bug)]
    indptr = torch.zeros(bs + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(seg_lens[:bs], 0)  # BAD


# -- second round: host gathers, shapes-only tensors, garbage cascades, more runner idioms ----------
@pair("host", U, "{alloc}")
def numpy_fancy_read_num_computed(ctx, bug):
    num_computed = torch.empty(4, dtype=torch.int32)  # ALLOC
    nc = num_computed.numpy()
    nc[[0, 2]] = (7, 3)
    if not bug:
        nc[1] = 0
    req_indices = np.array([0, 0, 1, 2])
    start = nc[req_indices]  # BAD
    positions = start + np.arange(4)


@pair("host", U, "{alloc}")
def numpy_bool_mask_read(ctx, bug):
    temps = torch.empty(4)  # ALLOC
    t = temps.numpy()
    t[:3] = (0.5, 0.7, 0.9)
    sampled = np.array([True, False, True, bug])
    used = t[sampled]  # BAD
    mean = used.mean()


@pair("host", U, "{alloc}")
def np_take_token_ids(ctx, bug):
    token_ids = torch.empty(3, 8, dtype=torch.int32)  # ALLOC
    tok = token_ids.numpy()
    tok[0, :4] = (1, 2, 3, 4)
    tok[1, :2] = (5, 6)
    input_ids = torch.zeros(8, dtype=torch.int32)
    ids_np = input_ids.numpy()
    req_indices = np.array([0, 0, 1, 1])
    positions = np.array([2, 3, 0, 2 if bug else 1])
    flat_index = positions + req_indices * tok.shape[1]
    np.take(tok.reshape(-1), flat_index, out=ids_np[:4])  # BAD


@pair("host", U, "{alloc}")
def np_where_picks_written_side(ctx, bug):
    logit_bias = torch.empty(5, dtype=torch.float32)  # ALLOC
    lb = logit_bias.numpy()
    lb[:3] = 1.0
    has_bias = np.array([True, True, True, bug, False])
    bias = np.where(has_bias, lb, 0.0)  # BAD


@pair("allocation", U, "{alloc}")
def meta_profile_run_then_real_buffer(ctx, bug):
    hidden = torch.empty(16, 32, device="meta")  # memory profiling on shapes only
    w = torch.empty(32, 8, device="meta")
    peak = (hidden @ w).numel() * 4
    mapping = torch.empty(16, dtype=torch.int64)  # ALLOC
    mapping[:12] = 0
    if not bug:
        mapping[12:] = 0
    active = mapping.unique()  # BAD


@pair("indexed-read", U, "{alloc}")
def sparse_adapter_mask_beside_a_bug(ctx, bug):
    with torch.sparse.check_sparse_tensor_invariants(enable=True):  # (torch 2.11 warns when left implicit)
        mask = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 1.0]), (4,), check_invariants=True)
    dense_mask = mask.to_dense()
    scale = torch.empty(4)  # ALLOC
    scale[:3] = 2.0
    if not bug:
        scale[3] = 2.0
    out = dense_mask * scale  # BAD


@pair("allocation", U, "resize_@{at}")
def untyped_storage_resize_grow(ctx, bug):
    t = torch.zeros(4, dtype=torch.int32)
    st = t.untyped_storage()
    st.resize_(8 * 4)  # ALLOC
    t.set_(st, 0, (8,), (1,))
    t[4:7] = 1
    if not bug:
        t[7] = 1
    total = t.sum()  # BAD


@pair("indexed-read", U, "{alloc}")
def embedding_bag_padding_row(ctx, bug):
    table = torch.empty(6, 3)  # ALLOC
    table[:4] = 1.0
    pad = 5
    ids = torch.tensor([0, 3, 5, 1, 4 if bug else 5])
    bags = torch.nn.functional.embedding_bag(ids, table, torch.tensor([0, 3]), padding_idx=pad)  # BAD


@pair("triton", U, "lora_ptr_table")
def triton_garbage_pointer_slot(ctx, bug):
    w = [torch.ones(4), torch.full((4,), 2.0)]
    ptrs = track(torch.empty(3, dtype=torch.int64), "lora_ptr_table", per_step=True, initialized=False)
    ctx.step()
    ptrs[0], ptrs[1] = w[0].data_ptr(), w[1].data_ptr()
    if not bug:
        ptrs[2] = w[0].data_ptr()  # an empty slot points at the no-op adapter
    dst = torch.zeros(12)
    _ptr_slots_kernel[(3,)](ptrs, dst, B=4)


@triton.jit
def _ptr_slots_kernel(ptrs, dst, B: tl.constexpr):
    slot = tl.program_id(0)
    base = tl.load(ptrs + slot).to(tl.pointer_type(tl.float32))  # BAD:triton_garbage_pointer_slot
    i = tl.arange(0, B)
    tl.store(dst + slot * B + i, tl.load(base + i))


@pair("style-vllm-v2", U, "token_lora_mapping")
def torch_garbage_index_after_long(ctx, bug):
    mapping = track(torch.empty(4096, dtype=torch.int32), "token_lora_mapping", per_step=True,
                    initialized=False)
    lora_a = track(torch.randn(3, 4), "lora_a")
    ctx.step()
    n, padded = 3, 4
    mapping[:n] = torch.tensor([1, 2, 1], dtype=torch.int32)
    if not bug:
        mapping[n:padded] = 0
    rows = lora_a[mapping[:padded].long()]  # BAD


@pair("triton", U, "{alloc}")
def triton_garbage_index_into_table(ctx, bug):
    ids = torch.empty(2048, dtype=torch.int32)  # ALLOC
    ids[:3] = torch.tensor([0, 2, 1], dtype=torch.int32)
    if not bug:
        ids[3] = 0
    table = track(torch.randn(3, 4), "table")
    out = torch.zeros(4, 4)
    _lookup_rows_kernel[(1,)](ids, table, out, 4, W=4, B=4)


@pair("indexed-write", U, "{alloc}")
def index_put_int32_indices(ctx, bug):
    slot_mapping = torch.empty(6, dtype=torch.int64)  # ALLOC
    idx = torch.tensor([0, 1, 2, 3, 4] + ([] if bug else [5]), dtype=torch.int32)
    slot_mapping[idx] = torch.arange(len(idx))
    blocks = slot_mapping // 2  # BAD


@pair("indexed-write", U, "{alloc}")
def scatter_add_2d_counts(ctx, bug):
    counts = torch.empty(3, 2, dtype=torch.int64)  # ALLOC
    counts[: 3 if not bug else 2] = 0
    lora = torch.tensor([[0, 1], [2, 2], [1, 0]])
    counts.scatter_add_(0, lora, torch.ones(3, 2, dtype=torch.int64))  # BAD


@pair("indexed-write", U, "{alloc}")
def index_add_dim1_alpha(ctx, bug):
    acc = torch.empty(2, 4)  # ALLOC
    acc[:, :3] = 0.0
    if not bug:
        acc[:, 3] = 0.0
    acc.index_add_(1, torch.tensor([0, 3]), torch.ones(2, 2), alpha=0.5)  # BAD


@pair("indexed-write", U, "{alloc}")
def masked_scatter_broadcast_rows(ctx, bug):
    x = torch.empty(3, 2)  # ALLOC
    rows = torch.tensor([[True], [False], [True]])
    x.masked_scatter_(rows, torch.arange(4.0))
    if not bug:
        x[1] = 0.0
    y = x.sum(0)  # BAD


@pair("indexed-read", U, "{alloc}")
def transposed_reshape_copy(ctx, bug):
    buf = torch.empty(8)  # ALLOC
    buf[: 7 if bug else 8] = 1.0
    flat = buf.view(2, 4).t().reshape(-1)  # BAD


@pair("tracking-api", U, "block_ids")
def retrack_with_default_initialized_keeps_never_written(ctx, bug):
    buf = track(torch.empty(6, dtype=torch.int32), "block_ids", per_step=True, initialized=False)
    ctx.step()
    track(buf, "block_ids", per_step=True)  # re-tracked each step, initialized left at its default
    buf[: 5 if bug else 6] = 1
    s = buf.sum()  # BAD


@pair("tracking-api", S, "mapping")
def carry_over_rows_of_2d(ctx, bug):
    mapping = track(torch.zeros(4, 3, dtype=torch.int64), "mapping", per_step=True)
    ctx.step()
    mapping[:3] = 1
    ctx.step()
    carry_over(mapping[:2])
    m = mapping[: 3 if bug else 2].sum()  # BAD


@pair("tracking-api", S, "meta.positions")
def two_views_different_lifetimes(ctx, bug):
    meta = torch.empty(16, dtype=torch.int64)
    pos = track(meta[:8], "meta.positions", per_step=True, initialized=False)
    cfg = track(meta[8:], "meta.config", initialized=False)  # persistent: written once
    cfg.fill_(3)
    ctx.step()
    pos[:4] = torch.arange(4)
    ctx.step()
    _ = cfg.sum()  # persistent: fine in any step
    pos[: 4 if not bug else 3] = torch.arange(4)[: 4 if not bug else 3]
    rope = pos[:4] * 2  # BAD


@pair("style-dp-idle", U, "{alloc}")
def dp_idle_zero_length_writes_then_pad(ctx, bug):
    ids = torch.empty(4, dtype=torch.int64)  # ALLOC
    table = torch.randn(5, 2)
    none = torch.empty(0, dtype=torch.int64)
    ids[none] = torch.empty(0, dtype=torch.int64)  # an idle rank writes nothing
    ids.index_copy_(0, none, torch.empty(0, dtype=torch.int64))
    _ = table.index_select(0, ids[:0])
    ids[:1] = 0 if not bug else ids[:1]  # BAD
    e = table[ids[:1]]


@pair("style-graphs", U, "token_lora")
def pad_to_graph_size_with_f_pad(ctx, bug):
    token_lora = track(torch.empty(8, dtype=torch.int64), "token_lora", per_step=True, initialized=False)
    ctx.step()
    n, padded = 3, 4
    token_lora[:n] = torch.tensor([1, 0, 2])
    if bug:
        graph_in = token_lora[:padded].clone()  # BAD
    else:
        graph_in = torch.nn.functional.pad(token_lora[:n], (0, padded - n), value=0)


@torch.library.custom_op("heldout::new_partial", mutates_args=())
def new_partial(n: int, fill: int) -> torch.Tensor:
    out = torch.empty(6, dtype=torch.int64)  # ALLOC:custom_op_returns_partially_written
    out[:fill] = n
    return out


@pair("custom-op", U, "{alloc}")
def custom_op_returns_partially_written(ctx, bug):
    lens = new_partial(3, 5 if bug else 6)
    total = lens.sum()  # BAD


@torch.library.custom_op("heldout::fill_each_", mutates_args=("outs",))
def fill_each_(outs: list[torch.Tensor], n: int) -> None:
    for o in outs:
        o[:n] = 1


@pair("custom-op", U, "{alloc}")
def custom_op_list_of_mutated(ctx, bug):
    a = torch.zeros(4)
    b = torch.empty(4)  # ALLOC
    fill_each_([a, b], 3 if bug else 4)
    s = b.sum()  # BAD


@triton.jit
def _num_tokens_kernel(n_ptr, x, out, B: tl.constexpr):
    n = tl.load(n_ptr)  # BAD:triton_scalar_count_from_device
    i = tl.arange(0, B)
    v = tl.load(x + i, mask=i < n, other=0)
    tl.store(out + i, v)


@pair("triton", U, "{alloc}")
def triton_scalar_count_from_device(ctx, bug):
    num_tokens = torch.empty(1, dtype=torch.int32)  # ALLOC
    if not bug:
        num_tokens.fill_(3)
    x = torch.ones(8, dtype=torch.int32)
    out = torch.zeros(8, dtype=torch.int32)
    _num_tokens_kernel[(1,)](num_tokens, x, out, B=8)


@triton.jit
def _claim_slots_kernel(counter, slots, B: tl.constexpr):
    i = tl.arange(0, B)
    old = tl.atomic_add(counter + i * 0, 1)  # BAD:triton_atomic_counter_not_reset
    tl.store(slots + i, old)


@pair("triton", S, "alloc_counter")
def triton_atomic_counter_not_reset(ctx, bug):
    counter = track(torch.zeros(1, dtype=torch.int32), "alloc_counter", per_step=True)
    slots = torch.zeros(4, dtype=torch.int32)
    _claim_slots_kernel[(1,)](counter, slots, B=4)
    ctx.step()
    if not bug:
        counter.zero_()
    _claim_slots_kernel[(1,)](counter, slots, B=4)


@triton.jit
def _where_store_kernel(x, out, n, B: tl.constexpr):
    i = tl.arange(0, B)
    v = tl.load(x + i, mask=i < n, other=0)
    tl.store(out + i, tl.where(v > 0, v, 0), mask=i < n)


@pair("triton", U, "{alloc}")
def triton_masked_where_store_then_gather(ctx, bug):
    lens = torch.tensor([3, 0, 2, 5, 1], dtype=torch.int32)
    clipped = torch.empty(8, dtype=torch.int32)  # ALLOC
    _where_store_kernel[(1,)](lens, clipped, 5, B=8)
    picked = clipped[torch.tensor([0, 4, 5 if bug else 3])]  # BAD


@triton.jit
def _overlap_kernel(win, out, stride, W: tl.constexpr, N: tl.constexpr):
    r = tl.arange(0, N)
    c = tl.arange(0, W)
    v = tl.load(win + r[:, None] * stride + c[None, :])  # BAD:triton_overlapping_window_view
    tl.store(out + r[:, None] * W + c[None, :], v)


@pair("triton", U, "{alloc}")
def triton_overlapping_window_view(ctx, bug):
    toks = torch.empty(8, dtype=torch.float32)  # ALLOC
    toks[: 6 if bug else 7] = 1.0
    windows = toks.as_strided((4, 4), (1, 1))  # overlapping windows, reads toks[0:7]
    out = torch.zeros(4, 4)
    _overlap_kernel[(1,)](windows, out, windows.stride(0), W=4, N=4)


@triton.jit
def _seg_kernel(indptr, vals, out, B: tl.constexpr):
    pid = tl.program_id(0)
    lo = tl.load(indptr + pid)  # BAD:sglang_indptr_cumsum_out_then_kernel
    hi = tl.load(indptr + pid + 1)
    i = tl.arange(0, B)
    v = tl.load(vals + lo + i, mask=lo + i < hi, other=0.0)
    tl.store(out + pid, tl.sum(v, 0))


@pair("style-sglang", U, "seg_indptr")
def sglang_indptr_cumsum_out_then_kernel(ctx, bug):
    seg_indptr = track(torch.empty(5, dtype=torch.int64), "seg_indptr", per_step=True, initialized=False)
    ctx.step()
    bs = 3
    seg_lens = torch.tensor([2, 1, 3])
    if not bug:
        seg_indptr[0] = 0
    torch.cumsum(seg_lens, 0, out=seg_indptr[1:bs + 1])
    vals = torch.ones(6)
    out = torch.zeros(bs)
    _seg_kernel[(bs,)](seg_indptr, vals, out, B=4)


# -- third round: buffers tracked in part, views with gaps, a whole input-preparation path ----------
@pair("tracking-api", S, "slots")
def pool_slice_per_step_read_whole(ctx, bug):
    pool = torch.zeros(32, dtype=torch.int32)
    slots = track(pool[8:16], "slots", per_step=True)
    ctx.step()
    n = 5
    slots[:n] = 1
    if not bug:
        slots[n:] = 0
    snapshot = pool.clone()  # BAD


@triton.jit
def _pool_sum_kernel(x, out, B: tl.constexpr):
    v = tl.load(x + tl.arange(0, B))  # BAD:kernel_reads_pool_with_tracked_slice
    tl.store(out, tl.sum(v, 0))


@pair("triton", S, "slots")
def kernel_reads_pool_with_tracked_slice(ctx, bug):
    pool = torch.zeros(32, dtype=torch.int32)
    slots = track(pool[8:16], "slots", per_step=True)
    out = torch.zeros(1, dtype=torch.int32)
    ctx.step()
    slots[: 7 if bug else 8] = 1
    _pool_sum_kernel[(1,)](pool, out, B=32)


@pair("tracking-api", S, "mapping")
def strided_track_columns(ctx, bug):
    table = torch.zeros(4, 8, dtype=torch.int64)  # columns 0-3: per-step mapping; 4-7: persistent config
    mapping = track(table[:, :4], "mapping", per_step=True)
    table[:, 4:] = 7
    ctx.step()
    config = table[:, 4:].sum()  # persistent: fine in any step
    mapping[: 3 if bug else 4] = 1
    m = mapping.amax()  # BAD


@pair("oob-index", OOB, "lora_a_1")
def oob_into_tracked_adapter_slice(ctx, bug):
    stacked = torch.randn(3, 4, 2)  # 3 adapters, 4 rows each
    lora_1 = track(stacked[1], "lora_a_1")
    ids = torch.tensor([0, 3, 4 if bug else 2])
    rows = torch.nn.functional.embedding(ids, lora_1)  # BAD


class V1PrepareInputs:
    """vLLM V1's _prepare_inputs, condensed: numpy metadata, np.take of token ids, device copies."""

    def __init__(self, max_reqs=4, max_tokens=16, max_model_len=8):
        self.token_ids = torch.zeros(max_reqs, max_model_len, dtype=torch.int32)
        self.num_computed = torch.zeros(max_reqs, dtype=torch.int32)
        self.input_ids_cpu = torch.empty(max_tokens, dtype=torch.int32)
        self.positions_cpu = torch.empty(max_tokens, dtype=torch.int64)
        self.qsl_cpu = torch.empty(max_reqs + 1, dtype=torch.int32)  # ALLOC:v1_prepare_inputs_query_start_loc
        self.qsl_gpu = torch.zeros(max_reqs + 1, dtype=torch.int32)
        self.input_ids = track(torch.zeros(max_tokens, dtype=torch.int32), "input_ids", per_step=True)

    def prepare(self, num_sched, num_reqs_padded, pad_qsl):
        nreq = len(num_sched)
        num_sched = np.asarray(num_sched, dtype=np.int32)
        req_indices = np.repeat(np.arange(nreq), num_sched)
        cu = np.cumsum(num_sched)
        total = int(cu[-1])
        arange = np.arange(total) - np.repeat(cu - num_sched, num_sched)
        pos = self.positions_cpu.numpy()
        np.add(self.num_computed.numpy()[req_indices], arange, out=pos[:total])
        flat = pos[:total] + req_indices * self.token_ids.shape[1]
        np.take(self.token_ids.numpy().reshape(-1), flat, out=self.input_ids_cpu.numpy()[:total])
        self.input_ids[:total].copy_(self.input_ids_cpu[:total], non_blocking=True)
        qsl = self.qsl_cpu.numpy()
        qsl[0] = 0
        qsl[1:nreq + 1] = cu
        if pad_qsl:
            qsl[nreq + 1:num_reqs_padded + 1] = total
        self.qsl_gpu[:num_reqs_padded + 1].copy_(self.qsl_cpu[:num_reqs_padded + 1], non_blocking=True)  # BAD:v1_prepare_inputs_query_start_loc
        return total


@pair("style-vllm-v1", U, "{alloc}")
def v1_prepare_inputs_query_start_loc(ctx, bug):
    r = V1PrepareInputs()
    r.token_ids[0, :3] = torch.tensor([5, 6, 7], dtype=torch.int32)
    r.token_ids[1, :2] = torch.tensor([8, 9], dtype=torch.int32)
    ctx.step()
    r.prepare([3, 2], num_reqs_padded=3, pad_qsl=not bug)  # a CUDA-graph batch of 3 requests


@pair("style-vllm-v1", S, "input_ids")
def v1_prepare_inputs_stale_tokens(ctx, bug):
    r = V1PrepareInputs()
    r.token_ids[0, :4] = torch.tensor([5, 6, 7, 8], dtype=torch.int32)
    ctx.step()
    r.prepare([4], num_reqs_padded=1, pad_qsl=True)
    ctx.step()
    total = r.prepare([2], num_reqs_padded=1, pad_qsl=True)
    n = 4 if bug else total
    emb = torch.nn.functional.embedding(r.input_ids[:n].long(), torch.randn(16, 2))  # BAD


# -- fourth round: ops registered the way vLLM registers its LoRA ops (Library.impl, no custom_op) -----
@triton.jit
def _lib_shrink_kernel(x, w, out, mapping, n, K: tl.constexpr, R: tl.constexpr, B: tl.constexpr):
    t = tl.arange(0, B)
    lora = tl.load(mapping + t, mask=t < n, other=-1)  # BAD:vllm_lib_shrink_dummy_run,vllm_lib_shrink_stale_mapping,dummy_run_shrink_then_expand
    k = tl.arange(0, K)
    live = (t < n) & (lora >= 0)
    xv = tl.load(x + t[:, None] * K + k[None, :], mask=live[:, None], other=0.0)  # BAD:vllm_lib_shrink_reads_unwritten_activations
    for r in tl.static_range(R):
        wr = tl.load(w + lora[:, None] * (R * K) + r * K + k[None, :], mask=live[:, None], other=0.0)
        tl.store(out + t * R + r, tl.sum(xv * wr, 1), mask=t < n)


def _lib_shrink(x, w, out, mapping, n):
    _lib_shrink_kernel[(1,)](x, w, out, mapping, n, K=4, R=2, B=8)


_vllm_lib = torch.library.Library("heldout_vllm", "FRAGMENT")
_vllm_lib.define("lora_shrink(Tensor x, Tensor w, Tensor(a!) out, Tensor mapping, int n) -> ()")
_vllm_lib.impl("lora_shrink", _lib_shrink, "CPU")


class LibLoRARunner:
    def __init__(self, max_tokens=8):
        self.mapping = track(torch.empty(max_tokens, dtype=torch.int32), "token_lora_mapping", per_step=True,
                             initialized=False)
        self.w = track(torch.randn(2, 2, 4), "lora_a_stacked")  # 2 adapters, rank 2, hidden 4
        self.out = torch.empty(max_tokens, 2)

    def forward(self, x, n):
        torch.ops.heldout_vllm.lora_shrink(x, self.w, self.out, self.mapping, n)
        return self.out[:n]


@pair("style-vllm-v2", U, "token_lora_mapping")
def vllm_lib_shrink_dummy_run(ctx, bug):
    r = LibLoRARunner()
    ctx.step("dummy_run")
    n = 4
    if not bug:
        r.mapping[:n].fill_(-1)  # "no adapter" for every dummy token
    y = r.forward(torch.randn(8, 4), n)


@pair("style-vllm-v2", S, "token_lora_mapping")
def vllm_lib_shrink_stale_mapping(ctx, bug):
    r = LibLoRARunner()
    ctx.step()
    r.mapping[:4] = torch.tensor([0, 1, 1, 0], dtype=torch.int32)
    y = r.forward(torch.randn(8, 4), 4)
    ctx.step()  # a smaller batch padded to the same graph size
    r.mapping[: 2 if bug else 4] = torch.tensor([1, 0, -1, -1], dtype=torch.int32)[: 2 if bug else 4]
    y = r.forward(torch.randn(8, 4), 4)


@pair("style-vllm-v2", U, "{alloc}")
def vllm_lib_shrink_reads_unwritten_activations(ctx, bug):
    r = LibLoRARunner()
    ctx.step()
    r.mapping[:4] = torch.tensor([0, 1, 0, 1], dtype=torch.int32)
    hidden = torch.empty(8, 4)  # ALLOC
    hidden[: 3 if bug else 4] = 1.0
    y = r.forward(hidden, 4)


# -- fifth round: numpy views made by numpy functions, flat iterators, tensors handed to numpy ------
@pair("host", U, "{alloc}")
def numpy_ravel_view_written(ctx, bug):
    block_table = torch.empty(2, 4, dtype=torch.int32)  # ALLOC
    flat = np.ravel(block_table.numpy())  # a view of the table
    flat[: 7 if bug else 8] = np.arange(7 if bug else 8)
    dev = block_table.clone()  # BAD


@pair("host", U, "{alloc}")
def numpy_split_views_written(ctx, bug):
    meta = torch.empty(6, dtype=torch.int64)  # ALLOC
    starts, lens = np.split(meta.numpy(), 2)
    starts[:] = (0, 3, 5)
    lens[: 2 if bug else 3] = (3, 2, 1)[: 2 if bug else 3]
    t = meta.sum()  # BAD


@pair("host", U, "{alloc}")
def numpy_flat_write(ctx, bug):
    grid = torch.empty(2, 3)  # ALLOC
    g = grid.numpy()
    g.flat[: 5 if bug else 6] = 1.0
    s = grid.mean()  # BAD


@pair("host", U, "{alloc}")
def numpy_setitem_from_partly_written_tensor(ctx, bug):
    staged = torch.empty(4, dtype=torch.int32)  # ALLOC
    staged[: 3 if bug else 4] = 9
    host = torch.zeros(8, dtype=torch.int32)
    h = host.numpy()
    h[:4] = staged  # BAD


# -- sixth round: one bad buffer read by several consumers in one step ----------------------------
@triton.jit
def _expand_kernel(buf, w, out, mapping, n, R: tl.constexpr, N: tl.constexpr, B: tl.constexpr):
    t = tl.arange(0, B)
    lora = tl.load(mapping + t, mask=t < n, other=-1)
    live = (t < n) & (lora >= 0)
    c = tl.arange(0, N)
    acc = tl.zeros((B, N), dtype=tl.float32)
    for r in tl.static_range(R):
        h = tl.load(buf + t * R + r, mask=live, other=0.0)
        wr = tl.load(w + lora[:, None] * (R * N) + r * N + c[None, :], mask=live[:, None], other=0.0)
        acc += h[:, None] * wr
    tl.store(out + t[:, None] * N + c[None, :], acc, mask=(t < n)[:, None])


@pair("style-vllm-v2", U, "token_lora_mapping")
def dummy_run_shrink_then_expand(ctx, bug):
    r = LibLoRARunner()
    lora_b = track(torch.randn(2, 2, 4), "lora_b_stacked")
    ctx.step("dummy_run")
    n = 4
    if not bug:
        r.mapping[:n].fill_(-1)
    y = r.forward(torch.randn(8, 4), n)  # shrink reads the mapping first
    out = torch.zeros(8, 4)
    _expand_kernel[(1,)](r.out, lora_b, out, r.mapping, n, R=2, N=4, B=8)  # expand reads it again


@pair("style-dp-idle", U, "{alloc}")
def dp_padding_read_by_two_ops(ctx, bug):
    positions = torch.empty(8, dtype=torch.int64)  # ALLOC
    positions[:3] = torch.arange(3)
    if not bug:
        positions[3:4] = 0
    cos = positions[:4].float().cos()  # BAD
    sin = positions[:4].float().sin()  # the same unwritten padding, read again in this step


# -- seventh round: vLLM's LoRAKernelMeta, condensed ------------------------------------------------
class KernelMeta:
    """Per-step LoRA kernel metadata, rebuilt from the token->LoRA mapping (vLLM's prepare_tensors)."""

    def __init__(self, max_tokens=8, max_loras=3):
        mk = lambda n, name, dt=torch.int32: track(torch.empty(n, dtype=dt), name, per_step=True,  # noqa: E731
                                                   initialized=False)
        self.token_lora_mapping = mk(max_tokens, "meta.token_lora_mapping")
        self.sorted_tokens = mk(max_tokens, "meta.token_indices_sorted_by_lora_ids", torch.int64)
        self.active_lora_ids = mk(max_loras + 1, "meta.active_lora_ids")
        self.num_tokens_per_lora = mk(max_loras + 1, "meta.num_tokens_per_lora", torch.int64)
        self.lora_token_start_loc = mk(max_loras + 2, "meta.lora_token_start_loc", torch.int64)

    def reset(self, ids=True):
        if ids:  # the bug: a refactor moved this reset behind a flag nobody sets
            self.active_lora_ids.fill_(-1)
        self.num_tokens_per_lora.fill_(0)
        self.lora_token_start_loc.fill_(0)

    def prepare(self, mapping, reset_ids=True):
        self.reset(reset_ids)
        n = mapping.numel()
        self.token_lora_mapping[:n].copy_(mapping, non_blocking=True)
        _, order = torch.sort(mapping, stable=True)
        self.sorted_tokens[:n].copy_(order, non_blocking=True)
        ids, counts = torch.unique(mapping, sorted=True, return_counts=True)
        self.active_lora_ids[: ids.numel()].copy_(ids, non_blocking=True)
        self.num_tokens_per_lora[: counts.numel()].copy_(counts, non_blocking=True)
        self.lora_token_start_loc[1: 1 + counts.numel()].copy_(torch.cumsum(counts, 0), non_blocking=True)


@triton.jit
def _per_lora_kernel(active, counts, out):
    pid = tl.program_id(0)
    lora = tl.load(active + pid)  # BAD:kernel_meta_without_reset
    n = tl.load(counts + pid)
    tl.store(out + pid, tl.where(lora >= 0, n, 0))


@pair("style-vllm-v1", S, "meta.active_lora_ids")
def kernel_meta_without_reset(ctx, bug):
    meta = KernelMeta()
    out = torch.zeros(4, dtype=torch.int64)
    ctx.step()
    meta.prepare(torch.tensor([0, 2, 1, 2], dtype=torch.int32))
    _per_lora_kernel[(4,)](meta.active_lora_ids, meta.num_tokens_per_lora, out)
    ctx.step()  # fewer adapters this step: the tail of the metadata must be reset
    meta.prepare(torch.tensor([1, 1], dtype=torch.int32), reset_ids=not bug)
    _per_lora_kernel[(4,)](meta.active_lora_ids, meta.num_tokens_per_lora, out)


# -- eighth round: data-parallel collectives (a one-rank gloo group) ---------------------------------
class _OneRankGroup:
    """A default process group of one rank for the program, unless this process already has one (an engine
    run in the same process, e.g. an in-process engine target in the same pytest worker, made it): that one
    is used and left in place."""

    def __enter__(self):
        import torch.distributed as dist
        self.made = not dist.is_initialized()
        if self.made:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        assert dist.get_world_size() == 1, "a process group of one rank is needed"
        return dist

    def __exit__(self, *exc):
        import torch.distributed as dist
        if self.made:
            dist.destroy_process_group()


@pair("style-dp-idle", U, "{alloc}")
def dp_idle_rank_gathers_unset_count(ctx, bug):
    with _OneRankGroup() as dist:
        ctx.step("dp_idle")
        mine = torch.empty(1, dtype=torch.int32)  # ALLOC
        if not bug:
            mine.fill_(0)  # an idle rank still reports its (zero) token count
        everyone = torch.empty(1, dtype=torch.int32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            dist.all_gather_into_tensor(everyone, mine)  # BAD
        padded = int(everyone.max())


@pair("style-dp-idle", U, "{alloc}")
def dp_all_reduce_of_partly_set_counts(ctx, bug):
    with _OneRankGroup() as dist:
        ctx.step()
        counts = torch.empty(4, dtype=torch.int32)  # ALLOC
        if not bug:
            counts.zero_()
        counts[0] = 5  # this rank's slot
        dist.all_reduce(counts)  # BAD
        max_tokens = int(counts.max())


# -- ninth round: numpy aliases made by asarray, embedding with max_norm ------------------------------
@pair("host", U, "{alloc}")
def np_asarray_alias_written(ctx, bug):
    slot_mapping = torch.empty(6, dtype=torch.int64)  # ALLOC
    sm = np.asarray(slot_mapping.numpy())  # another alias of the same memory
    sm[: 5 if bug else 6] = np.arange(5 if bug else 6) * 16
    dev = slot_mapping.clone()  # BAD


@pair("indexed-read", U, "{alloc}")
def embedding_max_norm_rows(ctx, bug):
    table = torch.empty(6, 4)  # ALLOC
    table[:4] = 0.5
    ids = torch.tensor([0, 3, 4 if bug else 2])
    e = torch.nn.functional.embedding(ids, table, max_norm=1.0)  # BAD
