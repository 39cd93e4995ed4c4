"""GPU campaigns with crashing faults: one CPU pre-check at a time vs several at once (shards).

    PYTHONPATH=. python3 benchmarks/precheck_parallel.py [--faults padding_not_mapped dummy_run_skips_mapping]
        [--seeds 7 11] [--examples 200] [--workers 1 0]      # 0: the default (a quarter of the CPUs, <= 8)

Once a GPU campaign knows a crash, each new case is first run on a CPU worker under the shadow oracle,
and one that would only re-hit the known crash is not sent to the GPU (engine/search.py). One search
waits for one pre-check at a time; ``--precheck-workers N`` searches in N shards on the GPU, so N
pre-checks run at once on the host's spare cores. Each row is one `fuzzrunner fuzz --device cuda`
campaign of the reference runner, all in this one run, on this machine. Needs a GPU.
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


def _campaign(fault: str, seed: int, examples: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        cmd = [sys.executable, "-m", "fuzzrunner", "fuzz", "--target", "reference_runner", "--device", "cuda",
               "--fault", fault, "--seed", str(seed),
               "--max-examples", str(examples), "--budget", "600", "--corpus", os.path.join(tmp, "c"), "-q",
               "--report", report] + (["--precheck-workers", str(workers)] if workers else [])
        t0 = time.monotonic()
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=ROOT))
        wall = time.monotonic() - t0
        try:
            run = json.load(open(report))["runs"][0]
        except (OSError, ValueError, KeyError, IndexError):
            return {"error": f"exit {p.returncode}: {p.stderr.strip()[-300:]}", "wall": wall}
    return {"campaign_s": run["duration_s"], "wall": wall, "examples": run["examples"],
            "generated": run["generated"], "skips": run["known_crash_skips"], "findings": len(run["findings"]),
            "shards": run["settings"]["workers"], "restarts": run["worker_restarts"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--faults", nargs="+", default=["padding_not_mapped", "dummy_run_skips_mapping"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[7])
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 0])
    args = ap.parse_args()
    print(f"reference_runner on cuda, {args.examples} examples each, {os.cpu_count()} CPUs")
    print(f"{'fault':<26}{'seed':>5}{'pre-checks':>11}{'shards':>7}{'campaign s':>11}{'wall s':>8}"
          f"{'examples':>9}{'skipped':>8}{'restarts':>9}{'findings':>9}")
    for fault in args.faults:
        for seed in args.seeds:
            base = None
            for w in args.workers:
                r = _campaign(fault, seed, args.examples, w)
                if "error" in r:
                    print(f"{fault:<26}{seed:>5}{w or 'auto':>11}  {r['error']}")
                    continue
                base = base or r["campaign_s"]
                print(f"{fault:<26}{seed:>5}{w or 'auto':>11}{r['shards']:>7}{r['campaign_s']:>11.1f}{r['wall']:>8.1f}"
                      f"{r['examples']:>9}{r['skips']:>8}{r['restarts']:>9}{r['findings']:>9}"
                      + (f"   {base / r['campaign_s']:.2f}x" if r["campaign_s"] != base else ""))


if __name__ == "__main__":
    main()
