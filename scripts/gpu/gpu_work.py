"""What a reference_runner case asks of the GPU, plain and under the device shadow (torch.profiler).

Replays the same generated cases (after one untimed pass) without an oracle and with ``--oracle shadow``
(the device mode), under ``torch.profiler``, and prints per case for each mode: kernels run on the GPU
and their summed time, copies and fills by kind, the host's calls that wait for the GPU (synchronisations
and blocking copies), and the host's wall time. With several processes sharing one GPU (a campaign's
workers), the GPU's summed kernel time per case bounds the cases/s of all of them together, and each wait
can sit behind the other processes' work.
With ``--sites``, the same cases run again under ``torch.cuda.set_sync_debug_mode("warn")`` and each wait
torch knows of (``.item()``, ``.cpu()``, a copy from pageable memory, ``unique``...) is counted at its
innermost line outside torch: which waits are the runner's and which the tool's.
Usage: PYTHONPATH=. python scripts/gpu/gpu_work.py [--cases 20] [--seed 7] [--top 12] [--sites]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
          "cuCtxSynchronize", "cudaMemcpy", "cuMemcpyDtoH_v2")


def _tally(prof, n: int) -> dict:
    from torch.autograd import DeviceType
    kernels = collections.Counter()
    kernel_us = collections.Counter()
    api = collections.Counter()
    copies = collections.Counter()
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            name = e.name
            dur = getattr(e, "device_time", None)
            dur = e.cuda_time if dur is None else dur
            if name.startswith(("Memcpy", "Memset")):
                copies[name.split(" (")[0]] += 1
                kernel_us["<copies and fills>"] += dur
            else:
                kernels[name[:60]] += 1
                kernel_us[name[:60]] += dur
        elif e.name.startswith(("cuda", "cu")) and not e.name.startswith("cudnn"):
            api[e.name] += 1
    return {"kernels": kernels, "us": kernel_us, "api": api, "copies": copies, "n": n}


def _print(mode: str, t: dict, wall: float, top: int) -> None:
    n = t["n"]
    nk = sum(t["kernels"].values())
    us = sum(t["us"].values())
    waits = sum(c for name, c in t["api"].items() if name in _WAITS)
    which = ", ".join(f"{k} {c / n:.1f}" for k, c in t["api"].items() if k in _WAITS)
    print(f"\n== {mode}: per case: {nk / n:.0f} kernels, {us / n / 1e3:.2f} ms of GPU time (kernels, copies, "
          f"fills), {waits / n:.1f} host waits ({which}), {1e3 * wall / n:.2f} ms of host wall time (profiled)")
    print("  copies/fills per case: " + ", ".join(f"{k} {c / n:.1f}" for k, c in t["copies"].most_common()))
    print(f"  {'kernel (top by GPU time)':60} {'/case':>7} {'us/case':>9}")
    for name, u in t["us"].most_common(top):
        print(f"  {name:60} {t['kernels'].get(name, 0) / n:7.1f} {u / n:9.1f}")
    print(f"  {'host API call (top by count)':60} {'/case':>7}")
    for name, c in t["api"].most_common(top):
        print(f"  {name:60} {c / n:7.1f}")


def _sites(cases, target, oracles, top: int) -> None:
    """Count each synchronising call at its innermost frame outside torch (per case)."""
    import traceback
    import warnings

    import torch

    from fuzzrunner.execute import run_case
    here = os.sep + "torch" + os.sep
    seen: collections.Counter = collections.Counter()

    def note(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" not in str(message):  # torch's other warnings (one when the debug mode is set)
            return
        own = [f for f in traceback.extract_stack()[:-1] if here not in f.filename and "warnings" not in f.filename]
        f = own[-1] if own else None
        seen[f"{os.path.relpath(f.filename)}:{f.lineno} {f.name}" if f else "?"] += 1

    torch.cuda.synchronize()
    with warnings.catch_warnings():  # (restores showwarning too)
        warnings.simplefilter("always")
        warnings.showwarning = note
        torch.cuda.set_sync_debug_mode("warn")
        seen.clear()  # torch warns once per process as the mode is set (seen on an H200): not a case's
        try:
            for c in cases:
                run_case(c, target, oracles=oracles, device="cuda")
        finally:
            torch.cuda.set_sync_debug_mode("default")
    n = len(cases)
    print(f"  synchronising calls torch reports: {sum(seen.values()) / n:.1f} per case, by site:")
    for site, c in seen.most_common(top):
        print(f"  {c / n:7.1f}  {site}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--sites", action="store_true", help="count the waits by their line (sync debug mode)")
    args = ap.parse_args()
    os.environ.setdefault("FUZZRUNNER_DEVICE", "cuda")
    os.environ["FUZZRUNNER_SHADOW"] = "device"
    from fuzzrunner import _env
    _env.configure()
    import torch
    from gpu_shadow import _cases
    from torch.profiler import ProfilerActivity, profile

    from fuzzrunner.execute import run_case
    from fuzzrunner.target import load_target
    if not torch.cuda.is_available():
        print("gpu_work.py: no CUDA GPU here", file=sys.stderr)
        sys.exit(2)
    target = load_target("reference_runner")
    cases = _cases(args.cases, args.seed)
    modes = {"plain": [], "shadow": ["shadow"]}
    for c in cases:  # compiles
        for oracles in modes.values():
            run_case(c, target, oracles=oracles, device="cuda")
    for mode, oracles in modes.items():
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t = time.perf_counter()
            for c in cases:
                run_case(c, target, oracles=oracles, device="cuda")
            torch.cuda.synchronize()
            wall = time.perf_counter() - t
        _print(mode, _tally(prof, len(cases)), wall, args.top)
        if args.sites:
            _sites(cases, target, oracles, args.top + 8)


if __name__ == "__main__":
    main()
