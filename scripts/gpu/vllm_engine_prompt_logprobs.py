"""vllm_engine's prompt logprobs compiled on a GPU: vLLM's own PromptLogprobsWorker (prompt_logprobs.py).

The worker's Triton token-id kernel (``_prompt_logprobs_token_ids_kernel``) compiled, its chunks through vLLM's
``LogitsProcessorWithLoRA`` on cuda, against the CPU's oracles. One child process runs four cases from
tests/integration/test_vllm_engine_target.py and docs/findings/cases/ on the device and prints one line each:
expected, got, OK or UNEXPECTED; the last line is ``VLLM-ENGINE-PROMPT-LOGPROBS: PASS|FAIL``.

* base-model requests asking for prompt logprobs: silent;
* the same with ``prompt_token_ids_unshifted`` planted: a numeric mismatch in ``step.prompt_logprobs.token_ids``;
* a chunked prefill (the prompt's last chunk one token): silent on 0.21 and later (the carried 0.33.0);
* P1's case (docs/findings/cases/p1_prompt_logprobs_mapping.json): vLLM's P1, a mismatch in
  ``step.prompt_logits[0].adapter_rows``;
* prompt scoring (prompt_scores.py, 0.31 on: the carried 0.33.0 takes one id list per scored row): base-model
  requests with ``prompt_logprob_token_ids`` from a start over a chunked prefill, silent (the worker's
  ``compute_token_logprobs`` Triton kernel compiled); the same with ``token_id_scores_previous_row`` planted: a
  numeric mismatch in ``step.prompt_token_ids.scores``.

Needs the vLLM tree (``python3 scripts/gpu_acceptance.py --steps vllm-tree``), or ``--device cpu`` here (Triton's
interpreter). Usage: python3 scripts/gpu/vllm_engine_prompt_logprobs.py [--device cpu]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
import vllm_engine_moe  # noqa: E402  (its child process and verdicts)
from acceptance_tools import ROOT  # noqa: E402


def plan() -> list[tuple[str, dict, tuple | None]]:
    """(name, case, the (kind, tensor) expected among its violations; None: silent)."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))  # the test's own imports
    t = vllm_engine_moe._test_module("test_vllm_engine_target.py")
    ops, config, want = t.FAULT_CASES["prompt_token_ids_unshifted"]
    p1 = json.loads((ROOT / "docs/findings/cases/p1_prompt_logprobs_mapping.json").read_text())
    scores = [t.step(dict(t.req("a", 0, 3), prompt=6, prompt_start=2, score_ids=[[1], [5, 9], [9, 1, 5]]),
                     t.req("b", 0, 2), seed=1), t.step(t.req("a", 0, 2), t.req("b", 0, 1), seed=2),
              t.step(t.req("a", 0, 1), seed=3), t.step(t.req("a", 0, 1), seed=4)]
    lm = {**t.CONFIG, "layers": ["lm_head"]}
    return [("prompt token-id scores", {"config": lm, "ops": scores, "faults": []}, None),
            ("token_id_scores_previous_row", {"config": lm, "ops": scores, "faults": ["token_id_scores_previous_row"]},
             ("numeric-mismatch", "step.prompt_token_ids.scores")),
            ("base-model prompt logprobs", {"config": {**t.CONFIG, **config}, "ops": ops, "faults": []}, None),
            ("prompt_token_ids_unshifted", {"config": {**t.CONFIG, **config}, "ops": ops,
                                            "faults": ["prompt_token_ids_unshifted"]}, want),
            ("chunked prefill", {"config": {**t.CONFIG, "layers": ["lm_head"]}, "ops": t.CHUNKED, "faults": []}, None),
            ("P1", {"config": p1["config"], "ops": p1["ops"], "faults": []},
             ("numeric-mismatch", "step.prompt_logits[0].adapter_rows"))]


if __name__ == "__main__":
    sys.exit(vllm_engine_moe.main(runs_of=plan, tag="VLLM-ENGINE-PROMPT-LOGPROBS", doc=__doc__))
