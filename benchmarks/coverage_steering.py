"""Does coverage steering, or the stateful op-sequence builder, find planted faults sooner?

Two comparisons, each over several seeds, from an empty corpus, shrinking off (finding is timed,
not minimizing); a campaign stops at its first finding of the planted fault, or at --max-examples:

* steering: the reference runner's planted faults, ``steer`` off vs on (Hypothesis ``target()``
  towards cases with rarely reached features, fuzzrunner/coverage.py);
* strategy: the deep-state fault ``mapping_cache_ignores_slot_changes`` (a slot reassigned between
  two identical mappings), the stateful builder (fuzzrunner.strategies, reference_runner's own
  cases) vs the flat strategy it replaced (benchmarks/flat_reference_cases.py), steering off.

Examples count generated cases up to and including the first that shows the fault; seconds count
from the campaign's start, the worker's start-up included. A run that never found it counts as
``>N`` (the table's medians take it as N, so they are lower bounds). Usage:
    PYTHONPATH=. python benchmarks/coverage_steering.py [--seeds 1 2] [--faults ...] [--max-examples 150]
        [--deep-max-examples 300] [--deep-max-ops 8] [--jobs 1] [--part steering|strategy|both]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEEP = "mapping_cache_ignores_slot_changes"
FLAT = os.path.join(ROOT, "benchmarks", "flat_reference_cases.py") + ":FLAT"


class _First(BaseException):
    """The first finding: end the campaign (Hypothesis lets a BaseException through)."""


def campaign(spec: str, fault: str, seed: int, steer: bool, max_examples: int, device: str, max_ops: int = 8) -> dict:
    """One campaign to the first finding of ``fault``: {"n": examples, "s": seconds} or {} (not found)."""
    from fuzzrunner.engine import run_campaign
    from fuzzrunner.settings import Settings
    settings = Settings(max_examples=max_examples, seed=seed, shrink=False, device=device, steer=steer,
                        cpu_triage=False, max_ops=max_ops)
    first: dict = {}

    def note(e):
        if e.kind == "finding":
            f = e.finding
            first.update(n=f.first_found_after_examples, s=f.found_after_s, kind=f.signature.short())
            raise _First()
    start = time.monotonic()
    try:
        run_campaign(spec, settings, faults=(fault,), on_event=note)
    except _First:
        pass
    first["wall"] = time.monotonic() - start
    return first


def _cell(runs: list[dict], limit: int) -> str:
    found = [r for r in runs if "n" in r]
    n = statistics.median([r.get("n", limit) for r in runs])
    s = statistics.median([r["s"] if "n" in r else r["wall"] for r in runs])
    bound = ">=" if len(found) <= len(runs) // 2 else ""
    return f"{len(found)}/{len(runs)} found, median {bound}{n:.0f} ex, {bound}{s:.1f} s"


def _runs(jobs: int, tasks: list[tuple]) -> list[dict]:
    if jobs == 1:
        return [campaign(*t) for t in tasks]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(campaign, *zip(*tasks)))


def _detail(label: str, seeds: list[int], runs: list[dict], limit: int) -> None:
    cells = " ".join(f"{r['n']:>4}/{r['s']:5.1f}s" if "n" in r else f">{limit:>3}/{r['wall']:5.1f}s" for r in runs)
    print(f"    {label:34} seeds {' '.join(map(str, seeds))}: {cells}", flush=True)


def steering(args) -> list[str]:
    rows = []
    for fault in args.faults:
        cells = []
        for steer in (False, True):
            tasks = [("reference_runner", fault, seed, steer, args.max_examples, args.device) for seed in args.seeds]
            runs = _runs(args.jobs, tasks)
            _detail(f"{fault} steer={'on' if steer else 'off'}", args.seeds, runs, args.max_examples)
            cells.append(_cell(runs, args.max_examples))
        rows.append(f"{fault:36} | {cells[0]:44} | {cells[1]}")
    return [f"{'fault (reference_runner)':36} | {'steering off':44} | steering on", "-" * 130, *rows]


def strategy(args) -> list[str]:
    rows = []
    for label, spec, steer in (("flat strategy", FLAT, False), ("stateful builder", "reference_runner", False),
                               ("stateful builder + steering", "reference_runner", True)):
        tasks = [(spec, DEEP, seed, steer, args.deep_max_examples, args.device, args.deep_max_ops)
                 for seed in args.seeds]
        runs = _runs(args.jobs, tasks)
        _detail(label, args.seeds, runs, args.deep_max_examples)
        rows.append(f"{label:36} | {_cell(runs, args.deep_max_examples)}")
    return [f"{DEEP + ' (deep state)':36} | time to find (max_ops {args.deep_max_ops})", "-" * 90, *rows]


def main(argv=None) -> int:
    from fuzzrunner.runner.faults import Faults
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--faults", nargs="+", default=[f for f in Faults.names() if f != DEEP], choices=Faults.names())
    p.add_argument("--max-examples", type=int, default=150, help="cap per steering campaign")
    p.add_argument("--deep-max-examples", type=int, default=300, help="cap per deep-state campaign")
    p.add_argument("--deep-max-ops", type=int, default=8, help="max_ops of the deep-state campaigns (the shortest "
                                                                "path to the fault is 7 ops)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--jobs", type=int, default=1, help="campaigns at once (each is 2 processes)")
    p.add_argument("--part", choices=("steering", "strategy", "both"), default="both")
    args = p.parse_args(argv)
    start, tables = time.monotonic(), []
    if args.part in ("strategy", "both"):
        tables.append(strategy(args))
    if args.part in ("steering", "both"):
        tables.append(steering(args))
    print(f"\n{len(args.seeds)} seeds, --no-shrink, device {args.device}, {time.monotonic() - start:.0f} s in all")
    for t in tables:
        print("\n" + "\n".join(t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
