"""Cases per second when a fraction of cases kill their worker, against the same run with none.

    PYTHONPATH=. python3 benchmarks/crash_throughput.py [--device cpu|cuda] [--cases 100] [--crash 0.2] [--work-ms 200]

``--work-ms``: how long a clean case takes (a reference_runner case is ~200 ms on the CPU; on a GPU
tens of ms). A crash's cost is fixed, so the ratio depends on it: the table says which was used.

A crash costs a start-up of a new worker: a whole one (imports, device), a hand-over to a warm
spare worker (started in the background), a fork of the zygote (imports done once; the device
is initialized after the fork), or both. Each row is one hub running the same sequence of cases
(a fixed, evenly spread set crashes), with and without the spare; the ratio column is the rate
against the clean run of the same mode. Issue 14's bar: >= 50% of the clean rate at 20% crashes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TARGET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_target.py") + ":TARGET"


def _cases(n: int, fraction: float, work_ms: int) -> list:
    from fuzzrunner.case import Case
    every = round(1 / fraction) if fraction else 0
    return [Case("crash_bench", {"work_ms": work_ms},
                 ({"op": "crash" if every and i % every == every - 1 else "work"},)) for i in range(n)]


def _rate(cases: list, device: str, standby: bool, zygote: bool = True) -> tuple[float, int]:
    from fuzzrunner.context import Context
    from fuzzrunner.engine import Hub, WorkerSpec
    with Hub(WorkerSpec(TARGET, Context.of(device)), timeout_s=120.0, standby=standby, zygote=zygote) as hub:
        hub.run(cases[0])  # start-up, not counted
        t0 = time.perf_counter()
        crashes = sum(hub.run(c).crashed for c in cases)
        return len(cases) / (time.perf_counter() - t0), crashes


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--cases", type=int, default=100)
    p.add_argument("--crash", type=float, default=0.2, help="fraction of cases that kill the worker")
    p.add_argument("--work-ms", type=int, default=200, help="the duration of a clean case")
    p.add_argument("--zygote-only", action="store_true",
                   help="only the rows with the zygote (a whole start-up per crash takes long on a GPU)")
    a = p.parse_args()
    if a.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("no CUDA device: run with --device cpu")
            return 0
    clean = _rate(_cases(a.cases, 0.0, a.work_ms), a.device, standby=False)[0]
    print(f"device {a.device}, {a.cases} cases of {a.work_ms} ms, {a.crash:.0%} crashing")
    print(f"{'mode':34} {'crashes':>7} {'cases/s':>9} {'vs clean':>9}")
    print(f"{'clean, one worker':34} {0:7d} {clean:9.2f} {1.0:9.2f}")
    for label, standby, zygote in (("crashing, restart on death", False, False),
                                   ("crashing, warm spare worker", True, False),
                                   ("crashing, forked by the zygote", False, True),
                                   ("crashing, zygote + warm spares", True, True)):
        if a.zygote_only and not zygote:
            continue
        rate, crashes = _rate(_cases(a.cases, a.crash, a.work_ms), a.device, standby, zygote)
        print(f"{label:34} {crashes:7d} {rate:9.2f} {rate / clean:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
