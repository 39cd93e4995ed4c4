"""A campaign's case loop in one process, without the hub: Hypothesis generates reference_runner cases
and each runs through ``execute.run_case`` as a worker runs it. Splits a case's time into generation
(Hypothesis, the strategy, the target's check) and the run (the runner and the oracles), and with
``--profile`` prints where the host's time goes. Started N at once (``--procs``) it shows how cases/s
scale with processes sharing one GPU, as a campaign's workers do.
A clean runner is expected: a case with any violation (a crash included) stops the loop with an error,
since its timings would not be a clean campaign's.
Usage: PYTHONPATH=. python scripts/gpu/campaign_loop.py [--cases 100] [--warm 30]
       [--oracle shadow|none|default|NAME] [--seed 7] [--profile] [--procs 1 | --via-hub]
       [--sched auto|spin|yield|blocking]  (the CUDA context's host-wait policy, scripts/gpu/contention.py)
       [--fault NAME]  (a planted fault of the reference runner: shows the stop at the first violation)
       (on a GPU if there is one, else on the CPU; FUZZRUNNER_DEVICE=cpu|cuda forces one)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def loop(n: int, oracle: str, seed: int, profile: bool, warm: int, faults: tuple = (), sched: str = "auto") -> dict:
    if sched != "auto":
        from contention import set_sched
        set_sched(sched)  # before torch makes the context
    from fuzzrunner import _env
    _env.configure()
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    from fuzzrunner import env_defaults
    from fuzzrunner.context import Context
    from fuzzrunner.execute import run_case
    from fuzzrunner.names import effective_oracles
    from fuzzrunner.target import load_target
    device = os.environ["FUZZRUNNER_DEVICE"]
    context = Context.of(device, shadow=env_defaults.shadow())  # a worker's, on this device
    target = load_target("reference_runner")
    oracles = {"none": [], "default": effective_oracles(None, device, None)}.get(oracle, [oracle])
    strategy = target.strategy(faults, 8, device=device)
    spent = {"run": 0.0, "cases": 0}
    bad: list = []  # the first bad case's violations, then the case (raised after the search: Hypothesis
    #                 would run a raising case again)

    def test(case) -> None:
        if bad:
            return
        target.check_case(case)
        t = time.perf_counter()
        found = run_case(case, target, context=context, oracles=oracles, on_op=lambda i, op: None)
        spent["run"] += time.perf_counter() - t
        if found:
            bad.extend([found, case])
        spent["cases"] += 1

    def search(count: int, s: int) -> None:
        if count <= 0:
            return
        hs = settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
                      suppress_health_check=list(HealthCheck))
        hs(hseed(s)(given(strategy)(test)))()
        if bad:
            found, case = bad
            raise SystemExit(f"campaign_loop: a case gave {len(found)} violation(s), first: {_one(found[0])}; "
                             f"its timings would not be a clean campaign's. The case (fuzzrunner replay FILE):\n"
                             f"{case.to_json()}")

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
    from fuzzrunner import _env
    _env.configure()
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    from fuzzrunner import env_defaults
    from fuzzrunner.context import Context
    from fuzzrunner.engine.hub import Hub, WorkerSpec
    from fuzzrunner.names import effective_oracles
    from fuzzrunner.target import load_target
    device = os.environ["FUZZRUNNER_DEVICE"]
    oracles = {"none": [], "default": effective_oracles(None, device, None)}.get(oracle, [oracle])
    strategy = load_target("reference_runner").strategy((), 8, device=device)
    cases: list = []
    for count, s in ((warm, seed + 1), (n, seed)):
        if count <= 0:
            continue
        hs = settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
                      suppress_health_check=list(HealthCheck))
        hs(hseed(s)(given(strategy)(lambda c: cases.append(c))))()
    context = Context.of(device, shadow=env_defaults.shadow())
    with Hub(WorkerSpec("reference_runner", context), oracles=oracles, timeout_s=300) as hub:
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


def _arguments(oracle: str, faults: list) -> None:
    """Fail on an unknown oracle or fault before Hypothesis starts (one line, not a traceback)."""
    from fuzzrunner.env_defaults import shadow
    from fuzzrunner.errors import InvalidArgument
    from fuzzrunner.names import validate_oracles
    from fuzzrunner.target import load_target
    try:
        if oracle not in ("none", "default"):
            try:
                validate_oracles([oracle])
            except InvalidArgument as e:
                raise InvalidArgument(f"{e} Or: none, default.") from None
        load_target("reference_runner").check_faults(faults)
        shadow()  # a bad FUZZRUNNER_SHADOW
    except InvalidArgument as e:
        raise SystemExit(f"campaign_loop: {e}") from None
    if os.environ.get("FUZZRUNNER_DEVICE") == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("campaign_loop: FUZZRUNNER_DEVICE=cuda, but no CUDA device is here (unset it, or "
                             "FUZZRUNNER_DEVICE=cpu, to loop on the CPU)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--warm", type=int, default=30, help="cases run first (another seed), not timed")
    ap.add_argument("--oracle", default="shadow", help="shadow, none, default (the device's), or an oracle's name")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--procs", type=int, default=1, help="this many loops at once, each its own process")
    ap.add_argument("--via-hub", action="store_true", help="run the cases in a worker process through a Hub")
    ap.add_argument("--sched", choices=["auto", "spin", "yield", "blocking"], default="auto",
                    help="the CUDA context's host-wait policy (CUDA's default: auto)")
    ap.add_argument("--fault", action="append", default=[], help="plant this reference_runner fault (the loop "
                    "then stops at its first violation; not with --via-hub)")
    args = ap.parse_args()
    if args.cases < 1 or args.warm < 0 or args.procs < 1:
        ap.error("--cases and --procs must be at least 1, --warm at least 0")
    if args.via_hub and (args.procs != 1 or args.profile or args.fault or args.sched != "auto"):
        ap.error("--via-hub runs one worker, clean and not profiled: drop --procs, --profile, --fault and --sched")
    _arguments(args.oracle, args.fault)
    if args.via_hub:
        print(json.dumps(via_hub(args.cases, args.oracle, args.seed, args.warm)), flush=True)
        return
    if args.procs == 1:
        print(json.dumps(loop(args.cases, args.oracle, args.seed, args.profile, args.warm, tuple(args.fault),
                              args.sched)),
              flush=True)
        return
    cmd = [sys.executable, __file__, "--cases", str(args.cases), "--warm", str(args.warm), "--oracle", args.oracle,
           "--sched", args.sched]
    cmd += [a for f in args.fault for a in ("--fault", f)]
    env = dict(os.environ, CAMPAIGN_LOOP_BARRIER="1")
    from contention import run_together
    ran = run_together([cmd + ["--seed", str(args.seed + 100 * i)] for i in range(args.procs)], "campaign_loop", env)
    failed = [i for i, (_, rc) in enumerate(ran) if rc]
    if failed:
        raise SystemExit(f"campaign_loop: process(es) {failed} failed (see above): no total")
    outs = [o for o, _ in ran]
    rows = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    print(json.dumps({"procs": args.procs, "cases": sum(r["cases"] for r in rows),
                      "cases_per_s": round(sum(r["cases_per_s"] for r in rows), 2),
                      "run_ms": [r["run_ms"] for r in rows], "rest_ms": [r["rest_ms"] for r in rows]}), flush=True)


if __name__ == "__main__":
    main()
