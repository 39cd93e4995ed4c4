"""Model code off the case's thread, as engines run it: a ``ThreadPoolExecutor`` (made before or
during the case) preparing inputs, ``Thread`` subclasses, an overlap scheduler thread fed by a
queue, Triton kernels and numpy views used on a worker. A correct worker write must be seen (its
absence was a false alarm) and a worker's bad read must be reported (it was missed)."""

import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import triton
import triton.language as tl

from fuzzrunner.tracking import carry_over, track

from .harness import pair

U, S, OOB = "uninitialized-read", "stale-read", "out-of-bounds"

_EARLY_POOL = ThreadPoolExecutor(2, thread_name_prefix="made-at-import")  # its threads predate every case


@pair("threads", U, "{alloc}")
def pool_fills_what_main_reads(ctx, bug):
    buf = torch.empty(8, dtype=torch.int64)  # ALLOC
    n = 6 if bug else 8
    with ThreadPoolExecutor(1) as ex:
        ex.submit(lambda: buf[:n].fill_(3)).result()
    total = buf.sum()  # BAD


@pair("threads", U, "{alloc}")
def pool_reads_what_main_left_unwritten(ctx, bug):
    buf = torch.empty(8)  # ALLOC
    buf[:7 if bug else 8] = 1.0
    with ThreadPoolExecutor(1) as ex:
        ex.submit(lambda: buf.sum()).result()  # BAD


@pair("threads", U, "{alloc}")
def pool_made_before_the_case_fills(ctx, bug):
    buf = torch.empty(4, 4)  # ALLOC
    futs = [_EARLY_POOL.submit(buf[i].zero_) for i in range(3 if bug else 4)]
    for f in futs:
        f.result()
    out = buf @ buf.T  # BAD


@pair("threads", U, "{alloc}")
def pool_map_fills_rows(ctx, bug):
    table = torch.empty(5, 3)  # ALLOC

    def fill(i):
        table[i] = float(i)

    with ThreadPoolExecutor(2) as ex:
        list(ex.map(fill, range(4 if bug else 5)))
    m = table.max()  # BAD


class _Filler(threading.Thread):
    def __init__(self, buf, upto):
        super().__init__()
        self.buf, self.upto = buf, upto

    def run(self):  # its own run: wrapped on the instance, not through Thread.run
        self.buf[:self.upto] = 7


@pair("threads", U, "{alloc}")
def thread_subclass_fills(ctx, bug):
    ids = torch.empty(6, dtype=torch.int32)  # ALLOC
    t = _Filler(ids, 5 if bug else 6)
    t.start()
    t.join()
    s = ids.sum()  # BAD


@pair("threads", U, "{alloc}")
def thread_target_reads_before_main_writes(ctx, bug):
    pos = torch.empty(4, dtype=torch.int64)  # ALLOC
    out = []
    if not bug:
        pos.copy_(torch.arange(4))
    t = threading.Thread(target=lambda: out.append(pos + 1))  # BAD
    t.start()
    t.join()
    if bug:
        pos.copy_(torch.arange(4))  # written, but after the worker read it


@pair("threads", S, "input_ids")
def worker_reads_last_steps_per_step_buffer(ctx, bug):
    ids = track(torch.zeros(6, dtype=torch.int64), "input_ids", per_step=True)
    with ThreadPoolExecutor(1) as ex:
        ids[:] = 1
        ctx.step()
        if not bug:
            ex.submit(ids.fill_, 2).result()
        ex.submit(lambda: ids * 2).result()  # BAD


@pair("threads", S, "slot_mapping")
def overlap_scheduler_prepares_next_batch(ctx, bug):
    slots = track(torch.zeros(8, dtype=torch.int64), "slot_mapping", per_step=True)
    jobs: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()

    def scheduler():  # the overlap thread: prepares each step's metadata while the model runs
        while (n := jobs.get()) is not None:
            slots[:n] = torch.arange(n)
            done.put(n)

    t = threading.Thread(target=scheduler, daemon=True)
    t.start()
    for n in (8, 5 if bug else 8):
        ctx.step()
        jobs.put(n)
        done.get()
        k = slots.sum()  # BAD
    jobs.put(None)
    t.join()


@pair("threads", U, "{alloc}")
def worker_allocates_main_reads(ctx, bug):
    made = []

    def alloc():
        buf = torch.empty(6)  # ALLOC
        buf[:4 if bug else 6] = 0.5
        made.append(buf)

    with ThreadPoolExecutor(1) as ex:
        ex.submit(alloc).result()
    r = made[0].mean()  # BAD


@pair("threads", U, "{alloc}")
def two_workers_write_halves(ctx, bug):
    out = torch.empty(2, 8)  # ALLOC
    with ThreadPoolExecutor(2) as ex:
        a = ex.submit(out[0].fill_, 1.0)
        b = ex.submit(out[1, :7 if bug else 8].fill_, 2.0)
        a.result(), b.result()
    s = out.sum(1)  # BAD


@pair("threads", U, "{alloc}")
def worker_index_put_misses_a_row(ctx, bug):
    table = torch.empty(4, 2)  # ALLOC
    rows = torch.tensor([0, 1, 2] if bug else [0, 1, 2, 3])
    with ThreadPoolExecutor(1) as ex:
        ex.submit(table.index_put_, (rows,), torch.ones(len(rows), 2)).result()
    best = table.argmax(0)  # BAD


@pair("threads", OOB, "lora_table")
def worker_embedding_index_out_of_range(ctx, bug):
    table = track(torch.randn(4, 3), "lora_table")
    ids = torch.tensor([0, 3, 4 if bug else 2])
    with ThreadPoolExecutor(1) as ex:
        ex.submit(lambda: torch.nn.functional.embedding(ids, table)).result()  # BAD


@pair("threads", U, "{alloc}")
def worker_reads_numpy_view(ctx, bug):
    buf = torch.empty(6, dtype=torch.int32)  # ALLOC
    arr = buf.numpy()
    arr[:5 if bug else 6] = 1
    with ThreadPoolExecutor(1) as ex:
        ex.submit(lambda: int(np.sum(arr))).result()  # BAD


@pair("threads", S, "mapping")
def worker_carries_over_a_prefix(ctx, bug):
    mapping = track(torch.zeros(8, dtype=torch.int32), "mapping", per_step=True)
    mapping[:] = 1
    ctx.step()
    with ThreadPoolExecutor(1) as ex:
        ex.submit(carry_over, mapping[:4]).result()
    s = mapping[:5 if bug else 4].sum()  # BAD


@triton.jit
def _double_kernel(src, dst, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(src + i, mask=i < n)  # BAD:worker_kernel_reads_unwritten
    tl.store(dst + i, x * 2, mask=i < n)


@pair("threads", U, "{alloc}")
def worker_kernel_reads_unwritten(ctx, bug):
    src = torch.empty(8)  # ALLOC
    dst = torch.zeros(8)
    with ThreadPoolExecutor(1) as ex:
        ex.submit(src[:6 if bug else 8].fill_, 1.0).result()
        ex.submit(lambda: _double_kernel[(1,)](src, dst, 8, BLOCK=8)).result()


@pair("threads", U, "{alloc}")
def thread_started_in_case_reused_next_step(ctx, bug):
    buf = torch.empty(4)  # ALLOC
    work: queue.Queue = queue.Queue()
    ready: queue.Queue = queue.Queue()

    def loop():
        while (job := work.get()) is not None:
            job()
            ready.put(True)

    t = threading.Thread(target=loop)
    t.start()
    work.put(lambda: buf[:2].fill_(1.0))
    ready.get()
    ctx.step()
    work.put(lambda: buf[2:3 if bug else 4].fill_(2.0))
    ready.get()
    work.put(None)
    t.join()
    s = buf.sum()  # BAD
