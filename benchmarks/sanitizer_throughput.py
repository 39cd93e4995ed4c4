"""Cases per second on a GPU: a plain worker, one persistent sanitized worker, a sanitizer process per case.

    PYTHONPATH=. python3 benchmarks/sanitizer_throughput.py [--tool initcheck] [--cases 200] [--per-process 5]

Every case is one ``lora_shrink`` launch of the ``lora_kernels`` target, clean, so any
violation printed is a false positive (or a bug). The persistent modes are timed after a
first case (start-up, kernel compile), reported apart; a process per case is timed whole,
start-up included, since that is what it costs. Exits 0 with a message where there is no
GPU or no compute-sanitizer.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ["FUZZRUNNER_DEVICE"] = "cuda"  # before fuzzrunner loads: compiled kernels in every worker
os.environ.pop("TRITON_INTERPRET", None)

CONFIG = {"max_loras": 2, "max_num_tokens": 16, "hidden": 32, "rank": 8, "slices": [32], "dtype": "float32"}


def cases(n: int) -> list:
    from fuzzrunner.case import Case
    return [Case("lora_kernels", CONFIG, ({"op": "launch", "kernel": "shrink", "slots": [0, 1, -1, 0],
                                           "pad": i % 3, "seed": i % 8},)) for i in range(n)]


def persistent(spec, todo: list, oracles) -> dict:
    from fuzzrunner.engine.hub import Hub
    t0 = time.perf_counter()
    with Hub(spec, oracles=oracles, timeout_s=600) as hub:
        first = hub.run(todo[0])
        t1 = time.perf_counter()
        results = [hub.run(c) for c in todo]
        t2 = time.perf_counter()
    return {"startup_s": t1 - t0, "seconds": t2 - t1, "n": len(todo), "results": [first] + results}


def per_process(spec, todo: list, oracles) -> dict:
    from fuzzrunner.engine.hub import Hub
    t0, results = time.perf_counter(), []
    for c in todo:
        with Hub(spec, oracles=oracles, timeout_s=600) as hub:
            results.append(hub.run(c))
    return {"startup_s": 0.0, "seconds": time.perf_counter() - t0, "n": len(todo), "results": results}


def row(name: str, r: dict) -> str:
    rate = r["n"] / r["seconds"] if r["seconds"] else float("inf")
    bad = sum(bool(x.violations) for x in r["results"])
    return (f"{name:<34} {r['n']:>6} {r['seconds']:>9.2f} {rate:>9.1f} {1000 * r['seconds'] / r['n']:>9.1f} "
            f"{r['startup_s']:>9.1f} {bad:>5}"), rate


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tool", default="initcheck", choices=["initcheck", "memcheck", "racecheck", "synccheck"])
    p.add_argument("--cases", type=int, default=200, help="cases for each persistent worker")
    p.add_argument("--per-process", type=int, default=5, help="cases run with a sanitizer process each")
    p.add_argument("--oracles", default="invariants", help="comma-separated worker oracles (the same in every mode)")
    args = p.parse_args(argv)

    from fuzzrunner.errors import SanitizerNotFound
    from fuzzrunner.sanitizer import find_sanitizer, gpu_available, sanitizer_wrapper
    if not gpu_available():
        print("sanitizer_throughput: no CUDA device is visible; nothing to measure (run it on a GPU machine).")
        return 0
    try:
        s = find_sanitizer()
    except SanitizerNotFound as e:
        print(f"sanitizer_throughput: {e}")
        return 0
    from fuzzrunner.context import Context
    from fuzzrunner.engine.hub import WorkerSpec
    oracles = tuple(o for o in args.oracles.split(",") if o)
    wrapper, env = sanitizer_wrapper(args.tool, sanitizer=s)
    plain = WorkerSpec("lora_kernels", Context.of("cuda"))
    sanitized = WorkerSpec("lora_kernels", Context.of("cuda"), wrapper=wrapper, env=env)
    print(f"compute-sanitizer {s.version} at {s.path}; tool {args.tool}; oracles {','.join(oracles) or 'none'}")
    print(f"wrapper: {' '.join(wrapper)}")

    runs = [("plain worker", persistent(plain, cases(args.cases), oracles)),
            (f"{args.tool}, one persistent worker", persistent(sanitized, cases(args.cases), oracles)),
            (f"{args.tool}, a process per case", per_process(sanitized, cases(args.per_process), oracles))]
    print(f"\n{'mode':<34} {'cases':>6} {'seconds':>9} {'cases/s':>9} {'ms/case':>9} {'start s':>9} {'bad':>5}")
    rates = {}
    for name, r in runs:
        line, rates[name] = row(name, r)
        print(line)
    names = [n for n, _ in runs]
    print(f"\npersistent / per-process: {rates[names[1]] / rates[names[2]]:.0f}x; "
          f"sanitized / plain (persistent): {rates[names[0]] / rates[names[1]]:.1f}x slower")
    for name, r in runs:
        for x in r["results"]:
            for v in x.violations[:3]:
                print(f"  [{name}] case {x.case_no}: {v.signature.short()}: {v.message[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
