"""Host cost per torch op of the shadow oracles' torch dispatch, on CPU tensors, in this one run, interleaved.

Columns: ``none`` (no oracle, no mode), ``bare mode`` (a ``TorchDispatchMode`` that only runs the op: the
floor any Python dispatch mode pays, torch's Dynamo-disabling wrapper of its dispatch included), the CPU
oracle, the device mode (fuzzrunner/oracles/shadow/gpu/), and ``torch's wrap``: the device mode with that
wrapper (which it now does without, ``oracles/dynamo_free.py``).
On a GPU, a reference_runner case issues about 1,500 torch ops (an H200 profile: 14,938 dispatches in 10
cases), and the device mode's per-case cost is mostly this Python per op, so these rows are what bound
its per-case ratio there. Rows, each a loop of small ops among
``--tracked`` tracked tensors (typical of a case: about 24 regions):
  * untracked: ``a + 1`` and ``torch.mul`` on untracked tensors (a fresh result each);
  * views: ``a[3:9].view(2, 3).t()`` (no byte read or written: about a third of a case's ops);
  * empty: ``torch.empty(8)`` (tracked as never written, named by its line, freed at once);
  * index: ``index_select`` of an untracked tensor (its indices are bounds-checked, as on a GPU);
  * tracked write: ``add_`` on a tracked tensor (its shadow is stamped);
  * tracked read: ``sum`` of a per-step tracked tensor written in this op (its read is checked).
Usage: PYTHONPATH=. python benchmarks/shadow_dispatch.py [--ops 2000] [--reps 5] [--tracked 24]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("FUZZRUNNER_DEVICE", "cpu")


def _rows(torch, tracking, n_tracked: int) -> dict:
    a, idx = torch.randn(64), torch.randint(0, 64, (16,))
    tracked = [tracking.track(torch.zeros(32), f"t{i}") for i in range(n_tracked)]
    step = tracking.track(torch.zeros(32), "per_step", per_step=True)

    def untracked(i):
        torch.mul(a + 1, 2)

    def view(i):
        a[3:9].view(2, 3).t()

    def empty(i):
        torch.empty(8)

    def index(i):
        a.index_select(0, idx)

    def tracked_write(i):
        tracked[i % n_tracked].add_(1)

    def tracked_read(i):
        step.fill_(1.0)
        step.sum()
    return {"untracked (2 ops)": (untracked, 2), "views (3 ops)": (view, 3), "empty (1 op)": (empty, 1),
            "index (1 op)": (index, 1), "tracked write (1 op)": (tracked_write, 1),
            "tracked read (2 ops)": (tracked_read, 2)}


class _Bare:
    """A dispatch mode that only runs each op, with the oracle protocol's start and finish."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        class Bare(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))
        self.mode = Bare()

    def start(self) -> None:
        self.mode.__enter__()

    def begin_op(self, index: int, op: dict) -> None:
        pass

    def finish(self) -> list:
        self.mode.__exit__(None, None, None)
        return []


def _wrapped_device_mode():
    """The device mode with torch's own Dynamo-disabling wrapper around its dispatch (as before it skipped
    Dynamo itself, oracles/dynamo_free.py): what that wrapper costs per op."""
    from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
    from fuzzrunner.oracles.shadow.gpu.torch_mode import DeviceTorchMode

    class Wrapped(DeviceTorchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return self._dispatch(func, types, args, kwargs)

    class Oracle(GpuShadowOracle):
        mode_class = Wrapped
    return Oracle("cpu")


def _time(make_oracle, name: str, ops: int, n_tracked: int) -> float:
    import torch

    from fuzzrunner import tracking
    oracle = make_oracle()
    if oracle is not None:
        oracle.start()
        oracle.begin_op(0, {"op": "bench"})
    try:
        fn, per = _rows(torch, tracking, n_tracked)[name]
        t = time.perf_counter()
        for i in range(ops):
            fn(i)
        return (time.perf_counter() - t) / (ops * per) * 1e6
    finally:
        if oracle is not None:
            oracle.finish()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--ops", type=int, default=2000, help="loop iterations per row and column")
    ap.add_argument("--reps", type=int, default=5, help="repetitions, interleaved (the median is shown)")
    ap.add_argument("--tracked", type=int, default=24, help="tracked tensors alive (a case has about 24)")
    args = ap.parse_args()
    from fuzzrunner import _env
    _env.configure()
    import torch

    from fuzzrunner.oracles.shadow import ShadowOracle
    from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
    oracles = {"none": lambda: None, "bare mode": _Bare, "CPU oracle": ShadowOracle,
               "device mode": lambda: GpuShadowOracle("cpu"), "torch's wrap": _wrapped_device_mode}
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; us per torch op (median of {args.reps}), "
          f"{args.tracked} tracked tensors")
    print(f"{'row':22} " + " ".join(f"{o:>12}" for o in oracles) + f" {'device/none':>12} {'device/CPU':>11}")
    for name in _rows(torch, __import__("fuzzrunner").tracking, 1):
        got: dict = {o: [] for o in oracles}
        for _ in range(args.reps):  # interleaved
            for o, make in oracles.items():
                got[o].append(_time(make, name, args.ops, args.tracked))
        med = {o: statistics.median(v) for o, v in got.items()}
        print(f"{name:22} " + " ".join(f"{med[o]:12.1f}" for o in oracles) +
              f" {med['device mode'] / med['none']:11.1f}x {med['device mode'] / med['CPU oracle']:10.1f}x", flush=True)
    print("Each row: microseconds per torch op, Python plus the oracle's own torch ops (here on CPU tensors). On a "
          "GPU each of the device\nmode's own ops is a kernel launch (an index op's bounds check, a tracked write's "
          "stamp), which adds to these rows there.")


if __name__ == "__main__":
    main()
