"""The vllm_lora target's pieces that need no vLLM: case generation, validation, vLLM's capture keys."""

from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings

from fuzzrunner.target import _import_object

_import_object("targets.vllm_lora:vllm_available")  # puts the repository root (targets/) on sys.path

from targets.vllm_lora import cases, runner, site  # noqa: E402


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases.vllm_lora_cases())
def test_generated_cases_are_valid_and_every_replay_has_a_fitting_capture(case):
    runner.check(case)
    for i, op in enumerate(case.ops):
        if op["op"] == "replay":
            cap = case.ops[i - 1]
            active = len({s for s in op["slots"] if s >= 0})
            assert cap["op"] == "capture" and cap["key"] >= active and cap["size"] >= len(op["slots"])


def test_capture_keys_are_vllms():
    assert cases.capture_keys(4, False) == [0, 5]
    assert cases.capture_keys(4, True) == [0, 1, 2, 4, 5]
    assert cases.capture_keys(3, True) == [0, 1, 2, 4]


def test_dummy_slots_follow_maybe_select_dummy_loras():
    s = SimpleNamespace(L=2)
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
