"""The V1 runner's prompt logprobs (vLLM's ``GPUModelRunner._get_prompt_logprobs_dict``, up to 0.33:
targets/vllm_engine/v1_prompt_logprobs.py) and its runtime dummy batch (E1's range on the V1 side).

The planted fault ``v1_prompt_rows_shifted`` has a minimal case its oracle catches and that is silent without it
(both ways); fault-free, every kind of row the runner feeds the path is silent where P1 cannot show (base-model rows,
adapters without lm_head weights); P1's V1 form (vllm-project/vllm#51594) shows where a request's prompt rows meet
another request's lm_head adapter, labelled P1. Skipped where vLLM is not set up, or the release has no V1 runner.
"""

import json

import pytest
from test_vllm_engine_target import AVAILABLE, CONFIG, REASON, ROOT, _found, _fuzz, _kinds, _run, req, step
from test_vllm_engine_v1_runner import EAGER, _needs_v1

needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_engine: {REASON}")
BASE = dict(CONFIG)  # the base config (test_vllm_engine_target.py's), also scripts/gpu/vllm_engine_v1_prompt_logprobs.py's


def chunk(rid, lora, tokens, prompt):
    """A new request asking for prompt logprobs whose prompt is ``prompt`` tokens, ``tokens`` of them now."""
    return dict(req(rid, lora, tokens, logprobs=True), prompt=prompt)


def rows(x: int) -> list:
    """Every kind of row, fault-free: a chunked prefill (a: 2 + 3 of 5), whole prompts (b, d), a decode beside a
    prompt (c), requests finished and their records reused (e), a dummy batch between steps; a and c of adapter ``x``,
    the others base-model rows."""
    return [step(chunk("a", x, 2, 5), req("b", 0, 3, logprobs=True), req("c", x, 1), seed=1),
            step(req("a", x, 3), req("b", 0, 1), req("d", 0, 2, logprobs=True), seed=2),
            {"op": "dummy_run", "num_tokens": 2, "reqs": 1, "pad": 0, "seed": 0},
            step(req("c", x, 1), chunk("e", 0, 3, 4), finish=["a", "b", "d"], seed=3),
            step(req("e", 0, 1), req("c", x, 1), seed=4)]


# where P1 cannot show: base-model rows only (the logits' LoRA kernels skip a batch without adapters), or adapters
# everywhere with lm_head outside the deployment filter (no LoRA on the logits); in eager steps, with the reorder,
# and in graph replays (the prompt rows' logits run outside the graph)
NO_LM_HEAD = {"target_modules": ["qkv_proj"]}  # the merged layer by its own name (0.19's filter: not its slices)
CLEAN = [(0, {}), (1, NO_LM_HEAD), (1, dict(NO_LM_HEAD, reorder_threshold=1)),
         (1, dict(NO_LM_HEAD, cudagraph_mode="FULL_AND_PIECEWISE", specialize_active_lora=False)),
         (0, {"cudagraph_mode": "PIECEWISE"})]
LAYERS = ["qkv_proj", "lm_head"]


@needs_vllm
@pytest.mark.parametrize("adapter, knobs", CLEAN)
def test_every_kind_of_prompt_row_is_silent_fault_free_where_p1_cannot_show(adapter, knobs):
    _needs_v1()
    import inspect

    from vllm.config.lora import LoRAConfig
    if "target_modules" in knobs and "target_modules" not in inspect.signature(LoRAConfig).parameters:
        pytest.skip(f"vLLM {_found()['api'].version} has no --lora-target-modules (#34984): lm_head is always wrapped, "
                    f"so adapters in a prompt step show P1")
    assert _run(rows(adapter), layers=LAYERS, **{**EAGER, **knobs}) == []


@needs_vllm
def test_p1s_v1_form_also_reads_past_a_short_calls_rows():
    """The same rows with adapter 3 (no lm_head weights of its own, yet a slot in the lm_head mapping): a call of one
    request's 2 prompt rows under a 3-row mapping, so vLLM's logits LoRA kernels read past the call's rows (the shadow
    oracle's out-of-bounds, inside the call: P1 by ``known.py``'s region rule, as on the V2 runner)."""
    _needs_v1()
    from targets.vllm_engine import known, known_flags
    found = _run(rows(3), layers=LAYERS, **EAGER)
    oob = [v for v in found if v.kind == "out-of-bounds"]
    assert oob and {v.kind for v in found} <= {"out-of-bounds", "numeric-mismatch"}, found
    for v in oob:
        finding = {"violation": {"tool": v.tool, "kind": v.kind, "kernel": v.kernel, "tensor": v.tensor,
                                 "message": v.message, "details": dict(v.details)},
                   "case": {"config": {"runner": "v1"}, "ops": rows(3)}}
        assert known.known_id(finding, **known_flags(_found())) == "P1", v


SHIFT = [step(req("a", 0, 3, logprobs=True), req("b", 0, 3, logprobs=True), seed=1)]


@needs_vllm
def test_the_shifted_rows_fault_is_caught_and_its_case_is_silent_without_it():
    """Both ways: each prompt position scored one row late leaves request a's first position without its logits."""
    _needs_v1()
    found = _run(SHIFT, ("v1_prompt_rows_shifted",), layers=["lm_head"], **EAGER)
    assert ("state-violation", "step.prompt_logprobs") in _kinds(found), found
    assert _run(SHIFT, layers=["lm_head"], **EAGER) == []
    before = _found()["v1"].prompt_logprobs.runner_class.__dict__["_get_prompt_logprobs_dict"]
    _run(SHIFT, ("v1_prompt_rows_shifted",), layers=["lm_head"], **EAGER)
    assert _found()["v1"].prompt_logprobs.runner_class.__dict__["_get_prompt_logprobs_dict"] is before


P1_V1 = [step(req("a", 1, 3, logprobs=True), req("b", 2, 2), seed=1)]
ONE_ADAPTER = [step(req("a", 1, 3, logprobs=True), req("b", 1, 2), seed=1)]


@needs_vllm
def test_p1s_v1_form_a_requests_prompt_rows_get_the_other_requests_lm_head_adapter():
    """vLLM's ``_get_prompt_logprobs_dict`` takes request a's 2 prompt rows through ``compute_logits`` under the step's
    lm_head mapping, one row per request ([1, 2]): a's second row gets adapter 2's delta (P1's V1 form, #51594). With
    both requests of adapter 1 the same mapping is right for a's rows: silent. Labelled P1, not where the V1 runner
    maps its prompt rows (#51597)."""
    _needs_v1()
    from targets.vllm_engine import known, known_flags
    ops = P1_V1
    found = _run(ops, layers=["lm_head"], **EAGER)
    assert ("numeric-mismatch", "step.prompt_logits[0].adapter_rows") in _kinds(found), found
    v = next(v for v in found if v.tensor == "step.prompt_logits[0].adapter_rows")
    finding = {"violation": {"tool": v.tool, "kind": v.kind, "tensor": v.tensor, "message": v.message,
                             "details": {"op_index": 0}}, "case": {"config": {"runner": "v1"}, "ops": ops}}
    flags = known_flags(_found())
    assert flags["v1_prompt_rows_mapped"] is False  # as shipped: no release up to 0.33 has #51597
    assert known.known_id(finding, **flags) == "P1"
    assert known.known_id(finding, **dict(flags, v1_prompt_rows_mapped=True)) is None
    assert _run(ONE_ADAPTER, layers=["lm_head"], **EAGER) == []


@needs_vllm
def test_prompt_logprobs_run_unpinned_as_vllms_pin_memory_is_answered(monkeypatch):
    """``LogprobsTensors.empty_cpu`` pins where ``vllm.v1.outputs.PIN_MEMORY`` says (0.29 - 0.33; no pinning before),
    which a CPU-only torch refuses: the target answers it as it answers every module's ``PIN_MEMORY``
    (``vllm_env.unpin_host_memory``). Pinned, the case crashes; unpinned again by the same call, it is silent."""
    _needs_v1()
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA torch pins host memory: nothing to answer")
    import vllm.v1.outputs as outputs

    from targets.vllm_engine import vllm_env
    if not hasattr(outputs, "PIN_MEMORY"):
        pytest.skip(f"vLLM {_found()['api'].version}'s LogprobsTensors.empty_cpu never pins (before 0.29)")
    monkeypatch.setattr(outputs, "PIN_MEMORY", True)
    crashed = _run(SHIFT, layers=["lm_head"], **EAGER)
    assert any(v.kind == "crash" and "pin_memory" in v.message for v in crashed), crashed
    assert "vllm.v1.outputs" in vllm_env.unpin_host_memory() and outputs.PIN_MEMORY is False
    assert _run(SHIFT, layers=["lm_head"], **EAGER) == []


def _e1_cases() -> list[tuple[str, list, dict]]:
    """E1's two minimal cases (docs/findings/cases), on the V1 runner."""
    out = []
    for name in ("e1_dummy_run_evicts_real_adapter", "e1_dummy_run_with_a_pinned_adapter"):
        case = json.loads((ROOT / "docs" / "findings" / "cases" / f"{name}.json").read_text())
        out.append((name, case["ops"], {**case["config"], **EAGER, "num_speculative_tokens": 1}))
    return out


@needs_vllm
def test_e1_needs_a_dummy_batch_that_maps_adapters_which_the_v1_runner_s_does_not(monkeypatch):
    """E1 on the V1 side: the release's ``execute_dummy_batch`` -> ``_dummy_run`` hands the mixin ``_dummy_run``'s
    defaults (``v1_runner.dummy_batch``: ``num_active_loras=0`` on 0.16 - 0.33), so the dummy adapters are registered
    (evicting) but none is asked for: E1's cases are silent. The same V1 session with a dummy batch that asks for
    ``max_loras`` adapters (the V2 runner's since #35536) fails as E1, labelled so: the V1 path would show it."""
    _needs_v1()
    from fuzzrunner.target import load_target
    from targets.vllm_engine import known, known_flags
    how = load_target("vllm_engine").run.keywords["found"]["v1"].dummy_batch  # what the runs read
    assert how.lora.get("num_active_loras") == 0 and how.lora.get("remove_lora") is True and not how.passes_lora
    for name, ops, config in _e1_cases():
        assert _run(ops, **config) == [], name
    for name, ops, config in _e1_cases():
        monkeypatch.setattr(how, "lora", dict(how.lora, num_active_loras=config["max_loras"]))
        found = _run(ops, **config)
        crash = next((v for v in found if v.kind == "crash"), None)
        assert crash is not None, (name, found)
        finding = {"violation": {"tool": crash.tool, "kind": crash.kind, "kernel": crash.kernel, "tensor": "",
                                 "message": crash.message, "location": crash.location, "details": {"op_index": 2}},
                   "case": {"config": config, "ops": ops}}
        assert known.known_id(finding, **known_flags(_found())) == "E1", (name, crash)


@needs_vllm
@pytest.mark.slow  # a campaign until the fault's finding: minutes on the shared 2-core machine
def test_the_shifted_rows_fault_is_found_from_scratch_and_not_labelled_known(tmp_path, capsys):
    """Seed 0, at most 300 examples, on a release with the V1 runner: a finding of the V1 prompt-logprobs output oracle
    that the campaign does not label as a known vLLM bug."""
    _needs_v1()
    code, out, run = _fuzz(tmp_path, capsys, "--fault", "v1_prompt_rows_shifted", "--max-examples", "300",
                           "--seed", "0", "--no-shrink", "--budget", "3000", "--workers", "1")
    mine = [f for f in run["findings"] if f["violation"]["tensor"].startswith(("step.prompt_logprobs",
                                                                               "replay.prompt_logprobs"))
            or f["case"]["config"].get("runner") == "v1" and f["violation"]["kind"] == "crash"
            and not (f.get("triage") or {}).get("known")]
    assert code == 1 and mine, out
    assert all(not (f.get("triage") or {}).get("known") for f in mine), mine
