"""A ``vllm_engine`` campaign labels the findings that are vLLM's known bugs (``known.label``, the target's
``known_bugs``; fuzzrunner/engine/known.py): the report and the summary say "known: V1 ..." for V1 met through the V2
runner's own graph capture and dispatch, and leave a planted fault's finding unlabelled. The two cases are the
campaign's corpus cases (replayed first; the fault's case file names it), so the campaign meets both at once."""

import json
import re

import pytest
from test_vllm_engine_target import AVAILABLE, CONFIG, REASON, _found, req, step
from test_vllm_engine_v2_graphs import GRAPHS, MIXED

from fuzzrunner.case import Case

needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_engine: {REASON}")
# a base-model request asking for prompt logprobs: the planted fault's rows (no adapter, so not P1)
UNSHIFTED = [step(req("a", 0, 3, logprobs=True), req("b", 0, 1), seed=1)]


@needs_vllm
def test_a_campaign_labels_v1_as_known_and_leaves_a_planted_fault_unlabelled(tmp_path, capsys):
    from fuzzrunner.cli import main
    if _found().get("v2_graphs") is None or _found().get("prompt_logprobs") is None:
        pytest.skip(f"vLLM {_found()['api'].version}: no V2-runner graph cases (0.24 and later)")
    seeds = tmp_path / "c" / "cases" / "vllm_engine"
    seeds.mkdir(parents=True)
    (seeds / "v1.json").write_text(Case("vllm_engine", {**CONFIG, **GRAPHS, "specialize_active_lora": True},
                                        tuple(MIXED), ()).to_json())
    (seeds / "unshifted.json").write_text(Case("vllm_engine", {**CONFIG, "layers": ["lm_head"],
                                                               "num_speculative_tokens": 0}, tuple(UNSHIFTED),
                                               ("prompt_token_ids_unshifted",)).to_json())
    code = main(["fuzz", "--target", "vllm_engine", "--fault", "prompt_token_ids_unshifted", "--max-examples", "1",
                 "--seed", "0", "--no-shrink", "--workers", "1", "--corpus", str(tmp_path / "c"),
                 "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr()
    text = out.out + out.err
    findings = json.loads((tmp_path / "r.json").read_text())["runs"][0]["findings"]
    known = {f["violation"]["tensor"]: (f["triage"] or {}).get("known", {}).get("id") for f in findings}
    assert code == 1 and known.get("replay.qkv_proj.adapter_rows") == "V1", (known, text)
    assert known.get("step.prompt_logprobs.token_ids", "absent") is None, (known, text)
    assert re.search(r"\d+ findings?, (all known|\d+ new or untriaged) \(\d+ known bugs?: [^)]*V1", text), text  # summary
    assert "known: V1: with specialize_active_lora" in text, text
