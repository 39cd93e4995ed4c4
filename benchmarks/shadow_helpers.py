"""Host cost of two helpers every checked torch op calls under a shadow oracle, in this one run:

  * ``torch_effects.classify`` (what an op reads and writes): with its per-op plan (read once from the
    schema), against making the plan at each call (the schema walk it did before);
  * ``locations.caller_line`` (the user's line of an op): with its table of file kinds, against
    classifying each frame's file at each call (a scan of ``NOT_CALLERS``, as before), from a user
    frame under a few torch-like frames.

Microseconds per call, the median of interleaved repetitions; CPU only.
Usage: PYTHONPATH=. python benchmarks/shadow_helpers.py [--calls 5000] [--reps 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _per_call(fn, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    import torch

    from fuzzrunner.oracles.shadow import locations
    from fuzzrunner.oracles.shadow import torch_effects as fx
    aten = torch.ops.aten
    a, b, out = torch.randn(4), torch.randn(4), torch.empty(4)
    ops = [(aten.add_.Tensor, (a, b), {}), (aten.add.out, (a, b), {"out": out}), (aten.sum.default, (a,), {}),
           (aten.index_select.default, (a, 0, torch.tensor([1])), {})]

    def classify_planned():
        for f, x, kw in ops:
            fx.classify(f, x, kw)

    def classify_walk():
        for f, x, kw in ops:
            fx._PLANS.pop(f, None)  # no plan: made from the schema at this call
            fx.classify(f, x, kw)

    def caller(depth_left: int, kinds: dict | None):
        if depth_left:
            return caller(depth_left - 1, kinds)
        if kinds is not None:
            kinds.clear()  # every frame's file classified again, as before the table
        return locations.caller_line(1)

    rows = {"classify, per-op plan": (classify_planned, len(ops)),
            "classify, schema walk each call": (classify_walk, len(ops)),
            "caller_line, table of files": (lambda: caller(4, None), 1),
            "caller_line, files scanned each call": (lambda: caller(4, locations._KINDS), 1)}
    got: dict = {k: [] for k in rows}
    for _ in range(args.reps):
        for k, (fn, per) in rows.items():
            got[k].append(_per_call(fn, args.calls) / per)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; us per call (median of {args.reps})")
    for k in rows:
        print(f"{k:40} {statistics.median(got[k]):8.2f}")
    walk = statistics.median(got["classify, schema walk each call"])
    plan = statistics.median(got["classify, per-op plan"])
    scan, table = (statistics.median(got["caller_line, files scanned each call"]),
                   statistics.median(got["caller_line, table of files"]))
    print(f"classify: {walk / plan:.1f}x faster with plans; caller_line: {scan / table:.1f}x faster with the table")


if __name__ == "__main__":
    main()
