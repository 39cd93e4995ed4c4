"""vllm_engine's 3D-format MoE LoRA compiled on a GPU: vLLM's FusedMoE3DWithLoRA as shipped (a model flagged
``is_3d_moe_weight``, adapters in PEFT's stacked 3D layout; targets/vllm_engine/moe.py, adapters.py).

CPU campaigns draw the 3D format; GPU campaigns do not yet (moe.DEVICES_3D), until this passes on the GPU image (the
carried 0.33.0 tree, vLLM's fused-MoE LoRA Triton kernels compiled with one fused w13 slice).

One child process runs four cases from tests/integration/test_vllm_engine_moe3d.py on the device and prints one line
each: expected, got, OK or UNEXPECTED; the last line is ``VLLM-ENGINE-MOE3D: PASS|FAIL``.

* fault-free: adapters with and without expert weights (an rsLoRA one), a base request, a removal, a dummy run: silent;
* ``fused_moe_3d_swaps_gate_up``, ``activation_keeps_missing_modules``, ``set_lora_keeps_old_weights`` planted: a
  numeric mismatch in ``step.experts.adapter_rows``.

Needs the vLLM tree (``python3 scripts/gpu_acceptance.py --steps vllm-tree``), or ``--device cpu`` here (Triton's
interpreter; a few minutes on the 2-core machine). Usage: python3 scripts/gpu/vllm_engine_moe3d.py [--device cpu]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parent), str(HERE.parents[2] / "tests" / "integration")]
from vllm_engine_moe import _test_module, main  # noqa: E402


def plan() -> list[tuple[str, dict, tuple | None]]:
    """(name, case, the (kind, tensor) expected among its violations; None: silent)."""
    t = _test_module("test_vllm_engine_moe3d.py")
    config = {**t.CONFIG, "moe": t.MOE_3D}
    runs: list[tuple[str, dict, tuple | None]] = [("fault-free", {"config": config, "ops": t.FAULT_FREE, "faults": []},
                                                   None)]
    for fault in sorted(t.MOE_3D_FAULT_CASES):
        ops, extra, tensor = t.MOE_3D_FAULT_CASES[fault]
        runs.append((fault, {"config": {**config, **extra}, "ops": ops, "faults": [fault]},
                     ("numeric-mismatch", tensor)))
    return runs


if __name__ == "__main__":
    sys.exit(main(runs_of=plan, tag="VLLM-ENGINE-MOE3D", doc=__doc__))
