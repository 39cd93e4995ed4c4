"""Registered sub-buffers: one slot of stacked weights, a piece of a carved ``torch.empty`` arena,
one layer of a KV cache, each given to ``track(view, name)``. A kernel that runs past the view it
was given into its neighbour stays inside one allocation; it is reported as out-of-bounds of the
view. Ordinary slices and whole stacked tensors may be indexed anywhere (no report)."""

import torch
import triton
import triton.language as tl

from fuzzrunner.tracking import track

from .harness import pair

U, OOB = "uninitialized-read", "out-of-bounds"


@triton.jit
def _copy_n(src, dst, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(src + i, mask=i < n)  # BAD:slot_overrun_into_next_slot,arena_piece_overrun,sub_slice_of_registered_slot,byte_arena_float_view
    tl.store(dst + i, x, mask=i < n)


@triton.jit
def _copy_pair(a, b, dst, n, m, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(a + i, mask=i < n)  # BAD:arena_overrun_both_given
    y = tl.load(b + i, mask=i < m)
    tl.store(dst + i, x + y, mask=i < m)


@triton.jit
def _write_n(dst, n, value, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(dst + i, tl.full([BLOCK], value, tl.float32), mask=i < n)  # BAD:store_past_layer_into_next


@triton.jit
def _write_shifted(dst, shift, value, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(dst + shift + i, tl.full([BLOCK], value, tl.float32))  # BAD:store_before_start_of_slot


@triton.jit
def _rows(src, dst, rows, stride, COLS: tl.constexpr, ROWS: tl.constexpr):
    r = tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, COLS)[None, :]
    x = tl.load(src + r * stride + c, mask=r < rows)  # BAD:two_d_slot_rows_overrun
    tl.store(dst + r * COLS + c, x, mask=r < rows)


@triton.jit
def _gather_adapter(base, dst, idx, stride, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(base + idx * stride + i)  # BAD:ordinary_slice_reaches_other_adapter,whole_stack_given_with_slots_registered
    tl.store(dst + i, x)


@triton.jit
def _shifted(src, dst, shift, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(src + i + shift)  # BAD:negative_offset_into_previous_slot
    tl.store(dst + i, x)


def _slots(n=4, width=8):
    w = track(torch.randn(n, width), "lora_b")
    for s in range(n):
        track(w[s], f"lora_b[{s}]")
    return w


@pair("sub-buffers", OOB, "lora_b[1]")
def slot_overrun_into_next_slot(ctx, bug):
    w = _slots()
    out = torch.zeros(16)
    _copy_n[(1,)](w[1], out, 10 if bug else 8, BLOCK=16)


@pair("sub-buffers", OOB, "kv.k")
def arena_piece_overrun(ctx, bug):
    arena = torch.empty(64)
    k, v = track(arena[:16], "kv.k"), track(arena[16:32], "kv.v")
    k.fill_(1.0)
    v.fill_(2.0)
    out = torch.zeros(32)
    _copy_n[(1,)](k, out, 20 if bug else 16, BLOCK=32)


@pair("sub-buffers", OOB, "scratch.a")
def arena_overrun_both_given(ctx, bug):
    arena = torch.zeros(48)
    a, b = track(arena[:16], "scratch.a"), track(arena[16:32], "scratch.b")
    out = torch.zeros(32)
    _copy_pair[(1,)](a, b, out, 18 if bug else 16, 16, BLOCK=32)  # b is an argument too: spans cannot tell


@pair("sub-buffers", OOB, "kv_cache.layer0")
def store_past_layer_into_next(ctx, bug):
    cache = torch.zeros(3, 12)
    layers = [track(cache[i], f"kv_cache.layer{i}") for i in range(3)]
    _write_n[(1,)](layers[0], 14 if bug else 12, 1.0, BLOCK=16)
    s = cache.sum()


@pair("sub-buffers", OOB, "lora_b[2]")
def store_before_start_of_slot(ctx, bug):
    w = _slots()
    _write_shifted[(1,)](w[2], -1 if bug else 0, 0.0, BLOCK=4)


@pair("sub-buffers", OOB, "lora_b[1]")
def sub_slice_of_registered_slot(ctx, bug):
    w = _slots()
    out = torch.zeros(16)
    _copy_n[(1,)](w[1][4:], out, 6 if bug else 4, BLOCK=8)  # past the slice is fine, past the slot is not


@pair("sub-buffers", OOB, "lora_a[0]")
def two_d_slot_rows_overrun(ctx, bug):
    a = track(torch.randn(3, 4, 8), "lora_a")
    for s in range(3):
        track(a[s], f"lora_a[{s}]")
    out = torch.zeros(8, 8)
    _rows[(1,)](a[0], out, 5 if bug else 4, 8, COLS=8, ROWS=8)


@pair("sub-buffers", U, "{alloc}")
def ordinary_slice_reaches_other_adapter(ctx, bug):
    w = torch.empty(4, 8)  # ALLOC
    w[:3 if bug else 4] = 1.0
    out = torch.zeros(8)
    _gather_adapter[(1,)](w[0], out, 3, 8, BLOCK=8)  # vLLM's pattern: adapter 0's slice, stride to adapter 3


@pair("sub-buffers", OOB, "lora_b[2]")
def negative_offset_into_previous_slot(ctx, bug):
    w = _slots()
    out = torch.zeros(4)
    _shifted[(1,)](w[2], out, -2 if bug else 4, BLOCK=4)


@pair("sub-buffers", OOB, "arena.q")
def byte_arena_float_view(ctx, bug):
    arena = torch.zeros(128, dtype=torch.uint8)
    q = track(arena[:32].view(torch.float32), "arena.q")
    track(arena[32:64].view(torch.float32), "arena.k")
    out = torch.zeros(16)
    _copy_n[(1,)](q, out, 9 if bug else 8, BLOCK=16)


@pair("sub-buffers", U, "w[3]")
def whole_stack_given_with_slots_registered(ctx, bug):
    w = torch.empty(4, 8)
    for s in range(4):
        track(w[s], f"w[{s}]", initialized=False)
    w[:3 if bug else 4] = 2.0
    out = torch.zeros(8)
    _gather_adapter[(1,)](w, out, 3, 8, BLOCK=8)


# -- a tensor argument's own storage: an access that leaves it is out of bounds even where it lands in another
# allocation (which memory it lands in is the allocator's choice: the verdict must not depend on it)

@triton.jit
def _store_at(dst, off, value, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(dst + off + i, tl.full([BLOCK], value, tl.float32))  # BAD:write_lands_in_another_tensor


@triton.jit
def _load_at(src, dst, off, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(src + off + i)  # BAD:read_lands_in_a_written_tensor,read_lands_in_an_unwritten_tensor
    tl.store(dst + i, x)


def _elements_to(a: torch.Tensor, b: torch.Tensor) -> int:
    """The element offset from ``a``'s first element to ``b``'s (both float32)."""
    return (b.data_ptr() - a.data_ptr()) // 4


@pair("sub-buffers", OOB, "out.a")
def write_lands_in_another_tensor(ctx, bug):
    a, b = track(torch.zeros(8), "out.a"), track(torch.zeros(64), "out.b")
    _store_at[(1,)](a, _elements_to(a, b) if bug else 0, 1.0, BLOCK=8)  # before: b silently "written"
    s = b.sum()


@pair("sub-buffers", OOB, "src.a")
def read_lands_in_a_written_tensor(ctx, bug):
    a, other = track(torch.ones(8), "src.a"), track(torch.full((64,), 2.0), "src.other")
    out = torch.zeros(8)
    _load_at[(1,)](a, out, _elements_to(a, other) if bug else 0, BLOCK=8)  # before: silent (other is written)


@pair("sub-buffers", OOB, "src.a")
def read_lands_in_an_unwritten_tensor(ctx, bug):
    a, scratch = track(torch.ones(8), "src.a"), torch.empty(64)
    out = torch.zeros(8)
    _load_at[(1,)](a, out, _elements_to(a, scratch) if bug else 0, BLOCK=8)  # before: an unwritten read of scratch
