"""``vllm_engine``'s serving and prefix-caching cases (serving_cases.py), from their JSON alone (no vLLM): every drawn
case passes the target's own checks, its features are declared, and the draws reach what the oracles need (same-name
reloads, served requests, stems shared by two requests)."""

from hypothesis import HealthCheck, given, settings

from fuzzrunner.case import Case
from targets.vllm_engine import case_check, cases, features


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
@given(cases.vllm_engine_cases(serving=True))
def test_drawn_serving_cases_pass_the_targets_checks_and_declare_their_features(case):
    case_check.check(case)
    assert features.features(case) <= set(features.feature_space())
    served: dict = {}
    live: set = set()
    for op in case.ops:  # a new served request names a name its case has loaded and not unloaded, for that adapter
        if op["op"] == "serve_load":
            served[op["name"]] = op["adapter"]
        elif op["op"] == "serve_unload":
            served.pop(op["name"], None)
        elif op["op"] == "step":
            live -= set(op["finish"])
            for r in op["reqs"]:
                if "model" in r and r["id"] not in live:
                    assert served.get(r["model"]) == r["lora"], (r, served)
                live.add(r["id"])


def test_the_draws_reach_same_name_reloads_served_requests_and_shared_stems():
    seen: set = set()

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
    @given(cases.vllm_engine_cases(serving=True))
    def collect(case):
        seen.update(features.features(case))
    collect()
    assert {"serve=reload-same-name", "step=served-request", "step=shared-stem",
            "prefix_caching=on", "prefix_caching=off", "serving=on"} <= seen


def test_a_release_without_the_serving_layer_draws_none_of_it():
    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
    @given(cases.vllm_engine_cases(serving=False))
    def check(case):
        assert "serving" not in case.config and "prefix_caching" not in case.config
        assert not {op["op"] for op in case.ops} & {"serve_load", "serve_unload"}
    check()
    assert not {"op=serve_load", "op=serve_unload", "serving=on", "prefix_caching=on"} & \
        set(features.feature_space(serving=False))


def test_a_serve_op_without_serving_is_malformed():
    import pytest

    from fuzzrunner.errors import InvalidCase
    cfg = {"max_loras": 1, "max_cpu_loras": 1, "max_lora_rank": 8, "lora_dtype": "auto", "fully_sharded_loras": False,
           "specialize_active_lora": False, "max_num_seqs": 2, "max_num_batched_tokens": 8,
           "num_speculative_tokens": 0, "hidden": 16, "vocab": 32, "layout": {"qkv": "merged", "gate_up": "merged"},
           "seed": 0, "layers": ["qkv_proj"],
           "adapters": {"1": {"rank": 2, "alpha": 8, "rslora": False, "targets": ["q_proj"], "seed": 0}}}
    op = {"op": "serve_load", "name": "n1", "adapter": 1, "inplace": False}
    with pytest.raises(InvalidCase, match="serving: true"):
        case_check.check(Case("vllm_engine", cfg, (op,), ()))
    case_check.check(Case("vllm_engine", dict(cfg, serving=True), (op,), ()))
