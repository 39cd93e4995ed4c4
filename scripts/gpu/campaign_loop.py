"""A campaign's case loop in one process, without the hub: Hypothesis generates reference_runner cases
and each runs through ``execute.run_case`` as a worker runs it. Splits a case's time into generation
(Hypothesis, the strategy, the target's check) and the run (the runner and the oracles), and with
``--profile`` prints where the host's time goes. Started N at once (``--procs``) it shows how cases/s
scale with processes sharing one GPU, as a campaign's workers do.
A clean runner is expected: a case with any violation (a crash included) stops the loop with an error,
since its timings would not be a clean campaign's.
Usage: PYTHONPATH=. python scripts/gpu/campaign_loop.py [--cases 100] [--warm 30]
       [--oracle shadow|none|default|NAME] [--seed 7] [--profile] [--procs 1 | --via-hub]
       (FUZZRUNNER_DEVICE=cpu for the CPU; cuda by default)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def loop(n: int, oracle: str, seed: int, profile: bool, warm: int) -> dict:
    os.environ.setdefault("FUZZRUNNER_DEVICE", "cuda")
    from fuzzrunner import _env
    _env.configure()
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    from fuzzrunner.execute import run_case
    from fuzzrunner.names import effective_oracles
    from fuzzrunner.target import load_target
    device = os.environ["FUZZRUNNER_DEVICE"]
    target = load_target("reference_runner")
    oracles = {"none": [], "default": effective_oracles(None, device, None)}.get(oracle, [oracle])
    strategy = target.strategy((), 8)
    spent = {"run": 0.0, "cases": 0}

    def test(case) -> None:
        target.check_case(case)
        t = time.perf_counter()
        found = run_case(case, target, oracles=oracles, device=device, sanitizer=None, on_op=lambda i, op: None)
        spent["run"] += time.perf_counter() - t
        if found:
            raise SystemExit(f"campaign_loop: a case gave {len(found)} violation(s), first: {_one(found[0])}; "
                             "its timings would not be a clean campaign's")
        spent["cases"] += 1

    def search(count: int, s: int) -> None:
        if count <= 0:
            return
        hs = settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
                      suppress_health_check=list(HealthCheck))
        hs(hseed(s)(given(strategy)(test)))()

    search(warm, seed + 1)  # compiles, the first launches
    if os.environ.get("CAMPAIGN_LOOP_BARRIER"):  # --procs: all start timing together
        print("warm", flush=True)
        sys.stdin.readline()
    spent.update(run=0.0, cases=0)
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    search(n, seed)
    total = time.perf_counter() - t0
    if prof is not None:
        import pstats
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(30)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(35)
    c = max(spent["cases"], 1)
    return {"cases": spent["cases"], "s": round(total, 3), "cases_per_s": round(spent["cases"] / total, 2),
            "run_ms": round(spent["run"] / c * 1e3, 2), "rest_ms": round((total - spent["run"]) / c * 1e3, 2)}


def via_hub(n: int, oracle: str, seed: int, warm: int) -> dict:
    """The same kind of cases run through a Hub (a real worker process, as a campaign's shard runs them):
    generated first, then timed one by one from sending the case to reading its result."""
    os.environ.setdefault("FUZZRUNNER_DEVICE", "cuda")
    from fuzzrunner import _env
    _env.configure()
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    from fuzzrunner.engine.hub import Hub, WorkerSpec
    from fuzzrunner.names import effective_oracles
    from fuzzrunner.target import load_target
    device = os.environ["FUZZRUNNER_DEVICE"]
    oracles = {"none": [], "default": effective_oracles(None, device, None)}.get(oracle, [oracle])
    strategy = load_target("reference_runner").strategy((), 8)
    cases: list = []
    for count, s in ((warm, seed + 1), (n, seed)):
        if count <= 0:
            continue
        hs = settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
                      suppress_health_check=list(HealthCheck))
        hs(hseed(s)(given(strategy)(lambda c: cases.append(c))))()
    with Hub(WorkerSpec("reference_runner", device=device), oracles=oracles, timeout_s=300) as hub:
        for c in cases[:-n]:
            _clean(hub.run(c))
        times = []
        for c in cases[-n:]:
            t = time.perf_counter()
            result = hub.run(c)
            times.append(time.perf_counter() - t)
            _clean(result)
        restarts = hub.restarts + hub.recycles
    import statistics
    return {"cases": n, "hub_ms_median": round(statistics.median(times) * 1e3, 2),
            "hub_ms_mean": round(statistics.mean(times) * 1e3, 2), "max_ms": round(max(times) * 1e3, 1),
            "restarts": restarts}


def _one(v) -> str:
    return f"{v.kind} of {v.tensor or '?'} in {v.kernel or '?'} ({v.message.splitlines()[0] if v.message else ''})"


def _clean(result) -> None:
    if result.violations:
        raise SystemExit(f"campaign_loop: a case gave {len(result.violations)} violation(s), first: "
                         f"{_one(result.violations[0])}; its timings would not be a clean campaign's")


def _oracles(name: str) -> None:
    """Fail on an unknown oracle before Hypothesis starts (one line, not a traceback from inside a test)."""
    from fuzzrunner.errors import InvalidArgument
    from fuzzrunner.names import validate_oracles
    if name not in ("none", "default"):
        try:
            validate_oracles([name])
        except InvalidArgument as e:
            raise SystemExit(f"campaign_loop: {e}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--warm", type=int, default=30, help="cases run first (another seed), not timed")
    ap.add_argument("--oracle", default="shadow", help="shadow, none, default (the device's), or an oracle's name")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--procs", type=int, default=1, help="this many loops at once, each its own process")
    ap.add_argument("--via-hub", action="store_true", help="run the cases in a worker process through a Hub")
    args = ap.parse_args()
    if args.cases < 1 or args.warm < 0 or args.procs < 1:
        ap.error("--cases and --procs must be at least 1, --warm at least 0")
    if args.via_hub and (args.procs != 1 or args.profile):
        ap.error("--via-hub runs one worker and is not profiled: drop --procs and --profile")
    _oracles(args.oracle)
    if args.via_hub:
        print(json.dumps(via_hub(args.cases, args.oracle, args.seed, args.warm)), flush=True)
        return
    if args.procs == 1:
        print(json.dumps(loop(args.cases, args.oracle, args.seed, args.profile, args.warm)), flush=True)
        return
    cmd = [sys.executable, __file__, "--cases", str(args.cases), "--warm", str(args.warm), "--oracle", args.oracle]
    env = dict(os.environ, CAMPAIGN_LOOP_BARRIER="1")
    procs = [subprocess.Popen(cmd + ["--seed", str(args.seed + 100 * i)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for i in range(args.procs)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "warm"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    rows = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    print(json.dumps({"procs": args.procs, "cases": sum(r["cases"] for r in rows),
                      "cases_per_s": round(sum(r["cases_per_s"] for r in rows), 2),
                      "run_ms": [r["run_ms"] for r in rows], "rest_ms": [r["rest_ms"] for r in rows]}), flush=True)


if __name__ == "__main__":
    main()
