"""Cases per second of a campaign sharded over Ray actors, against the same shards as local processes.

    PYTHONPATH=. python3 benchmarks/ray_scaling.py [--target reference_runner] [--per-shard 40]
                                                    [--shards 1,2] [--device cpu|cuda] [--repeat 1]

Each row is one campaign with no planted fault (so no shrinking: the same work per case) and the
same seed, ``--per-shard`` cases per shard. ``local`` runs the shards as today (``--workers N``:
one process each); ``ray`` runs them as Ray actors on a Ray instance started once here beforehand
(a running cluster: ``ray.init`` is not counted, the actors' start is). ``cases/s`` is end to end
(what a nightly gets: start-up included), ``steady`` is from the first case to the last. The ratio
is Ray against local for the same shard count, measured in this run (modes alternate, so load
from other processes hits both). Issue 17's bar: Ray costs <= 10% of the local rate on one host.

On a GPU machine: ``--device cuda --shards 1`` with one GPU (a Ray shard takes a whole GPU, so a
second one waits for the first, while local shards share GPUs round robin), ``--shards 1,2`` with two.
Ray must be installed there (``pip install 'fuzzrunner[ray]'``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _steady(timeline: list) -> float:
    """Cases per second between the first case and the last (start-up left out)."""
    if len(timeline) < 2:
        return 0.0
    (t0, e0, _), (t1, e1, _) = min(timeline), max(timeline)
    return (e1 - e0) / (t1 - t0) if t1 > t0 else 0.0


def _campaign(target: str, shards: int, per_shard: int, device: str, ray: str | None) -> tuple:
    from fuzzrunner.engine.campaign import run_campaign
    from fuzzrunner.settings import Settings
    settings = Settings(max_examples=shards * per_shard, seed=1, workers=shards, device=device,
                        case_timeout_s=300, cpu_triage=False)
    with tempfile.TemporaryDirectory() as corpus:
        r = run_campaign(target, settings, corpus_dir=corpus, ray=ray)
    if r.errors or r.findings:
        raise SystemExit(f"the benchmark campaign did not run cleanly: {r.errors or [f.id for f in r.findings]}")
    return r.examples, r.duration_s, r.examples / r.duration_s, _steady(r.timeline)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="reference_runner")
    p.add_argument("--per-shard", type=int, default=40, help="cases per shard")
    p.add_argument("--shards", default="1,2", help="shard counts, comma-separated")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--repeat", type=int, default=1, help="campaigns per row (the rates are averaged)")
    a = p.parse_args()
    counts = [int(n) for n in a.shards.split(",")]
    from fuzzrunner import _env
    os.environ["FUZZRUNNER_DEVICE"] = a.device
    _env.configure()
    import ray
    # GPUs: the ones Ray finds (a shard count above them waits for a free one); CPUs: one per shard + the driver.
    ray.init(address="local", num_cpus=max(counts) + 1, num_gpus=None if a.device == "cuda" else 0,
             include_dashboard=False, configure_logging=False)
    try:
        rows = []
        for n in counts:
            runs: dict = {"local": [], "ray": []}
            for _ in range(a.repeat):
                for mode in ("local", "ray"):
                    runs[mode].append(_campaign(a.target, n, a.per_shard, a.device, "auto" if mode == "ray" else None))
            rows.append((n, {m: [sum(x[i] for x in v) / len(v) for i in range(4)] for m, v in runs.items()}))
    finally:
        ray.shutdown()
    print(f"target {a.target}, device {a.device}, {a.per_shard} cases per shard, {a.repeat} campaign(s) per row, "
          f"{os.cpu_count()} CPUs")
    print(f"{'shards':>6} {'mode':>6} {'cases':>6} {'seconds':>8} {'cases/s':>8} {'steady':>7} {'ray/local':>10}")
    for n, modes in rows:
        for mode in ("local", "ray"):
            examples, seconds, rate, steady = modes[mode]
            ratio = rate / modes["local"][2]
            print(f"{n:6d} {mode:>6} {examples:6.0f} {seconds:8.1f} {rate:8.2f} {steady:7.2f} "
                  f"{'' if mode == 'local' else f'{ratio:10.2f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
