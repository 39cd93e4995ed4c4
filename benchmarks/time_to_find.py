"""Time-to-find and examples-to-find of each planted fault, from an empty corpus, on this machine.

One campaign per (fault, seed), shrinking off (finding, not minimizing, is timed); seconds count
from the campaign's start, the worker's start-up included. Usage:
    PYTHONPATH=. python benchmarks/time_to_find.py [--seeds 1 2 3] [--max-examples 150] [--device cpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fuzzrunner.engine import run_campaign  # noqa: E402
from fuzzrunner.runner.faults import Faults  # noqa: E402
from fuzzrunner.settings import Settings  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--max-examples", type=int, default=150)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    print(f"{'fault':28} {'seed':>4} {'examples':>9} {'seconds':>8}  kind of the first finding")
    for fault in Faults.names():
        found = []
        for seed in args.seeds:
            s = Settings(max_examples=args.max_examples, seed=seed, shrink=False, device=args.device)
            first = {}

            def note(e, first=first):
                if e.kind == "finding" and not first:
                    f = e.finding
                    first.update(n=f.first_found_after_examples, s=f.found_after_s, kind=f.signature.short())

            run_campaign("reference_runner", s, faults=(fault,), on_event=note)
            if first:
                found.append(first["s"])
                print(f"{fault:28} {seed:>4} {first['n']:>9} {first['s']:>8.1f}  {first['kind']}", flush=True)
            else:
                print(f"{fault:28} {seed:>4} {'-':>9} {'-':>8}  not found in {args.max_examples}", flush=True)
        if found:
            print(f"{'':28} median {statistics.median(found):.1f} s over {len(found)}/{len(args.seeds)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
