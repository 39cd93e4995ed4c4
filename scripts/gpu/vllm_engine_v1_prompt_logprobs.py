"""vllm_engine's V1-runner prompt logprobs on a GPU: vLLM's own ``GPUModelRunner._get_prompt_logprobs_dict``
(targets/vllm_engine/v1_prompt_logprobs.py), with host memory pinned as vLLM pins it there (``PIN_MEMORY``),
``_sync_device`` a CUDA synchronize and the logits LoRA kernels compiled, against the CPU's oracles. One child process
runs five cases from tests/integration/test_vllm_engine_v1_prompt_logprobs.py on the carried 0.33.0 tree and prints one
line each: expected, got, OK or UNEXPECTED; the last line is ``VLLM-ENGINE-V1-PROMPT-LOGPROBS: PASS|FAIL``.

* every kind of prompt row (a chunked prefill, whole prompts, decodes beside them, finished requests, a dummy batch)
  of base-model requests: silent;
* the same rows with adapters, lm_head outside ``target_modules``, in FULL_AND_PIECEWISE graph replays: silent;
* ``v1_prompt_rows_shifted`` planted: a state violation of ``step.prompt_logprobs``;
* P1's V1 form (vllm-project/vllm#51594): a 3-token prompt of adapter 1 beside a request of adapter 2, a mismatch in
  ``step.prompt_logits[0].adapter_rows``;
* the same with both requests on adapter 1 (the mapping is right for its rows): silent.

Needs the vLLM tree (``python3 scripts/gpu_acceptance.py --steps vllm-tree``), or ``--device cpu`` here (Triton's
interpreter). Usage: python3 scripts/gpu/vllm_engine_v1_prompt_logprobs.py [--device cpu]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
import vllm_engine_moe  # noqa: E402  (its child process and verdicts)
from acceptance_tools import ROOT  # noqa: E402


def plan() -> list[tuple[str, dict, tuple | None]]:
    """(name, case, the (kind, tensor) expected among its violations; None: silent)."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))  # the test's own imports
    t = vllm_engine_moe._test_module("test_vllm_engine_v1_prompt_logprobs.py")
    base = {**t.BASE, **t.EAGER}
    lm = dict(base, layers=["lm_head"])
    return [
        ("base-model rows", {"config": dict(base, layers=t.LAYERS), "ops": t.rows(0), "faults": []}, None),
        ("adapters, lm_head filtered out, graphs",
         {"config": dict(base, layers=t.LAYERS, **t.NO_LM_HEAD, cudagraph_mode="FULL_AND_PIECEWISE"),
          "ops": t.rows(1), "faults": []}, None),
        ("v1_prompt_rows_shifted", {"config": lm, "ops": t.SHIFT, "faults": ["v1_prompt_rows_shifted"]},
         ("state-violation", "step.prompt_logprobs")),
        ("P1's V1 form", {"config": lm, "ops": t.P1_V1, "faults": []},
         ("numeric-mismatch", "step.prompt_logits[0].adapter_rows")),
        ("one adapter", {"config": lm, "ops": t.ONE_ADAPTER, "faults": []}, None),
    ]


if __name__ == "__main__":
    sys.exit(vllm_engine_moe.main(runs_of=plan, tag="VLLM-ENGINE-V1-PROMPT-LOGPROBS", doc=__doc__))
