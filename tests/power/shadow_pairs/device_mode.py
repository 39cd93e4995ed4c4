"""The pair suite under the shadow oracle's device mode (fuzzrunner/oracles/shadow/gpu/): on the CPU
through Triton's interpreter, on a GPU compiled, with the programs' tensors on that device.

Scoreboard, side by side with the CPU oracle's verdicts where those are computed too:
    PYTHONPATH=.:tests/power python -m shadow_pairs.device_mode [cuda|cpu] [--cpu-too] [-v]
"""

from __future__ import annotations

import collections
import sys
import traceback

import torch

from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle

from . import GPU_PAIRS, PAIRS, harness

# Pairs whose CPU verdict the device mode does not reproduce, by design or not yet (docs/shadow.md,
# "On the GPU": what it cannot see). Every other pair of DEVICE_CAUSES must be exact.
NOT_ON_DEVICE = {
    "adapter_slice_read_past_its_end": "registered sub-buffer bounds are CPU-only",
    "pointer_array_of_adapters": "memory reached through a pointer array, neither argument nor tracked",
    "triton_garbage_pointer_slot": "memory reached through a pointer array, neither argument nor tracked",
    "device_tensor_descriptor": "tensor descriptors: named as unchecked",
    "host_tensor_descriptor": "tensor descriptors: named as unchecked",
    "triton_descriptor_per_program_tile": "tensor descriptors: named as unchecked",
    "block_pointer_load": "block pointers: named as unchecked",
    "worker_reads_numpy_view": "numpy views (host memory) are not followed by the device mode",
    "select_fill_column": "its bad read is a CPU tensor's tolist() (host memory): not followed by the device mode",
}
# Not run on a GPU: numpy views of device tensors do not exist; the thread pairs are followed by the
# device mode (threads.ThreadCoverage, exact on the CPU) but have not run on a GPU yet.
HOST_ONLY = ("host", "threads")
DEVICE_CAUSES = ("triton", "tracking-api", "oob-index", "out-variants", "metadata", "style-metadata", "fx",
                 "style-adapters")
# Exact under the device mode on the CPU too, not yet run on a GPU (their Library.impl ops are
# registered for the CPU only, so on cuda they test the pair, not the oracle).
CPU_CAUSES = DEVICE_CAUSES + ("custom-op", "style-vllm-v2", "compiled", "indexed-read", "indexed-write", "adversarial",
                              "allocation", "threads")


def run(program, bug: bool, device: str):
    """(violations, crash traceback or None) of one program under the device mode on ``device``."""
    oracle = GpuShadowOracle(device)
    # The programs' tensors on ``device``. set_default_device leaves a global device mode behind even when
    # "restored" to the CPU (it then changed later tests: numpy reads of tracked tensors went unseen), so
    # it is set only off the CPU, and undone with None.
    moved = device != "cpu"
    if moved:
        torch.set_default_device(device)
    oracle.start()
    crash = None
    try:
        ctx = harness.Ctx(oracle)
        ctx.step()
        program(ctx, bug)
    except Exception:  # noqa: BLE001  (a result of its own, as in harness.run)
        crash = traceback.format_exc()
    finally:
        vs = oracle.finish()
        if moved:
            torch.set_default_device(None)
    return vs, crash


def verdict(p: harness.Pair, device: str) -> tuple[str, str]:
    saved = harness.run
    harness.run = lambda program, bug: run(program, bug, device)  # type: ignore[assignment]
    try:
        return harness.verdict(p)
    finally:
        harness.run = saved


def main(argv: list[str]) -> None:
    device = next((a for a in argv if a in ("cpu", "cuda")), "cuda" if torch.cuda.is_available() else "cpu")
    cpu_too, verbose = "--cpu-too" in argv, "-v" in argv
    table: dict = collections.defaultdict(collections.Counter)
    same = 0
    skipped = 0
    pairs = PAIRS + (GPU_PAIRS if device == "cuda" else [])
    for p in pairs:
        if device == "cuda" and p.cause in HOST_ONLY:
            skipped += 1
            continue
        v, why = verdict(p, device)
        cpu = harness.verdict(p)[0] if cpu_too else "exact"  # the CPU oracle: 245/245 exact (docs/shadow.md)
        same += v == cpu
        table[p.cause][v] += 1
        if verbose and v != "exact":
            print(f"{v:7} {p.cause:14} {p.name}: {why.strip().splitlines()[-1][:200] if why else ''}", flush=True)
    cols = ("exact", "missed", "wrong", "noisy", "crash")
    print(f"device mode on {device}; verdicts equal to the CPU oracle's: {same}/{len(pairs) - skipped} "
          f"({skipped} pairs of {', '.join(HOST_ONLY)} not run on cuda)")
    print(f"{'cause':22} {'pairs':>5} " + " ".join(f"{c:>6}" for c in cols))
    total: collections.Counter = collections.Counter()
    for cause, c in sorted(table.items()):
        total.update(c)
        print(f"{cause:22} {sum(c.values()):5} " + " ".join(f"{c[k]:6}" for k in cols))
    print(f"{'all':22} {sum(total.values()):5} " + " ".join(f"{total[k]:6}" for k in cols))


if __name__ == "__main__":
    main(sys.argv[1:])
