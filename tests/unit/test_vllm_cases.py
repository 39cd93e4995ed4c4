"""The vllm_lora target's pieces that need no vLLM: case generation, validation, vLLM's capture keys."""

from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings

from fuzzrunner.target import _import_object

_import_object("targets.vllm_lora:vllm_available")  # puts the repository root (targets/) on sys.path

from targets.vllm_lora import cases, features, runner, site  # noqa: E402


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases.vllm_lora_cases(moe=True, embedding=True))
def test_generated_cases_are_valid_and_every_replay_has_a_fitting_capture(case):
    runner.check(case)
    assert features.features(case) <= set(features.FEATURE_SPACE)
    assert case.config.get("embedding") is None or case.config["entry"] == "punica"
    for i, op in enumerate(case.ops):
        if op["op"] == "replay":
            cap = case.ops[i - 1]
            active = len({s for s in op["slots"] if s >= 0})
            assert cap["op"] == "capture" and cap["key"] >= active and cap["size"] >= len(op["slots"])
            assert cap["reqs"] >= len(set(op["slots"]))  # a request per distinct slot, -1 included


def test_capture_keys_are_vllms():
    assert cases.capture_keys(4, False) == [0, 5]
    assert cases.capture_keys(4, True) == [0, 1, 2, 4, 5]
    assert cases.capture_keys(3, True) == [0, 1, 2, 4]


def test_dummy_slots_follow_maybe_select_dummy_loras():
    s = SimpleNamespace(L=2, api=SimpleNamespace(dummy_select=None))  # the re-statement (releases before 0.16)
    dummy = runner.Session.dummy_slots
    assert dummy(s, 5, 2, 2) == [0, 0, 1, 1, 1]       # ids 1, 2 cycled; remainder on the last request
    assert dummy(s, 4, 4, 3) == [0, 1, 0, 1]          # k > max_loras: capped, and no no-LoRA request
    assert dummy(s, 3, 1, 0) == [-1, -1, -1]


def test_unavailable_reason_names_the_set_up_command(monkeypatch, tmp_path):
    monkeypatch.setenv("FUZZRUNNER_VLLM_CACHE", str(tmp_path))
    monkeypatch.setenv("FUZZRUNNER_VLLM_VERSION", "0.0.1")
    monkeypatch.delenv("FUZZRUNNER_VLLM_SITE", raising=False)
    monkeypatch.setattr(site, "CACHE", tmp_path)
    if site.candidate_paths() == []:
        return  # a vllm is installed in this environment
    ok, why = _import_object("targets.vllm_lora:vllm_available")()
    assert not ok and "scripts/vllm_setup.sh 0.0.1" in why


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases.vllm_lora_cases())
def test_without_the_components_no_case_asks_for_them(case):
    assert "moe" not in case.config and "embedding" not in case.config


def test_features_name_the_moe_kernel_vllm_picks_and_the_embedding_layer():
    from fuzzrunner.case import Case
    cfg = {"max_loras": 4, "entry": "punica", "embedding": True, "lora_index_to_id": [2, 1, 3, 4],
           "moe": {"experts": 64, "top_k": 4, "n": 16, "slices": 1, "rank": 64, "mul_routed_weight": True,
                   "enabled": [True, False, True, True]}}
    ops = ({"op": "step", "slots": [0] * 5}, {"op": "step", "slots": [-1, -1]}, {"op": "step", "slots": [0] * 9})
    f = features.features(Case("vllm_lora", cfg, ops, ()))
    assert runner.naive_moe(4, 4, 64, 2) and not runner.naive_moe(5, 4, 64, 2)  # 5 x 4 x 8 > 64 x 2
    assert {"layer=embedding", "layer=moe", "moe=one-shot", "moe=small-batch", "moe=sorted-path",
            "moe=mul_routed_weight",
            "moe=adapter-without-moe", "moe=no-lora-after-lora", "slot_ids=permuted"} <= f


def test_check_refuses_bad_adapter_ids_and_moe_configs():
    import pytest

    from fuzzrunner.case import Case
    from fuzzrunner.errors import InvalidCase
    base = {"max_loras": 2, "max_num_tokens": 4, "hidden": 16, "rank": 8, "slices": [16], "vocab": 32,
            "dtype": "float16", "specialize_active_lora": False, "entry": "punica", "capture_sizes": [4]}
    for extra in ({"lora_index_to_id": [1, 1]}, {"lora_index_to_id": [0, 1]},
                  {"moe": {"experts": 2, "top_k": 3, "n": 16, "slices": 1, "rank": 8, "mul_routed_weight": False,
                           "enabled": [True, True]}}):
        with pytest.raises(InvalidCase):
            runner.check(Case("vllm_lora", {**base, **extra}, (), ()))
