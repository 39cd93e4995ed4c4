"""Where the device shadow's per-case time goes, on a GPU: the same generated reference_runner cases replayed
in one process, interleaved, under variants of the oracle that each leave a part out:

  * ``plain``: no oracle;
  * ``floor``: the oracle started, its dispatch mode running every op as it is, no kernel instrumented, no
    read-back (what any Python dispatch mode and the oracle's protocol cost);
  * ``no twins``: the full torch side (checks, stamps, read-backs), kernels launched uninstrumented;
  * ``full``: the device shadow as a campaign runs it;
  * ``full, no filter``: ``full`` with every op through the Python mode (no dispatch filter,
    fuzzrunner/oracles/shadow/gpu/dispatch_filter.py);
  * ``full, timed``: ``full`` with the host time of its parts added up (the read-back's wait for the GPU
    apart from the rest of it, the launch hook, the modelled torch ops).

And the GPU's own kernel time per case (torch.profiler's device time of every kernel) of ``plain`` and ``full``.
Usage: PYTHONPATH=. FUZZRUNNER_DEVICE=cuda python scripts/gpu/shadow_breakdown.py [--cases 60] [--seed 7]
       [--profiled 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))


@contextmanager
def _patched(obj, name: str, value):
    own = name in obj.__dict__
    old = obj.__dict__.get(name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if own:
            setattr(obj, name, old)
        else:
            delattr(obj, name)


@contextmanager
def _nothing():
    yield None


def _floor(name: str, stack) -> None:
    """The floor variants: a mode that only runs each op, less the named part."""
    from fuzzrunner.oracles.shadow.gpu import torch_mode
    from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
    class Floor(torch_mode.DeviceTorchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **kwargs) if kwargs else func(*args)

    class Unentered(Floor):  # made, never entered on the case's thread
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None
    stack.enter_context(_patched(GpuShadowOracle, "mode_class", Unentered if name == "floor - mode" else Floor))
    stack.enter_context(_patched(GpuShadowOracle, "_launch", lambda self, kernel, args: None))
    stack.enter_context(_patched(GpuShadowOracle, "_collect", lambda self: None))
    from fuzzrunner import tracking
    from fuzzrunner.oracles.shadow.compiled import CompiledRegions
    from fuzzrunner.oracles.shadow.gpu.launch_hook import LaunchHook
    from fuzzrunner.oracles.shadow.storage_hook import StorageHook
    from fuzzrunner.oracles.shadow.threads import ThreadCoverage
    parts = {"floor - launch hook": LaunchHook, "floor - storage hook": StorageHook,
             "floor - threads": ThreadCoverage, "floor - compiled": CompiledRegions}
    if name in parts:
        stack.enter_context(_patched(parts[name], "install", lambda self: None))
        stack.enter_context(_patched(parts[name], "uninstall", lambda self: None))
    if name == "floor - watcher":
        stack.enter_context(_patched(tracking, "watch", lambda watcher: _nothing()))


def _variant(name: str, spent: dict):
    """A context in which ``replay(..., oracles=["shadow"])`` runs the variant ``name``."""
    from contextlib import ExitStack

    from fuzzrunner.oracles.shadow.gpu import torch_mode
    from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
    stack = ExitStack()
    if name.startswith("floor"):
        _floor(name, stack)
    elif name == "full, no filter":  # every op through the Python mode (dispatch_filter.py off)
        from fuzzrunner.oracles.shadow.gpu import dispatch_filter
        stack.enter_context(_patched(dispatch_filter, "get", lambda: None))
    elif name == "no twins":
        stack.enter_context(_patched(GpuShadowOracle, "_launch", lambda self, kernel, args: None))
    elif name == "full, timed":
        def timed(cls, attr, key):
            inner = cls.__dict__[attr]

            def run(*a, **k):
                t = time.perf_counter()
                try:
                    return inner(*a, **k)
                finally:
                    spent[key] = spent.get(key, 0.0) + time.perf_counter() - t
            stack.enter_context(_patched(cls, attr, run))
        import torch
        real_cpu = torch.Tensor.cpu  # (torch._C.TensorBase's)

        def cpu(self, *a, **k):  # the read-back's copy to the host: its wait for the GPU
            t = time.perf_counter()
            try:
                return real_cpu(self, *a, **k)
            finally:
                spent["read-back wait"] = spent.get("read-back wait", 0.0) + time.perf_counter() - t
        stack.enter_context(_patched(torch.Tensor, "cpu", cpu))
        timed(GpuShadowOracle, "_collect", "read-back (wait included)")
        timed(GpuShadowOracle, "_launch", "launch hook")
        timed(torch_mode.DeviceTorchMode, "_modelled", "modelled torch ops")
        timed(GpuShadowOracle, "on_track", "track")
    return stack


def _kernel_ms(cases, oracles, replay, torch, dev) -> float:
    """The GPU time of every kernel and copy the cases ran, per case (torch.profiler's device events)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for c in cases:
            replay(c, oracles=oracles, device=dev)
        torch.cuda.synchronize()
    total_us = sum(e.self_device_time_total for e in prof.key_averages())
    return total_us / 1e3 / len(cases)


def _profile(cases, replay, dev: str, spent: dict) -> None:
    """cProfile of ``plain`` and ``floor`` over ``cases``."""
    import cProfile
    import pstats
    for v in ("plain", "floor"):
        prof = cProfile.Profile()
        with _variant(v, spent):
            prof.enable()
            for c in cases:
                replay(c, oracles=[] if v == "plain" else ["shadow"], device=dev)
            prof.disable()
        print(f"\n== cProfile, {v}, {len(cases)} cases", flush=True)
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(22)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profiled", type=int, default=10, help="cases run under torch.profiler per mode")
    ap.add_argument("--floor-parts", action="store_true", help="also the floor less each of its parts")
    ap.add_argument("--profile", type=int, default=0, help="cProfile this many cases of plain and of floor")
    args = ap.parse_args()
    os.environ.setdefault("FUZZRUNNER_DEVICE", "cuda")
    os.environ["FUZZRUNNER_SHADOW"] = "device"
    from fuzzrunner import _env
    _env.configure()
    import torch
    dev = os.environ["FUZZRUNNER_DEVICE"]
    if dev == "cuda" and not torch.cuda.is_available():
        raise SystemExit("shadow_breakdown: no CUDA device here (FUZZRUNNER_DEVICE=cpu runs it through the "
                         "interpreter: a check of the script, not a measurement)")
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    from gpu_shadow import _cases

    from fuzzrunner import replay
    cases = _cases(args.cases, args.seed)
    variants = ["plain", "floor", "no twins", "full", "full, no filter", "full, timed"]
    if args.floor_parts:
        variants[2:2] = ["floor - mode", "floor - launch hook", "floor - watcher", "floor - storage hook",
                         "floor - threads", "floor - compiled"]
    spent: dict = {}
    for c in cases:  # compiles, first launches
        replay(c, oracles=[], device=dev)
        replay(c, oracles=["shadow"], device=dev)
    from fuzzrunner.oracles.shadow.gpu import dispatch_filter
    print(f"dispatch filter: {dispatch_filter.status()}")
    times: dict = {v: [] for v in variants}
    for c in cases:
        for v in variants:
            with _variant(v, spent):
                t = time.perf_counter()
                replay(c, oracles=[] if v == "plain" else ["shadow"], device=dev)
                sync()
                times[v].append(time.perf_counter() - t)
    plain = statistics.median(times["plain"])
    where = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {where}; {len(cases)} reference_runner cases "
          f"(seed {args.seed}), interleaved")
    print(f"{'variant':14} {'ms/case':>8} {'x plain':>8} {'mean ms':>8}")
    for v in variants:
        m = statistics.median(times[v])
        print(f"{v:14} {m * 1e3:8.2f} {m / plain:8.2f} {statistics.mean(times[v]) * 1e3:8.2f}")
    if dispatch_filter.get() is not None:
        native, routed = dispatch_filter.get().counts()
        print(f"ops past the mode (native) / sent to it, over the whole run: {native} / {routed}")
    print("host time of the parts in 'full, timed', ms per case (nested: the read-back includes its wait):")
    for k, s in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {k:28} {s / len(cases) * 1e3:8.2f}")
    if args.profile:
        _profile(cases[:args.profile], replay, dev, spent)
    n = min(args.profiled, len(cases))
    if n and dev == "cuda":
        plain_ms, full_ms = (_kernel_ms(cases[:n], o, replay, torch, dev) for o in ([], ["shadow"]))
        print(f"GPU kernel time per case (torch.profiler, {n} cases): plain {plain_ms:.2f} ms, full {full_ms:.2f} ms",
              flush=True)


if __name__ == "__main__":
    main()
