"""Triton kernels under the interpreter: descriptors, block pointers, tuples, pointer arrays,
keyword launches, and custom ops whose implementation allocates and launches."""

import torch
import triton
import triton.language as tl

from fuzzrunner.tracking import track

from .harness import pair

U, S, OOB = "uninitialized-read", "stale-read", "out-of-bounds"


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(src + i, mask=i < n)  # BAD:kernel_reads_unwritten_tail,kernel_launched_with_keywords,custom_op_allocation_read_by_kernel
    tl.store(dst + i, x, mask=i < n)


@triton.jit
def _desc_kernel(src, dst, M: tl.constexpr, N: tl.constexpr):
    d = tl.make_tensor_descriptor(src, shape=[M, N], strides=[N, 1], block_shape=[2, N])
    x = d.load([0, 0])  # BAD:device_tensor_descriptor
    tl.store(dst + tl.arange(0, 2)[:, None] * N + tl.arange(0, N)[None, :], x)


@triton.jit
def _host_desc_kernel(desc, dst, N: tl.constexpr):
    x = desc.load([0, 0])  # BAD:host_tensor_descriptor
    tl.store(dst + tl.arange(0, 2)[:, None] * N + tl.arange(0, N)[None, :], x)


@triton.jit
def _block_ptr_kernel(src, dst, M, N: tl.constexpr):
    p = tl.make_block_ptr(src, shape=(M, N), strides=(N, 1), offsets=(0, 0), block_shape=(2, N), order=(1, 0))
    x = tl.load(p, boundary_check=(0, 1))  # BAD:block_pointer_load
    tl.store(dst + tl.arange(0, 2)[:, None] * N + tl.arange(0, N)[None, :], x)


@triton.jit
def _tuple_kernel(pair_, dst, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    a = tl.load(pair_[0] + i)
    b = tl.load(pair_[1] + i)  # BAD:tensors_in_a_tuple
    tl.store(dst + i, a + b)


@triton.jit
def _ptr_array_kernel(ptrs, dst, BLOCK: tl.constexpr):
    slot = tl.program_id(0)
    base = tl.load(ptrs + slot).to(tl.pointer_type(tl.float32))
    i = tl.arange(0, BLOCK)
    x = tl.load(base + i)  # BAD:pointer_array_of_adapters
    tl.store(dst + slot * BLOCK + i, x)


@triton.jit
def _lookup_kernel(slots, table, out, n, BLOCK: tl.constexpr, W: tl.constexpr):
    i = tl.arange(0, BLOCK)
    s = tl.load(slots + i, mask=i < n, other=0)  # BAD:kernel_reads_stale_padding
    w = tl.arange(0, W)
    row = tl.load(table + s[:, None] * W + w[None, :], mask=(i < n)[:, None])
    tl.store(out + i[:, None] * W + w[None, :], row, mask=(i < n)[:, None])


@triton.autotune(configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 8}, num_warps=2)], key=["n"])
@triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})
@triton.jit
def _autotuned_gather(slots, table, out, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    s = tl.load(slots + i, mask=i < n, other=0)  # BAD:autotuned_kernel_reads_stale_slots
    tl.store(out + i, tl.load(table + s, mask=i < n), mask=i < n)


@pair("triton", U, "{alloc}")
def kernel_reads_unwritten_tail(ctx, bug):
    buf = torch.empty(8)  # ALLOC
    buf[:5] = 1.0
    out = torch.zeros(8)
    _copy_kernel[(1,)](buf, out, 6 if bug else 5, BLOCK=8)


@pair("triton", U, "{alloc}")
def kernel_launched_with_keywords(ctx, bug):
    buf = torch.empty(4, dtype=torch.float32)  # ALLOC
    buf[:3] = 2.0
    out = torch.zeros(4)
    _copy_kernel[(1,)](src=buf, dst=out, n=4 if bug else 3, BLOCK=4)


@pair("triton", U, "{alloc}")
def device_tensor_descriptor(ctx, bug):
    src = torch.empty(4, 4)  # ALLOC
    src[:1] = 1.0
    if not bug:
        src[1:2] = 1.0
    dst = torch.zeros(2, 4)
    _desc_kernel[(1,)](src, dst, M=4, N=4)


@pair("triton", U, "{alloc}")
def host_tensor_descriptor(ctx, bug):
    from triton.tools.tensor_descriptor import TensorDescriptor
    src = torch.empty(4, 4)  # ALLOC
    src[0] = 1.0
    if not bug:
        src[1] = 1.0
    dst = torch.zeros(2, 4)
    _host_desc_kernel[(1,)](TensorDescriptor.from_tensor(src, [2, 4]), dst, N=4)


@pair("triton", U, "{alloc}")
def tensors_in_a_tuple(ctx, bug):
    a = torch.ones(4)
    b = torch.empty(4)  # ALLOC
    b[:3] = 1.0
    if not bug:
        b[3] = 1.0
    dst = torch.zeros(4)
    _tuple_kernel[(1,)]((a, b), dst, BLOCK=4)


@pair("triton", U, "{alloc}")
def pointer_array_of_adapters(ctx, bug):
    w0 = torch.ones(4)
    w1 = torch.empty(4)  # ALLOC
    w1[:2] = 1.0
    if not bug:
        w1[2:] = 1.0
    ptrs = torch.tensor([w0.data_ptr(), w1.data_ptr()], dtype=torch.int64)
    dst = torch.zeros(8)
    _ptr_array_kernel[(2,)](ptrs, dst, BLOCK=4)


@pair("triton", S, "token_slots")
def kernel_reads_stale_padding(ctx, bug):
    slots = track(torch.empty(8, dtype=torch.int32), "token_slots", per_step=True, initialized=False)
    table = track(torch.randn(4, 2), "table")
    out = torch.zeros(8, 2)
    slots[:6] = 1
    ctx.step()  # the next step has 3 tokens, padded to 4 for a CUDA graph
    slots[:3] = 2
    if not bug:
        slots[3:4] = 0
    _lookup_kernel[(1,)](slots, table, out, 4, BLOCK=8, W=2)


# Block pointers: removed from Triton 3.9's language (tensor descriptors replace them), kept on 3.6.
_BLOCK_PTRS = tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 9)
if _BLOCK_PTRS:
    @pair("triton", U, "{alloc}")
    def block_pointer_load(ctx, bug):
        src = torch.empty(3, 4)  # ALLOC
        src[0] = 1.0
        if not bug:
            src[1] = 1.0
        dst = torch.zeros(2, 4)
        _block_ptr_kernel[(1,)](src, dst, 3, N=4)


@torch.library.custom_op("fuzzpairs::scaled_rows", mutates_args=())
def scaled_rows(x: torch.Tensor, n: int) -> torch.Tensor:
    tmp = torch.empty(8)  # ALLOC:custom_op_allocation_read_by_kernel
    tmp[:n] = x[:n] * 2
    out = torch.zeros(8)
    _copy_kernel[(1,)](tmp, out, 5, BLOCK=8)
    return out


@pair("custom-op", U, "{alloc}")
def custom_op_allocation_read_by_kernel(ctx, bug):
    x = torch.ones(8)
    y = scaled_rows(x, 4 if bug else 5)


@torch.library.custom_op("fuzzpairs::fill_prefix", mutates_args=("buf",))
def fill_prefix(buf: torch.Tensor, n: int) -> None:
    buf[:n] = 7


@pair("custom-op", U, "{alloc}")
def custom_op_partial_write(ctx, bug):
    buf = torch.empty(6, dtype=torch.int64)  # ALLOC
    fill_prefix(buf, 3 if bug else 4)
    s = buf[:4].sum()  # BAD


@torch.library.custom_op("fuzzpairs::prefix_sum", mutates_args=())
def prefix_sum(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[:n].sum().reshape(1)  # BAD:custom_op_reads_only_a_prefix


@pair("custom-op", U, "{alloc}")
def custom_op_reads_only_a_prefix(ctx, bug):
    x = torch.empty(8)  # ALLOC
    x[:4] = 1.0
    s = prefix_sum(x, 5 if bug else 4)


_lib = torch.library.Library("fuzzpairs_lib", "DEF")
_lib.define("masked_copy_(Tensor(a!) dst, Tensor src, int n) -> ()")


def _masked_copy(dst, src, n):
    dst[:n].copy_(src[:n])


_lib.impl("masked_copy_", _masked_copy, "CPU")


@pair("custom-op", U, "{alloc}")
def library_op_without_python_model(ctx, bug):
    dst = torch.empty(5)  # ALLOC
    torch.ops.fuzzpairs_lib.masked_copy_(dst, torch.ones(5), 3 if bug else 5)
    t = dst.sum()  # BAD


@triton.jit
def _adapter_rows_kernel(w, out, rows, K: tl.constexpr, R: tl.constexpr):
    r = tl.arange(0, R)
    k = tl.arange(0, K)
    x = tl.load(w + r[:, None] * K + k[None, :], mask=(r < rows)[:, None])  # BAD:adapter_slice_read_past_its_end
    tl.store(out + r[:, None] * K + k[None, :], x, mask=(r < rows)[:, None])


@pair("triton", OOB, "lora_a_stacked", views=True)
def adapter_slice_read_past_its_end(ctx, bug):
    stacked = track(torch.randn(3, 2, 4), "lora_a_stacked")  # 3 adapters, rank 2, hidden 4
    out = torch.zeros(4, 4)
    s = 1
    _adapter_rows_kernel[(1,)](stacked[s], out, 4 if bug else 2, K=4, R=4)  # reads rank 4 of a rank-2 slice


@triton.jit
def _base_pointer_kernel(w, out, lora_id, stride0, K: tl.constexpr):
    k = tl.arange(0, K)
    x = tl.load(w + lora_id * stride0 + k)  # BAD:base_pointer_with_explicit_adapter_stride
    tl.store(out + k, x)


@pair("triton", OOB, "lora_b_stacked")
def base_pointer_with_explicit_adapter_stride(ctx, bug):
    """vLLM's expand kernel: it is given adapter 0's slice and reaches adapter ``id`` through the
    stride it is passed. Correct (and silent by default) inside the stack; past it, out of bounds."""
    stacked = track(torch.randn(3, 4), "lora_b_stacked")  # 3 adapters, 4 outputs each
    out = torch.zeros(4)
    _base_pointer_kernel[(1,)](stacked[0], out, 3 if bug else 2, stacked.stride(0), K=4)


@pair("triton", S, "token_slots", gpu_only=True)
def autotuned_kernel_reads_stale_slots(ctx, bug):
    """An autotuned (and heuristics-wrapped) kernel: every configuration the autotuner launches is
    checked, and the report names the kernel, not the wrapper. GPU only: the autotuner times its
    configurations through a GPU driver ("0 active drivers" under the interpreter with none)."""
    slots = track(torch.empty(8, dtype=torch.int32), "token_slots", per_step=True, initialized=False)
    table = track(torch.arange(4, dtype=torch.float32), "table")
    out = torch.zeros(8)
    slots[:] = 1
    _autotuned_gather[lambda meta: (triton.cdiv(6, meta["BLOCK"]),)](slots, table, out, 6)  # tunes: all fresh
    ctx.step()
    slots[:5] = 2
    if not bug:
        slots[5:6] = 3
    _autotuned_gather[lambda meta: (triton.cdiv(6, meta["BLOCK"]),)](slots, table, out, 6)
