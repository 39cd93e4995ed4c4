"""``vllm_engine`` cases with ``"runner": "v1"``: the V1 model runner's ``InputBatch`` LoRA bookkeeping and its
``CudagraphDispatcher`` as shipped (vLLM up to 0.33; targets/vllm_engine/v1_runner.py, docs/vllm.md).

Each planted fault of v1_faults.py has a minimal case its oracle catches and that is silent without it (both
ways); V1 (docs/findings/v1-specialize-active-lora.md) shows through the runner's own dispatch. Skipped where
vLLM is not set up, or where the release has no V1 runner (0.34 and later), with the reason.
"""

import pytest
from test_vllm_engine_target import AVAILABLE, REASON, _found, _kinds, _run, req, step

needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_engine: {REASON}")
EAGER = {"runner": "v1", "cudagraph_mode": "NONE", "cudagraph_capture_sizes": [1, 2, 4, 8],
         "cudagraph_specialize_lora": True, "reorder_threshold": None, "num_speculative_tokens": 0}
GRAPHS = dict(EAGER, cudagraph_mode="FULL_AND_PIECEWISE", num_speculative_tokens=1)
LAYERS = ["qkv_proj", "o_proj", "embed_tokens", "lm_head"]


def _needs_v1():
    if _found().get("v1") is None:
        pytest.skip(f"vLLM {_found()['api'].version} has no V1 model runner (0.34 and later)")


# condense: a finished at index 0, c (index 2) moved down into it; swap: d fills a's index 0 as a prefill, and the
# decode-first reorder swaps it with b (a decode at index 1); dispatch: a LoRA batch of 3 tokens (graph of 4)
CONDENSE = [step(req("a", 1, 2), req("b", 0, 1), req("c", 3, 1), seed=1),
            step(req("b", 0, 1), req("c", 3, 1), finish=["a"], seed=2)]
SWAP = [step(req("a", 1, 2), req("b", 3, 2), seed=1),
        step(req("b", 3, 1), req("d", 0, 2), finish=["a"], seed=2)]
DISPATCH = [step(req("a", 1, 3), seed=1)]
FAULT_CASES = {
    "condense_drops_lora_mapping": (CONDENSE, EAGER, "step.qkv_proj.adapter_rows"),
    "swap_states_skips_lora_mapping": (SWAP, dict(EAGER, reorder_threshold=1), "step.qkv_proj."),
    "dispatcher_ignores_lora": (DISPATCH, dict(EAGER, cudagraph_mode="PIECEWISE"), "replay.qkv_proj.adapter_rows"),
}


@needs_vllm
@pytest.mark.parametrize("fault", sorted(FAULT_CASES))
def test_each_v1_fault_is_caught_and_its_case_is_silent_without_it(fault):
    _needs_v1()
    ops, config, tensor = FAULT_CASES[fault]
    found = _run(ops, (fault,), **config)
    assert any(v.kind == "numeric-mismatch" and v.tensor.startswith(tensor) for v in found), _kinds(found)
    assert _run(ops, **config) == []


@needs_vllm
def test_v1_faults_are_unavailable_without_a_v1_runner_and_restored_after_a_case():
    from targets.vllm_engine import faults
    why = faults.unavailable(_found())
    assert all(("V1 model runner" in why.get(f, "")) == (_found().get("v1") is None) for f in FAULT_CASES), why
    if _found().get("v1") is not None:
        before = _found()["v1"].InputBatch.__dict__["condense"]
        _run(CONDENSE, ("condense_drops_lora_mapping",), **EAGER)
        assert _found()["v1"].InputBatch.__dict__["condense"] is before


# every path at once, fault-free: finished requests, unscheduled ones removed and resumed, condense, the
# decode-first reorder, drafts, adapters added / removed / pinned, a dummy run, eager steps and graph replays
CHURN = [{"op": "add", "id": 3},
         step(req("a", 1, 3), req("b", 0, 2), req("c", 3, 1), seed=1),
         {"op": "pin", "id": 1},
         step(req("a", 1, 2, drafts=1), req("d", 4, 2), finish=["b", "c"], seed=2),
         step(req("d", 4, 1), req("e", 0, 3), seed=3),
         {"op": "dummy_run", "num_tokens": 2, "reqs": 1, "seed": 0},
         step(req("a", 1, 1), req("d", 4, 2, drafts=1), seed=4),
         {"op": "remove", "id": 4},
         step(req("f", 2, 2), req("g", 0, 1), finish=["a", "d", "e"], seed=5)]


@needs_vllm
@pytest.mark.parametrize("graphs", ["NONE", "PIECEWISE", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"])
def test_v1_churn_is_silent_on_every_graph_mode(graphs):
    _needs_v1()
    assert _run(CHURN, layers=LAYERS, **dict(GRAPHS, cudagraph_mode=graphs, reorder_threshold=2)) == []


@needs_vllm
def test_v1_replays_drop_the_last_adapter_of_a_mixed_batch_under_specialize_active_lora():
    """V1 (docs/findings/v1-specialize-active-lora.md) through the V1 runner's own dispatch: 2 adapters and a
    base-model request replay the graph of key 2 (its capture froze grid z = 2), so c's rows get no LoRA; the
    same batch is right without the option (key max_loras + 1)."""
    _needs_v1()
    ops = [step(req("a", 1, 2), req("b", 0, 2), req("c", 3, 2), seed=1)]
    config = dict(GRAPHS, cudagraph_mode="PIECEWISE", layers=["qkv_proj"])
    found = _run(ops, specialize_active_lora=True, **config)
    assert ("numeric-mismatch", "replay.qkv_proj.adapter_rows") in _kinds(found), found
    assert _run(ops, specialize_active_lora=False, **config) == []


@needs_vllm
@pytest.mark.slow
def test_generated_v1_runner_cases_find_nothing_but_v1(tmp_path, capsys):
    """A generated campaign (seed 0, 40 examples) on a release with the V1 runner: every finding is a known vLLM
    bug (V1 in V1-runner cases; P1 / S1 / E1 / E2 in the others), none from the V1 runner's bookkeeping."""
    _needs_v1()
    from test_vllm_engine_target import _fuzz, triaged
    code, out, run = _fuzz(tmp_path, capsys, "--max-examples", "40", "--seed", "0", "--no-shrink", "--budget", "1500")
    assert code in (0, 1), out
    assert [f["signature"] for f in run["findings"] if not triaged(f)] == []
    assert run["generated"] >= 40 and run["coverage"]["features"].get("runner=v1-graphs", 0) > 0, out


@needs_vllm
def test_a_replays_padding_rows_must_get_no_adapter(monkeypatch):
    """The pad_rows oracle both ways: a 3-token LoRA batch replays the graph of 4; with the token mapping padded by
    the last request's adapter (a runner that maps the graph's padding), the padding row gets a delta and is
    reported; as shipped (the padding left unmapped) it gets the base output."""
    _needs_v1()
    ops, config = [step(req("a", 0, 1), req("b", 1, 2), seed=1)], dict(EAGER, cudagraph_mode="PIECEWISE")
    assert _run(ops, **config) == []
    cls = _found()["v1"].InputBatch
    original = cls.make_lora_inputs

    def padded(self, num_scheduled_tokens, num_sampled_tokens):
        prompt, token, requests = original(self, num_scheduled_tokens, num_sampled_tokens)
        return prompt, token + token[-1:], requests
    monkeypatch.setattr(cls, "make_lora_inputs", padded)
    assert ("numeric-mismatch", "replay.qkv_proj.pad_rows") in _kinds(_run(ops, **config))


@needs_vllm
@pytest.mark.parametrize("blocked, why", [
    ("vllm.v1.worker.gpu_model_runner", "has no vllm/v1/worker/gpu_model_runner.py"),
    ("vllm.v1.cudagraph_dispatcher", "the V1 runner does not import here: ModuleNotFoundError: import of vllm.v1.cud"),
])
def test_a_v1_runner_that_is_absent_or_does_not_import_is_named_not_dropped(monkeypatch, blocked, why):
    """A tree without the V1 runner (0.34 on, or a trimmed GPU tree) and one whose V1 runner fails to import are
    told apart, and the target's description names the reason (before: both were None, and the V1 cases silently
    vanished: on the H100 the carried 0.33.0 tree lacked gpu_model_runner.py and no report said so)."""
    _found()
    import sys

    from targets.vllm_engine import describe, v1_runner
    for name in ("vllm.v1.worker.gpu_model_runner", "vllm.v1.cudagraph_dispatcher"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, blocked, None)  # import raises ImportError, find_spec answers None
    if blocked != "vllm.v1.worker.gpu_model_runner":
        import importlib.util
        if importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") is None:
            pytest.skip(f"vLLM {_found()['api'].version} has no V1 model runner (0.34 and later)")
    assert v1_runner.find() is None
    assert why in v1_runner.MISSING[0]
    monkeypatch.setitem(_found(), "v1", None)
    assert f"no V1 runner cases ({v1_runner.MISSING[0]})" in describe()[-1]
