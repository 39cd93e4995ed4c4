"""Cost of the CPU pre-check of a GPU campaign, with and without stopping at the first bad op.

    PYTHONPATH=. python3 benchmarks/precheck.py [--fault dummy_run_skips_mapping] [--cases 40] [--seed 3]

Once a GPU campaign knows a crash, every new case runs first on a CPU worker under the shadow
oracle, and one whose first bad op shows the known crash's root cause is skipped (it would only
kill a GPU worker again). The pre-check is then paid on every case, so its speed bounds the
campaign's. A GPU dies at its first bad read, so the pre-check only needs to run up to the first
op with a violation (``Hub(stop_early=True)``). This runs the same generated cases of the
reference runner through both, on the CPU, and prints seconds per case and whether both agree on
each case's first root causes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cases(fault: str, n: int, seed: int) -> list:
    """The first ``n`` cases Hypothesis generates for the fault (no shrinking, no database)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    from fuzzrunner.target import load_target
    out: list = []
    strategy = load_target("reference_runner").cases((fault,), max_ops=8)
    hs = settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None,
                  suppress_health_check=list(HealthCheck))
    def keep(case) -> None:
        out.append(case)

    hs(hseed(seed)(given(strategy)(keep)))()
    return out[:n]


def _run(cases: list, stop_early: bool) -> tuple[float, list]:
    from fuzzrunner.context import Context
    from fuzzrunner.engine import Hub, WorkerSpec
    from fuzzrunner.finding import group
    spec = WorkerSpec("reference_runner", Context.of("cpu"))
    with Hub(spec, oracles=("shadow",), timeout_s=300.0, standby=False, stop_early=stop_early) as hub:
        hub.run(cases[0])  # start-up, not counted
        t0, heads = time.perf_counter(), []
        for c in cases:
            vs = hub.run(c).violations
            first = min((v.details.get("op_index") or 0 for v in vs), default=None)
            heads.append({h.signature.id for h, _ in group([v for v in vs if v.details.get("op_index") == first])})
        return (time.perf_counter() - t0) / len(cases), heads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fault", default="dummy_run_skips_mapping")
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    cases = _cases(args.fault, args.cases, args.seed)
    full_s, full_heads = _run(cases, stop_early=False)
    early_s, early_heads = _run(cases, stop_early=True)
    bad = sum(bool(h) for h in full_heads)
    agree = sum(a == b for a, b in zip(full_heads, early_heads))
    print(f"fault {args.fault}, {len(cases)} generated cases (seed {args.seed}), {bad} with a violation, CPU")
    print(f"{'pre-check':<28}{'s/case':>10}")
    print(f"{'whole case':<28}{full_s:>10.3f}")
    print(f"{'up to the first bad op':<28}{early_s:>10.3f}")
    print(f"speed-up {full_s / early_s:.2f}x; first-bad-op root causes agree on {agree}/{len(cases)} cases")


if __name__ == "__main__":
    main()
