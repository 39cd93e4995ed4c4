"""What bounds N processes sharing one GPU: synthetic loops, each in its own process, started together.
Workloads (one iteration each):
  host   pure Python work (about --host-us microseconds), no GPU: how the host's cores scale
  sync   --kernels tiny kernels on a small CUDA tensor, then one .item() (a host wait), as the runner does
  mixed  the host work, then the sync work
  async  the host work, then the kernels, with one wait every 50 iterations only
Every workload runs with 1, 2, 4, ... --procs processes; the table gives iterations/s over all of them and
the ratio to one process. If `sync` stops scaling while `host` scales, the GPU (switching between the
processes' contexts) bounds, not the host's cores. --sched sets the CUDA context's host-wait policy in
each process before torch touches the GPU (spin, yield, blocking; auto is CUDA's default).
Usage: python scripts/gpu/contention.py [--procs 8] [--seconds 4] [--kernels 3] [--host-us 200]
       [--sched auto|spin|yield|blocking] [--workloads host,sync,mixed]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SCHED = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}  # CU_CTX_SCHED_*


def set_sched(name: str) -> None:
    """The primary context's wait policy; must run before torch creates that context."""
    if name == "auto":
        return
    from cuda.bindings import driver as d
    (err,) = d.cuInit(0)
    assert err == d.CUresult.CUDA_SUCCESS, err
    err, dev = d.cuDeviceGet(0)
    assert err == d.CUresult.CUDA_SUCCESS, err
    (err,) = d.cuDevicePrimaryCtxSetFlags(dev, SCHED[name])
    assert err == d.CUresult.CUDA_SUCCESS, f"cuDevicePrimaryCtxSetFlags: {err}"


def _host(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    x = 0
    while time.perf_counter() < end:
        x += 1


def worker(workload: str, seconds: float, kernels: int, host_us: float, sched: str) -> None:
    set_sched(sched)
    import torch
    x = torch.zeros(256, device="cuda") if workload != "host" else None

    count = [0]

    def once() -> None:
        if workload in ("host", "mixed", "async"):
            _host(host_us)
        if x is not None:
            for _ in range(kernels):
                x.add_(1)
            count[0] += 1
            if workload != "async" or count[0] % 50 == 0:
                x[0].item()

    for _ in range(50):
        once()
    print("warm", flush=True)
    sys.stdin.readline()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        once()
        n += 1
    print(json.dumps({"its_per_s": n / (time.perf_counter() - t0)}), flush=True)


def run_together(cmds: list[list[str]], what: str, env: dict | None = None) -> list:
    """Start every command, wait until each has printed "warm", then let them all go at once (a line on
    their stdin); their outputs, or SystemExit when one stopped while warming up. None is left running."""
    ps = [subprocess.Popen(c, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) for c in cmds]
    try:
        for i, p in enumerate(ps):
            assert p.stdout is not None
            if p.stdout.readline().strip() != "warm":
                raise SystemExit(f"{what}: process {i} stopped while warming up (exit {p.wait()})")
        for p in ps:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        return [(p.communicate()[0], p.returncode) for p in ps]
    finally:
        for p in ps:  # one stopped: the others are not left running with nobody reading them
            if p.poll() is None:
                p.kill()
                p.wait()


def together(procs: int, args: argparse.Namespace, workload: str) -> float:
    cmd = [sys.executable, __file__, "--worker", workload, "--seconds", str(args.seconds), "--kernels",
           str(args.kernels), "--host-us", str(args.host_us), "--sched", args.sched]
    outs = run_together([cmd] * procs, f"contention ({workload})")
    return sum(json.loads(o.strip().splitlines()[-1])["its_per_s"] for o, _ in outs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--kernels", type=int, default=3)
    ap.add_argument("--host-us", type=float, default=200.0)
    ap.add_argument("--sched", choices=sorted(SCHED), default="auto")
    ap.add_argument("--workloads", default="host,sync,mixed")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.seconds, args.kernels, args.host_us, args.sched)
        return
    counts = [n for n in (1, 2, 4, 8, 16, 32) if n < args.procs] + [args.procs]
    loads = args.workloads.split(",")
    print(f"== contention: {os.cpu_count()} CPUs, sched {args.sched}, {args.kernels} kernels + 1 wait per sync "
          f"iteration, host work {args.host_us:.0f} us; iterations/s over all processes (x one process)")
    print(f"{'procs':>6} " + " ".join(f"{w:>18}" for w in loads))
    base: dict = {}
    for n in counts:
        cells = []
        for w in loads:
            r = together(n, args, w)
            base.setdefault(w, r)
            cells.append(f"{r:10.0f} ({r / base[w]:4.1f}x)")
        print(f"{n:>6} " + " ".join(f"{c:>18}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
