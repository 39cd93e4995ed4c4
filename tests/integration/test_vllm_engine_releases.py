"""``vllm_engine`` on releases other than the pinned one: each release's own V2-runner dummy-run protocol
(targets/vllm_engine/dummy.py), proven on the pinned vLLM by giving it an older release's protocol.

Driving 0.24's protocol (dummy adapters ids 1..max_loras, then every adapter removed) on 0.15 - 0.23, whose V2
runner maps no dummy adapter at run time, reported E1 there: target misuse. Needs a vLLM set up
(``scripts/setup.sh``); skipped with the reason otherwise.
"""

import json
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.target import _import_object

ROOT = Path(__file__).resolve().parents[2]
AVAILABLE, REASON = _import_object("targets.vllm_lora:vllm_available")()
needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_engine: {REASON}")
E1 = ROOT / "docs" / "findings" / "cases" / "e1_dummy_run_evicts_real_adapter.json"


def _case(extra_ops=()) -> Case:
    d = json.loads(E1.read_text())
    return Case("vllm_engine", d["config"], tuple(d["ops"]) + tuple(extra_ops), ())


def _run(case: Case):
    from fuzzrunner.execute import run_case
    from fuzzrunner.target import load_target
    return run_case(case, load_target("vllm_engine"))


@pytest.fixture
def protocol(monkeypatch):
    # the engine pieces of the module load_target("vllm_engine") runs (fuzzrunner.targets.vllm_engine: another
    # module object than targets.vllm_engine, with its own)
    api = _import_object("fuzzrunner.targets.vllm_engine:load_engine")()["api"]

    def use(name: str) -> None:
        monkeypatch.setattr(api, "protocol", name)
    return use


@needs_vllm
@pytest.mark.parametrize("name", ["zero_mapping", "no_mapping"])
def test_a_release_whose_v2_runner_maps_no_dummy_adapter_at_run_time_keeps_the_real_ones(protocol, name):
    """E1's minimal case (two real adapters, one holding a warm-up id, then a runtime dummy run) crashes under
    0.24's protocol; under 0.15 - 0.23's the dummy run registers nothing and removes nothing, so the next step
    finds both adapters where they were and each row gets its own delta (0.15 - 0.21: the dummy run itself is V0)."""
    step = {"op": "step", "finish": [], "pad": 0, "seed": 5,
            "reqs": [{"id": "a", "lora": 1, "tokens": 2, "drafts": 0, "prompt_logprobs": False},
                     {"id": "b", "lora": 3, "tokens": 1, "drafts": 0, "prompt_logprobs": False},
                     {"id": "c", "lora": 0, "tokens": 1, "drafts": 0, "prompt_logprobs": False}]}
    assert [v.kind for v in _run(_case())] == ["crash"]  # lora_warmup, the pinned release's own: E1
    protocol(name)
    found = _run(_case([step]))
    if name == "zero_mapping":
        assert found == []
    else:  # 0.15 - 0.21 program nothing for a dummy run: its forward reads never-written metadata (V0, fixed by
        # #43139), and only that: no crash, and the step after is right
        assert found and all(v.tool in ("shadow", "invariants") and v.details.get("op_index") == 2 for v in found)


@needs_vllm
def test_a_zero_mapping_dummy_run_programs_the_no_lora_mapping_and_forces_the_flags(protocol):
    dummy = _import_object("fuzzrunner.targets.vllm_engine.dummy:runtime")
    session = _import_object("fuzzrunner.targets.vllm_engine.runner:Session")
    load_engine = _import_object("fuzzrunner.targets.vllm_engine:load_engine")

    class Ctx:
        class context:
            device = "cpu"

        @staticmethod
        def track(*_):
            pass
    protocol("zero_mapping")
    s = session(_case(), Ctx(), load_engine())
    s.add({"id": 1})
    dummy(s, 5, 2)
    manager = s.runner.lora_manager._adapter_manager
    assert manager._last_mapping.index_mapping == (0,) * 5 and manager._last_mapping.prompt_mapping == (0, 0)
    for wrapper in manager.punica_wrapper_mapping.values():
        for meta in (wrapper.token_mapping_meta, wrapper.prompt_mapping_meta):
            assert bool(meta.no_lora_flag_cpu[0]) is False and int(meta.num_active_loras_cpu[0]) == 1
    assert s.runner.list_loras() == {1}


@needs_vllm
def test_a_release_without_lora_target_modules_wraps_every_module_and_the_reference_follows(monkeypatch):
    """0.15 - 0.18 have no ``LoRAConfig.target_modules`` (#34984, 0.19): vLLM wraps every module, so a case's filter
    must not shape the reference either (it did: every filtered case was a wrong delta on a module vLLM wraps).
    Simulated on the pinned release by building its config without the filter."""
    vllm_env = _import_object("fuzzrunner.targets.vllm_engine.vllm_env:configs").__module__
    import sys
    env = sys.modules[vllm_env]
    real = env.configs

    def without_filter(c, model_dir, device):
        cfg = real(c, model_dir, device)
        cfg.lora_config.target_modules = None  # as a release without the field: every module wrapped
        return cfg
    monkeypatch.setattr(env, "configs", without_filter)
    d = json.loads(E1.read_text())
    config = dict(d["config"], max_cpu_loras=3, target_modules=["o_proj"], layers=["qkv_proj", "o_proj"])
    ops = ({"op": "add", "id": 1},
           {"op": "step", "finish": [], "pad": 0, "seed": 3,
            "reqs": [{"id": "a", "lora": 1, "tokens": 2, "drafts": 0, "prompt_logprobs": False},
                     {"id": "b", "lora": 0, "tokens": 1, "drafts": 0, "prompt_logprobs": False}]})
    assert _run(Case("vllm_engine", config, ops, ())) == []


@needs_vllm
def test_a_release_whose_prompt_logprobs_worker_takes_prefill_token_ids_is_driven(monkeypatch):
    """0.15 - 0.16's ``compute_prompt_logprobs`` takes the request states' tokens as ``prefill_token_ids`` (0.17 on:
    ``all_token_ids``). The target passed only ``all_token_ids``, dropped by the signature filter: every 0.15 case with
    prompt logprobs was a target error (``TypeError`` at prompt_logprobs.py). Simulated on the pinned release by a
    worker with 0.15's parameter name: P1's case fails as P1, as it does through the release's own signature."""
    import inspect
    found = _import_object("fuzzrunner.targets.vllm_engine:load_engine")()["prompt_logprobs"]
    real = found.Worker

    class Worker015(real):
        def compute_prompt_logprobs(self, logits_fn, hidden_states, input_batch, prefill_token_ids, *args, **kw):
            return real.compute_prompt_logprobs(self, logits_fn, hidden_states, input_batch, prefill_token_ids,
                                                *args, **kw)
    params = list(inspect.signature(real.compute_prompt_logprobs).parameters)
    assert params[4] == "all_token_ids", params  # the pinned release's name, in 0.15's place
    monkeypatch.setattr(found, "Worker", Worker015)
    monkeypatch.setattr(found, "call", set(found.call) - {"all_token_ids"} | {"prefill_token_ids"})
    d = json.loads((ROOT / "docs" / "findings" / "cases" / "p1_prompt_logprobs_mapping.json").read_text())
    found_now = _run(Case("vllm_engine", d["config"], tuple(d["ops"]), ()))
    assert found_now and all(v.tool != "target" for v in found_now), [v.message for v in found_now]
    assert any("prompt_logits" in (v.tensor or "") for v in found_now)


@needs_vllm
def test_a_release_whose_batch_sort_takes_no_draft_tokens_is_driven(monkeypatch):
    """0.26 - 0.27's ``sort_batch_req_ids(num_tokens_per_req, decode_query_len)`` (``draft_tokens`` in between from
    0.28): the target passed three arguments, so every 0.26 - 0.27 step was a target error (``TypeError`` at
    runner.py), found by the third sweep. Simulated on the pinned release by a sort with 0.26's signature, which must
    be called and order the batch as the real one does."""
    found = _import_object("fuzzrunner.targets.vllm_engine:load_engine")()
    real, calls = found["sort_batch_req_ids"], []

    def sort_batch_req_ids(num_tokens_per_req, decode_query_len):  # 0.26.0's signature
        calls.append(decode_query_len)
        return real(num_tokens_per_req, {}, decode_query_len)
    monkeypatch.setitem(found, "sort_batch_req_ids", sort_batch_req_ids)
    d = json.loads(E1.read_text())
    ops = ({"op": "add", "id": 1},
           {"op": "step", "finish": [], "pad": 0, "seed": 3,
            "reqs": [{"id": "a", "lora": 1, "tokens": 3, "drafts": 0, "prompt_logprobs": False},
                     {"id": "b", "lora": 0, "tokens": 1, "drafts": 0, "prompt_logprobs": False}]})
    assert _run(Case("vllm_engine", dict(d["config"], num_speculative_tokens=0), ops, ())) == []
    assert calls == [1]
