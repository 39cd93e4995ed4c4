"""Where a reference_runner case's time goes under the device shadow, against plain runs (a GPU).

Replays the same generated cases (after one untimed pass) in these modes, interleaved per case:
  * ``plain``: no oracle;
  * ``bare``: no oracle, under a dispatch mode that only runs each op (the floor any Python mode pays);
  * ``shadow``: ``--oracle shadow``, the device mode;
  * ``noref`` (``--hide-reference``): shadow, with the float64 reference model's ops hidden from every
    dispatch mode (what they cost the mode; the target computes its reference inside
    ``tracking.quiet()``, where the device mode steps aside).
and prints per case op kind (step, dummy_run, capture, ...) the median and the mean ms per case in each
mode (each op timed from a synchronised start to a synchronised end, in every mode alike), then per
shadow case what the oracle did and how long its parts took (timed wrappers, which add their own
cost: dispatches, launches, tables made, read-backs, torch-side read checks; a part's time includes
the ops it runs).
Usage: PYTHONPATH=. python scripts/gpu/op_costs.py [--cases 30] [--seed 7] [--hide-reference]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

_PARTS = (("torch_mode.DeviceTorchMode", "_dispatch", "dispatch (incl. the op)"),
          ("torch_mode.DeviceTorchMode", "_modelled", "  modelled ops (tracked memory)"),
          ("torch_mode.DeviceTorchMode", "_read", "    read checks (_read)"),
          ("torch_mode.DeviceTorchMode", "_write", "    write stamps (_write)"),
          ("torch_mode.DeviceTorchMode", "_bounds", "  index bounds"),
          ("torch_mode.DeviceTorchMode", "_allocations", "  allocations"),
          ("oracle.GpuShadowOracle", "_launch", "launch plans (_launch)"),
          ("regions.DeviceShadow", "table", "  tables (made or reused)"),
          ("oracle.GpuShadowOracle", "_collect", "read-backs (_collect)"),
          ("oracle.GpuShadowOracle", "check_read", "check_epochs launches"))


def _time_parts(parts: dict) -> None:
    """Wrap the oracle's parts in timers adding to ``parts[label] = [calls, seconds]``."""
    import importlib
    for where, name, label in _PARTS:
        module, cls = where.split(".")
        owner = getattr(importlib.import_module(f"fuzzrunner.oracles.shadow.gpu.{module}"), cls)
        f = getattr(owner, name)

        def timed(*a, _f=f, _label=label, **k):
            t = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                p = parts[_label]
                p[0] += 1
                p[1] += time.perf_counter() - t
        setattr(owner, name, timed)


def _time_ops(session, kinds: dict, mode: list, sync) -> None:
    """Time each case op (synchronised at both ends) into ``kinds[op kind][mode]``."""
    apply = session.apply

    def timed_apply(self, op):
        sync()
        t = time.perf_counter()
        try:
            return apply(self, op)
        finally:
            sync()
            kinds[op["op"]][mode[0]].append(time.perf_counter() - t)
    session.apply = timed_apply


def _hide_reference(rr, hidden: list) -> None:
    """While ``hidden[0]``: the reference model and its adapters' weights run with no dispatch mode."""
    from torch.utils._python_dispatch import _disable_current_modes

    import fuzzrunner.runner.reference_model as rm

    def hide(f):
        def g(*a, **k):
            if not hidden[0]:
                return f(*a, **k)
            with _disable_current_modes():
                return f(*a, **k)
        return g
    rm.ReferenceModel.forward = hide(rm.ReferenceModel.forward)
    rr.make_adapter = hide(rr.make_adapter)


def _print(modes, totals: dict, kinds: dict, parts: dict, n: int, seed: int, device: str) -> None:
    print(f"{n} cases (seed {seed}) on {device}; ms per case, median (mean)")
    for m in modes:
        print(f"  {m:8} {1e3 * statistics.median(totals[m]):8.2f} ({1e3 * sum(totals[m]) / n:8.2f})")
    print(f"\n{'op kind':14} {'count':>6} " + " ".join(f"{m + ' med':>11} {m + ' /case':>12}" for m in modes))
    for k, by in sorted(kinds.items(), key=lambda kv: -sum(kv[1]["shadow"])):
        print(f"{k:14} {len(by['shadow']):6} " + " ".join(
            f"{1e3 * statistics.median(by[m] or [0]):11.3f} {1e3 * sum(by[m]) / n:12.3f}" for m in modes))
    runs = n * sum(1 for m in modes if m in ("shadow", "noref"))
    print(f"\n{'shadow part (per shadow run)':36} {'calls':>8} {'ms':>8} {'us/call':>8}")
    for label, (cnt, secs) in parts.items():
        print(f"{label:36} {cnt / runs:8.1f} {1e3 * secs / runs:8.2f} {1e6 * secs / max(cnt, 1):8.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=30)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--hide-reference", action="store_true", help="add the 'noref' mode (see above)")
    args = ap.parse_args()
    os.environ.setdefault("FUZZRUNNER_DEVICE", "cuda")
    os.environ["FUZZRUNNER_SHADOW"] = "device"
    from fuzzrunner import _env
    _env.configure()
    import torch
    from gpu_shadow import _cases
    from torch.utils._python_dispatch import TorchDispatchMode

    from fuzzrunner.context import Context
    from fuzzrunner.execute import run_case
    from fuzzrunner.target import load_target

    device = "cuda" if torch.cuda.is_available() else "cpu"
    context = Context.of(device, shadow="device")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    target = load_target("reference_runner")
    rr = sys.modules[target.run.__module__]
    kinds: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    parts: dict = collections.defaultdict(lambda: [0, 0.0])
    mode, hidden = ["plain"], [False]
    _time_ops(rr._Session, kinds, mode, sync)
    _time_parts(parts)
    if args.hide_reference:
        _hide_reference(rr, hidden)
    modes = ("plain", "bare", "shadow") + (("noref",) if args.hide_reference else ())

    class Bare(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def run(c, m: str) -> float:
        mode[0], hidden[0] = m, m == "noref"
        t = time.perf_counter()
        if m == "bare":
            with Bare():
                run_case(c, target, oracles=[], context=context)
        else:
            run_case(c, target, oracles=["shadow"] if m in ("shadow", "noref") else [], context=context)
        sync()
        return time.perf_counter() - t

    cases = _cases(args.cases, args.seed)
    for c in cases:  # compiles
        for m in ("plain", "shadow"):
            run(c, m)
    kinds.clear()
    parts.clear()
    totals: dict = collections.defaultdict(list)
    for c in cases:
        for m in modes:
            totals[m].append(run(c, m))
    _print(modes, totals, kinds, parts, len(cases), args.seed, device)


if __name__ == "__main__":
    main()
