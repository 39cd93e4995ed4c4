"""Where a campaign's first seconds go: N hubs started at once (as N shards start), each running the
same generated reference_runner cases, timed from the hub's creation.

Per hub: when its worker was ready (the zygote's imports, the fork, the CUDA context: ``hub.run``'s first
call less the case), then the first case's time (first launches: kernels loaded from Triton's cache or
compiled, instrumented twins made), then the next cases one by one, until they run at a steady time.
Printed per mode: the medians over the hubs, and the cases all hubs had done by 5, 10, 15 and 20 s.
The hubs run in threads of this process (each waits on its worker's socket), as a campaign's shards
run in processes: their start-ups compete for the host's CPUs and the GPU as a campaign's do.
Usage: PYTHONPATH=. python scripts/gpu/startup.py [--hubs 8] [--cases 40] [--modes shadow,none,cpu-shadow]
       [--spares]  (keep the warm spare each GPU hub keeps in a campaign: its start competes too)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def _cases(n: int, seed: int, device: str) -> list:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    from fuzzrunner.target import load_target
    strategy = load_target("reference_runner").strategy((), 8, device=device)
    out: list = []
    hs = settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None,
                  suppress_health_check=list(HealthCheck))
    hs(hseed(seed)(given(strategy)(lambda c: out.append(c))))()
    return out


def _hub(device: str, oracles: list, cases: list, t0: float, out: dict, spares: bool) -> None:
    from fuzzrunner.context import Context
    from fuzzrunner.engine.hub import Hub, WorkerSpec
    done: list = []
    try:
        with Hub(WorkerSpec("reference_runner", Context.of(device)), oracles=oracles, timeout_s=300,
                 standby=spares if device == "cuda" else False) as hub:
            first = None
            for c in cases:
                t = time.perf_counter()
                r = hub.run(c)
                end = time.perf_counter()
                if first is None:  # the worker's start is inside the first run: the case's own time is r.seconds
                    first = (end - t - r.seconds, r.seconds)
                done.append((end - t0, r.seconds))
                if r.violations:
                    out["error"] = f"a case gave {len(r.violations)} violation(s): {r.violations[0].kind}"
                    return
        out.update(ready=first[0] if first else None, first=first[1] if first else None, done=done)
    except Exception as e:  # noqa: BLE001 - printed with the row
        out["error"] = f"{type(e).__name__}: {e}"


def measure(mode: str, hubs: int, cases: list, spares: bool) -> str:
    device = "cpu" if mode.startswith("cpu-") else "cuda"
    oracle = mode.removeprefix("cpu-")
    oracles = [] if oracle == "none" else [oracle]
    outs: list[dict] = [{} for _ in range(hubs)]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=_hub, args=(device, oracles, cases, t0, outs[i], spares)) for i in range(hubs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [o["error"] for o in outs if "error" in o]
    errors += [f"a hub ran {len(o.get('done', []))} of {len(cases)} cases" for o in outs
               if "error" not in o and len(o.get("done", [])) < 2]
    if errors:
        return f"{mode:12} {hubs:4}  failed: {errors[0]}"
    ready = statistics.median(o["ready"] for o in outs)
    first = statistics.median(o["first"] for o in outs)
    second = statistics.median(o["done"][1][1] for o in outs)
    steady = statistics.median(s for o in outs for _, s in o["done"][len(cases) // 2:])
    at = [sum(1 for o in outs for end, _ in o["done"] if end <= s) for s in (5, 10, 15, 20)]
    return (f"{mode:12} {hubs:4} {ready:8.2f} {first:8.2f} {second * 1e3:9.1f} {steady * 1e3:9.1f}   "
            + " ".join(f"{a:5}" for a in at))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hubs", default="1,8", help="comma-separated: hubs started at once, each count in turn")
    ap.add_argument("--cases", type=int, default=40, help="cases per hub (the same for every hub)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--modes", default="shadow,none,cpu-shadow",
                    help="comma-separated: an oracle on cuda (none: no oracle), or cpu-ORACLE on the CPU")
    ap.add_argument("--spares", action="store_true", help="GPU hubs keep their warm spare worker, as in a campaign")
    args = ap.parse_args()
    if args.cases < 2:
        ap.error("--cases must be at least 2 (the first case's time and the next are shown apart)")
    from fuzzrunner import _env
    _env.configure()
    cases = _cases(args.cases, args.seed, _env.device_type())  # (the reference runner draws alike on both)
    print(f"{len(cases)} cases per hub, {os.cpu_count()} CPUs; ready: s until the worker could take the first "
          f"case; first/second/steady: that case's run (s, ms, ms: the median of the second half); done by: the "
          f"cases all hubs had run after 5, 10, 15, 20 s", flush=True)
    print(f"{'mode':12} {'hubs':>4} {'ready s':>8} {'first s':>8} {'second ms':>9} {'steady ms':>9}   "
          f"done by:  5 s  10 s  15 s  20 s", flush=True)
    for mode in args.modes.split(","):
        for hubs in (int(h) for h in args.hubs.split(",")):
            print(measure(mode, hubs, cases, args.spares), flush=True)


if __name__ == "__main__":
    main()
