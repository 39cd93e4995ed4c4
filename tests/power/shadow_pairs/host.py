"""Host memory: writes through numpy views (vLLM's CpuGpuBuffer), reads through tolist/numpy/item."""

import numpy as np
import torch

from fuzzrunner.tracking import track

from .harness import pair

U, S = "uninitialized-read", "stale-read"


class CpuGpuBuffer:
    """vLLM's pattern: a CPU tensor, its numpy view, and the device copy."""

    def __init__(self, n, dtype=torch.int32):
        self.cpu = torch.empty(n, dtype=dtype)  # ALLOC:numpy_fill_then_copy,input_batch_copyto
        self.np = self.cpu.numpy()
        self.gpu = torch.empty(n, dtype=dtype)

    def copy_to_gpu(self, n):
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)  # BAD:input_batch_copyto


@pair("host", U, "{alloc}")
def numpy_fill_then_copy(ctx, bug):
    buf = CpuGpuBuffer(8)
    n, padded = 3, 4
    buf.np[:n] = np.arange(n)
    if not bug:
        buf.np[n:padded] = 0  # zero the CUDA-graph padding
    dev = buf.gpu[:padded].copy_(buf.cpu[:padded])  # BAD


@pair("host", U, "{alloc}")
def tolist_of_never_written(ctx, bug):
    ids = torch.empty(6, dtype=torch.int64)  # ALLOC
    ids[:4] = torch.arange(4)
    n = 5 if bug else 4
    host = ids[:n].tolist()  # BAD


@pair("host", U, "{alloc}")
def numpy_sum_of_never_written(ctx, bug):
    counts = torch.empty(5, dtype=torch.int32)  # ALLOC
    view = counts.numpy()
    view[:3] = 1
    total = view[:3 + int(bug)].sum()  # BAD


@pair("host", U, "{alloc}")
def numpy_scalar_read(ctx, bug):
    flags = torch.empty(4, dtype=torch.int32)  # ALLOC
    fnp = flags.numpy()
    fnp[0] = 1
    first = int(fnp[1 if bug else 0])  # BAD


@pair("host", U, "{alloc}")
def item_of_never_written(ctx, bug):
    num = torch.empty(2, dtype=torch.int64)  # ALLOC
    num[0] = 3
    v = num[1 if bug else 0].item()  # BAD


@pair("host", S, "positions")
def numpy_rewrite_same_values_each_step(ctx, bug):
    positions = track(torch.zeros(6, dtype=torch.int64), "positions", per_step=True)
    pnp = positions.numpy()
    for step in range(2):
        ctx.step()
        pnp[:4 if not (bug and step == 1) else 3] = np.arange(4)[:4 if not (bug and step == 1) else 3]
        dev = positions[:4].clone()  # BAD


@pair("host", U, "{alloc}")
def input_batch_copyto(ctx, bug):
    block = CpuGpuBuffer(6, torch.int64)
    src = np.array([5, 6, 7, 8])
    np.copyto(block.np[:4], src)
    if not bug:
        block.np[4:].fill(0)
    out = block.copy_to_gpu(6)


@pair("host", U, "{alloc}")
def numpy_ufunc_out(ctx, bug):
    seq = torch.empty(4, dtype=torch.int64)  # ALLOC
    s = seq.numpy()
    np.cumsum(np.array([1, 2, 3]), out=s[:3])
    if not bug:
        s[3] = 0
    lens = torch.diff(seq)  # BAD
