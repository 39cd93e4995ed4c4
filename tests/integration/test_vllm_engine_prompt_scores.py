"""``vllm_engine``'s prompt scoring beyond prompt logprobs: vLLM's own ``PromptLogprobsWorker.
compute_prompt_token_id_logprobs`` (``prompt_logprob_token_ids``, 0.31 on) and ``prompt_logprob_start`` (0.31 on
with ids; 0.34 per request index, for prompt logprobs too), driven as ``sample_tokens`` calls them
(targets/vllm_engine/prompt_scores.py, docs/vllm.md). Each oracle both ways: fault-free cases silent, each planted
fault caught on its minimal case (and from scratch, slow); P1 shows on the path's logits rows and is labelled so.
Skipped, with the reason, where the release has no such path (0.15 - 0.28).
"""

import pytest
from test_vllm_engine_target import AVAILABLE, REASON, _found, _fuzz, _kinds, _run, req, step

needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_engine: {REASON}")
LM = {"layers": ["lm_head"]}


def _scoring():
    s = (_found().get("prompt_logprobs") or None) and _found()["prompt_logprobs"].scoring
    if s is None:
        pytest.skip(f"vLLM {_found()['api'].version} scores no prompt token ids (0.31 and later)")
    return s


def _ids(rows: int, flat: list[int]):
    """The release's shape: one list (0.31), or one (ragged: vLLM pads with -1) list per scored row (0.33 on)."""
    return flat if _scoring().ids == "flat" else [flat[:1 + i % len(flat)] for i in range(rows)]


def _cases() -> dict:
    """Base-model requests only (P1 cannot show): ids with prompt logprobs; ids alone over a chunked prefill of 6
    from start 2 (chunks 3, 2, 1); where the start applies to prompt logprobs (0.34), a start with them alone."""
    cases = {
        "ids": [step(dict(req("a", 0, 3, logprobs=True), score_ids=_ids(2, [3, 7])), req("b", 0, 1), seed=1)],
        "chunked": [step(dict(req("a", 0, 3), prompt=6, prompt_start=2, score_ids=_ids(3, [1, 5, 9])), req("b", 0, 2),
                         seed=1), step(req("a", 0, 2), req("b", 0, 1), seed=2), step(req("a", 0, 1), seed=3),
                    step(req("a", 0, 1), seed=4)]}
    if _scoring().start_all:
        cases["start"] = [step(dict(req("a", 0, 4, logprobs=True), prompt=5, prompt_start=2), req("b", 0, 1), seed=1),
                          step(req("a", 0, 1), seed=2)]
    return cases


@needs_vllm
def test_fault_free_prompt_scoring_is_silent():
    for name, ops in _cases().items():
        assert _run(ops, **LM) == [], name


@needs_vllm
def test_p1_shows_on_the_token_id_paths_logits_rows_and_is_labelled_p1():
    """The path takes its logits as compute_prompt_logprobs does, under the sampled rows' mapping (P1,
    vllm-project/vllm#53842): an adapter's prompt rows get the wrong delta."""
    from targets.vllm_engine import known_flags
    from targets.vllm_engine.known import known_id
    _scoring()
    found = _run([step(dict(req("a", 1, 3, logprobs=True), score_ids=_ids(2, [3, 7])), req("b", 0, 2), seed=1)], **LM)
    mine = [v for v in found if "prompt_token_id_logits" in v.tensor]
    assert mine, _kinds(found)
    flags = known_flags(_found())
    assert all(known_id({"violation": {"kind": v.kind, "tensor": v.tensor, "message": v.message,
                                        "details": v.details}, "case": {"config": {}, "ops": []}}, **flags) == "P1"
               for v in mine)


@needs_vllm
def test_p1s_out_of_bounds_form_is_reported_inside_the_token_id_call_and_labelled_p1():
    """Three requests, one scoring its 2-token prompt: the lm_head mapping holds 3 sampled rows, the token-id path's
    logits call 1 row, so vLLM's logits LoRA kernels reach past the call's rows (P1's out-of-bounds form). Each such
    report names the call (``details["region"]``, prompt_logprobs.py), and only so is it P1 (known.py)."""
    from targets.vllm_engine import known_flags
    from targets.vllm_engine.known import known_id
    _scoring()
    ops = [step(dict(req("a", 1, 2), score_ids=_ids(1, [3])), req("b", 0, 1), req("c", 1, 1), seed=1)]
    found = [v for v in _run(ops, max_num_seqs=4, **LM) if v.kind == "out-of-bounds"]
    assert found and all(v.kernel.startswith("_lora_") for v in found), _kinds(found)
    assert {v.details.get("region") for v in found} == {"step.prompt_token_id_logits[0]"}
    flags = known_flags(_found())
    for v in found:
        f = {"signature": {"tool": v.tool}, "violation": v.to_dict(), "case": {"config": LM, "ops": ops}}
        assert known_id(f, **flags) == "P1"
        outside = dict(f, violation=dict(f["violation"], details={k: x for k, x in v.details.items() if k != "region"}))
        assert known_id(outside, **flags) is None


# (fault, its case's name, the tensor its finding names)
FAULTS = {"token_id_scores_previous_row": ("chunked", "step.prompt_token_ids"),
          "prompt_logprob_start_kept": ("reused", "step.prompt_")}


@needs_vllm
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_prompt_scoring_fault_is_caught_and_its_case_is_silent_without_it(fault):
    from targets.vllm_engine import faults
    why = faults.unavailable(_found()).get(fault)
    if why:
        pytest.skip(f"{fault}: {why}")
    name, tensor = FAULTS[fault]
    # reused: a request with a start finishes; the next one takes its index and scores from row 0
    ops = _cases().get(name) or [step(dict(req("a", 0, 3, logprobs=True), prompt_start=1), seed=1),
                                 step(dict(req("b", 0, 3, logprobs=True), score_ids=_ids(2, [3, 7])), finish=["a"],
                                      seed=2)]
    found = _run(ops, (fault,), **LM)
    assert any(v.tensor.startswith(tensor) for v in found), _kinds(found)
    assert _run(ops, **LM) == []


@needs_vllm
@pytest.mark.slow  # a campaign until the fault's finding: minutes on the shared 2-core machine
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_prompt_scoring_fault_is_found_from_scratch_and_not_labelled_known(fault, tmp_path, capsys):
    """Seed 0, at most 300 examples, no seeds (docs/vllm.md gives the counts on 0.34.0)."""
    from targets.vllm_engine import faults
    why = faults.unavailable(_found()).get(fault)
    if why:
        pytest.skip(f"{fault}: {why}")
    code, out, run = _fuzz(tmp_path, capsys, "--fault", fault, "--max-examples", "300", "--seed", "0", "--no-shrink",
                           "--budget", "3000", "--workers", "1")
    mine = [f for f in run["findings"] if f["violation"]["tensor"].startswith(FAULTS[fault][1])]
    assert code == 1 and mine, out
    assert all(not (f["triage"] or {}).get("known") for f in mine), mine
