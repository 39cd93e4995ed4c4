"""Where a real campaign's time goes, per stage: start-up, compile, generate, dispatch, run, each oracle's own
calls, pre-check, findings, triage, report (issue 46, item 1).

    PYTHONPATH=. python3 benchmarks/stage_profile.py [--targets reference_runner vllm_lora sglang_lora]
        [--workers 1 8] [--budget 45] [--max-examples 100000] [--device cpu|cuda] [--seed 4]
        [--oracle numeric ...] [--no-cpu-triage] [--fault NAME ...]

Each row of the plan is one ``fuzzrunner fuzz --stage-times --report r.json`` command (what a user runs),
all in this one run on this machine. The stages come from the timestamps the engine records anyway
(``engine/stages.py``: a ``perf_counter`` pair per stage in the shard, the worker's own breakdown of each
case sent with its result), summed over the shards into the report's ``stage_s``: no profiler, so the
timing is the campaign's. A table per campaign (seconds summed over the shards, % of the campaign's wall,
so with N shards the column adds up to at most N x 100%; ``other``: shard time in no stage, waits), then
one line per campaign with cases/s and its ratio to the first worker count of its target and to the
reference runner's rate at the same worker count.

``run`` holds the oracles' hooks that run inside the case's ops (the CPU shadow's interpreter and dispatch
hooks, the device shadow's instrumented kernels): ``--oracle numeric`` beside the defaults shows their cost.

Measured on the project's 2-core CPU machine (no GPU; Triton's interpreter), shared with other jobs (load
average 15-24), under ``nice -n 10``: CPU numbers only. The GPU's come from ``scripts/gpu_acceptance.py
--part 3`` (its ``stage-profile`` step: 1 and 8 workers of the three targets, ratios in one run). 2026-12-06,
seed 4; the whole tables are in docs/ci.md, "Where the time goes":

    nice -n 10 env PYTHONPATH=. .venv/bin/python benchmarks/stage_profile.py --targets reference_runner \
        --workers 1 2 --budget 60 --device cpu
    nice -n 10 env PYTHONPATH=. .venv/bin/python benchmarks/stage_profile.py --targets vllm_lora --workers 1 \
        --budget 240 --device cpu

    target            workers  cases  wall s  cases/s  the largest stages (% of wall)
    reference_runner  1        22     57.9    0.38     run 71, start-up 12, set-up 11, generate 4
    reference_runner  2        23     58.6    0.39     shard-start 74 (2 x 21 s), run 63, set-up 26, generate 7
    vllm_lora         1        123    229.5   0.54     run 48, set-up 30, start-up 18, generate 3
    vllm_lora (before engine/local_constants.py, budget 120 s)
                      1        6      124.2   0.05     set-up 38, generate 35 (Hypothesis parsing vLLM), start-up 24
    vllm_lora         2        0      285.5   0        set-up 36, shard-start 123 (2 x 175 s): no case in 120 s
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from fuzzrunner.engine.stages import table  # noqa: E402


def campaign(target: str, workers: int, args) -> dict:
    """One ``fuzzrunner fuzz`` command: its report's run, its wall time, its exit status."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        cmd = [sys.executable, "-m", "fuzzrunner", "fuzz", "--target", target, "--workers", str(workers),
               "--seed", str(args.seed), "--max-examples", str(args.max_examples), "--budget", f"{args.budget:g}",
               "--corpus", os.path.join(tmp, "corpus"), "-q", "--stage-times", "--report", report]
        cmd += ["--device", args.device] if args.device else []
        cmd += [a for o in args.oracle or () for a in ("--oracle", o)]
        cmd += [a for f in args.fault or () for a in ("--fault", f)]
        cmd += ["--no-cpu-triage"] if args.no_cpu_triage else []
        t0 = time.monotonic()
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
        wall = time.monotonic() - t0
        try:
            with open(report) as f:
                run = json.load(f)["runs"][0]
        except (OSError, ValueError, KeyError, IndexError):
            return {"error": f"exit {p.returncode}: {p.stderr.strip()[-400:]}", "wall": wall}
    return {"run": run, "wall": wall, "rc": p.returncode}


def cases_of(run: dict) -> int:
    return run["examples"] + len(run["replayed"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", nargs="+", default=["reference_runner", "vllm_lora"])
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--budget", type=float, default=40.0)
    ap.add_argument("--max-examples", type=int, default=100_000)
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--oracle", action="append", help="run only these oracles (repeatable; default: the device's)")
    ap.add_argument("--fault", action="append")
    ap.add_argument("--no-cpu-triage", action="store_true")
    args = ap.parse_args(argv)
    print(f"{os.cpu_count()} CPUs, device {args.device or 'default'}, budget {args.budget:g} s, seed {args.seed}, "
          f"oracles {','.join(args.oracle) if args.oracle else 'default'}")
    rates: dict[tuple[str, int], float] = {}
    failed = 0
    for target in args.targets:
        for w in args.workers:
            r = campaign(target, w, args)
            if "error" in r:
                failed += 1
                print(f"\n== {target}, --workers {w}: no report ({r['error']})")
                continue
            run = r["run"]
            n = cases_of(run)
            rates[(target, w)] = n / r["wall"]
            shards = run["settings"]["workers"]
            print(f"\n== {target}, --workers {w} ({shards} shard(s)), exit {r['rc']}, command wall {r['wall']:.1f} s "
                  f"(campaign {run['duration_s']:.1f} s; the rest: imports, plan, shard start, report)")
            print(table(run.get("stage_s", {}), run["duration_s"], n, shards))
    print("\ncases/s over the command's wall (what a user waits for):")
    for (target, w), rate in rates.items():
        base = rates.get((target, args.workers[0]))
        ref = rates.get(("reference_runner", w))
        print(f"  {target:<18} --workers {w:<3} {rate:7.2f} cases/s"
              f"{f'   x{rate / base:.2f} of --workers {args.workers[0]}' if base and w != args.workers[0] else ''}"
              f"{f'   {rate / ref:.2f} of reference_runner' if ref and target != 'reference_runner' else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
