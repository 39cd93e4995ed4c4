"""The target of benchmarks/crash_throughput.py: each case does a little real work (a matmul on the
campaign's device, so a GPU worker pays for its CUDA start-up), then dies if the case says so,
the way a device-side assert kills a GPU worker."""

import ctypes
import os
import time

import torch
from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target


def cases(faults=(), *, max_ops=1):
    return st.booleans().map(lambda crash: Case("crash_bench", {}, ({"op": "crash" if crash else "work"},)))


def run(case, ctx):
    device = "cuda" if os.environ.get("FUZZRUNNER_DEVICE") == "cuda" else "cpu"
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            x = torch.ones(64, 64, device=device)
            float((x @ x).sum())
            time.sleep(case.config.get("work_ms", 0) / 1000)  # the rest of a realistic case
            if op["op"] == "crash":
                ctypes.string_at(0)  # SIGSEGV, like a device-side fault taking the process down


TARGET = Target("crash_bench", "does a little work, dies when told", cases, run)
