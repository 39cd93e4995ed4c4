"""The device shadow on cuda names a runner's ``tracking.region`` in its reports (known.py's P1 out-of-bounds form).

The device mode reads its ring back once per op; a region (vllm_engine opens one around each prompt-path logits
call) is read back at its edges so that a kernel's bad access inside it names it (``details["region"]``). On the CPU
this is tests/unit/test_gpu_shadow_instrument.py's ``..._names_it_in_both_modes``; here the same program, compiled
Triton on cuda: a per-step buffer written for 8, 5, 4 rows and a kernel reading 8, 6, 5 rows, the second op's
launch inside ``tracking.region("step.prompt_logits[0]")``. Expected, one line each (OK or UNEXPECTED), then
``SHADOW-REGION: PASS|FAIL``:

  inside     a stale read of slots[5] in op 1, with ``region`` = step.prompt_logits[0];
  outside    a stale read of slots[4] in op 2, without a region;
  nothing    no other report.

No vLLM needed; about 20 s (compilation). Usage: python3 scripts/gpu/shadow_region.py [--device cpu]
(``--device cpu``: the same in Triton's interpreter, here)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DEVICE = sys.argv[2] if sys.argv[1:2] == ["--device"] else "cuda"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # before Triton's import
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from fuzzrunner import track, tracking  # noqa: E402
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle  # noqa: E402


@triton.jit
def _gather(slots, table, out, n, W: tl.constexpr, B: tl.constexpr):
    i = tl.arange(0, B)
    s = tl.load(slots + i, mask=i < n, other=0)
    w = tl.arange(0, W)
    row = tl.load(table + s[:, None] * W + w[None, :], mask=(i < n)[:, None])
    tl.store(out + i[:, None] * W + w[None, :], row, mask=(i < n)[:, None])


def main() -> int:
    dev = DEVICE
    o = GpuShadowOracle(dev)
    o.start()
    try:
        slots = track(torch.empty(8, dtype=torch.int32, device=dev), "slots", per_step=True, initialized=False)
        table = track(torch.arange(32, dtype=torch.float32, device=dev).reshape(4, 8), "table")
        out = torch.zeros(8, 8, device=dev)
        for op, (written, n, region) in enumerate([(8, 8, None), (5, 6, "step.prompt_logits[0]"), (4, 5, None)]):
            o.begin_op(op, {"op": "step"})
            slots[:written] = 1
            if region:
                with tracking.region(region):
                    _gather[(1,)](slots, table, out, n, W=8, B=8)
            else:
                _gather[(1,)](slots, table, out, n, W=8, B=8)
            o.end_op()
    finally:
        vs = o.finish()
    got = [(v.kind, v.tensor, v.details.get("op_index"), tuple(v.details.get("element", ())), v.details.get("region"))
           for v in vs]
    checks = [("inside", ("stale-read", "slots", 1, (5,), "step.prompt_logits[0]") in got),
              ("outside", ("stale-read", "slots", 2, (4,), None) in got),
              ("nothing", len(got) == 2)]
    for name, ok in checks:
        print(f"{'OK' if ok else 'UNEXPECTED'}  {name}" + ("" if ok else f": got {got}"), flush=True)
    good = all(ok for _, ok in checks)
    print(f"SHADOW-REGION: {'PASS' if good else 'FAIL'}", flush=True)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
