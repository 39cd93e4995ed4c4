"""The ``vllm_engine`` target's MoE block: vLLM's ``FusedMoE`` wrapped by the manager as ``FusedMoEWithLoRA``
(targets/vllm_engine/moe.py; docs/vllm.md, "The engine target").

Each oracle both ways: a fault-free case of adapters with and without expert weights, removal, eviction and a
dummy run is silent; the MoE fault, and the generic set_lora / activation faults on the MoE layer, are caught in
``step.experts``. The fault found from scratch by a campaign is a slow test.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.target import _import_object

ROOT = Path(__file__).resolve().parents[2]
AVAILABLE, REASON = _import_object("targets.vllm_lora:vllm_available")()
needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_engine: {REASON}")

DENSE = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head"]
CONFIG = {"max_loras": 2, "max_cpu_loras": 3, "max_lora_rank": 8, "lora_dtype": "auto", "fully_sharded_loras": False,
          "specialize_active_lora": False, "target_modules": None, "max_num_seqs": 4, "max_num_batched_tokens": 8,
          "num_speculative_tokens": 0, "hidden": 16, "vocab": 32, "layout": {"qkv": "merged", "gate_up": "fused"},
          "seed": 0, "layers": ["experts"], "moe": {"experts": 64, "top_k": 2},
          "adapters": {"1": {"rank": 8, "alpha": 16, "rslora": False, "targets": DENSE + ["experts"], "seed": 1},
                       "2": {"rank": 2, "alpha": 8, "rslora": True, "targets": ["q_proj", "experts"], "seed": 2},
                       "3": {"rank": 4, "alpha": 8, "rslora": False, "targets": ["q_proj", "v_proj"], "seed": 3}}}


def req(rid, lora, tokens=1):
    return {"id": rid, "lora": lora, "tokens": tokens, "drafts": 0, "prompt_logprobs": False}


def step(*reqs, finish=(), pad=0, seed=0):
    return {"op": "step", "finish": list(finish), "reqs": list(reqs), "pad": pad, "seed": seed}


def _run(ops, faults=(), **config):
    from fuzzrunner.execute import run_case
    from fuzzrunner.target import load_target
    return run_case(Case("vllm_engine", {**CONFIG, **config}, tuple(ops), tuple(faults)), load_target("vllm_engine"))


def _kinds(violations) -> set:
    return {(v.kind, v.tensor) for v in violations}


# two adapters with expert weights and one without, a base-model request beside them; an adapter removed while
# its slot is refilled; a dummy run (vLLM's dummy adapters, MoE weights too) between steps; padding rows
FAULT_FREE = [step(req("a", 1, 1), req("b", 0, 1), req("c", 2, 1), seed=1),
              {"op": "remove", "id": 1},
              step(req("d", 3, 1), req("c", 2, 1), finish=["a", "b"], pad=2, seed=2),
              {"op": "dummy_run", "num_tokens": 2, "reqs": 2, "pad": 0, "seed": 3},
              step(req("e", 1, 2), req("f", 0, 1), finish=["c", "d"], seed=4)]


def _r1() -> bool:
    """R1 by the release's source (targets/vllm_engine/source_facts.py): pack_moe drops rsLoRA's scaling."""
    from targets.vllm_engine import load_engine
    from targets.vllm_engine.source_facts import facts
    return facts(load_engine()["api"].version)["R1"]


NO_RSLORA = {k: dict(v, rslora=False) for k, v in CONFIG["adapters"].items()}


@needs_vllm
def test_fault_free_moe_steps_are_silent():
    adapters = NO_RSLORA if _r1() else CONFIG["adapters"]  # R1 releases: the rsLoRA adapter is the next test's
    assert _run(FAULT_FREE, adapters=adapters) == []
    assert _run(FAULT_FREE, moe={"experts": 128, "top_k": 1}, layers=["experts", "qkv_proj"], adapters=adapters) == []


@needs_vllm
def test_r1_rslora_expert_adapters_are_scaled_as_plain_lora_exactly_where_the_source_says():
    """R1 (vllm-project/vllm#55545, fixed by #55548 before 0.31): pack_moe scales every expert adapter by alpha / rank,
    so an rsLoRA adapter's expert rows (adapter 2: rank 2, alpha 8) get 4 x its delta instead of 8 / sqrt(2); its
    dense rows and the plain adapters' are right. The verdict of a run equals the release's source (0.28.0: R1;
    0.31.0 on: silent); the same case with adapter 2 plain is silent everywhere."""
    found = _kinds(_run(FAULT_FREE))
    assert found == ({("numeric-mismatch", "step.experts.adapter_rows")} if _r1() else set()), found


M1_OPS = [step(req("a", 1, 1), seed=1), step(req("b", 0, 1), finish=["a"], seed=2)]


def _m1() -> bool:
    """M1 by the release's code (moe.known_flags): add_lora_fused_moe launches without the no-LoRA check."""
    from targets.vllm_engine import moe
    return moe.known_flags()["moe_ignores_no_lora"]


@needs_vllm
def test_m1_a_base_model_step_after_an_adapter_step_gets_its_expert_delta_exactly_where_the_code_says():
    """M1 (docs/findings/m1-fused-moe-lora-without-no-lora-check.md; 0.16 - 0.23, fixed in 0.24): the all-base-model
    step's prepare_tensors returns early and the naive MoE LoRA kernel reads the previous step's slots: the base row
    gets adapter 1's expert delta (0.21, 0.22); silent where add_lora_fused_moe checks the flag (0.24 on)."""
    found = _kinds(_run(M1_OPS, adapters=NO_RSLORA))
    assert found == ({("numeric-mismatch", "step.experts.base_rows")} if _m1() else set()), found


# the releases whose experts are built without FusedMoEFactory (moe.builder: FusedMoE, a class up to 0.22, a
# function from 0.24), where set up; each runs this file's fast tests in a process of its own
BEFORE_FACTORY = ("0.21.0", "0.22.0", "0.24.0")


@needs_vllm
@pytest.mark.slow  # a vLLM import and the file's cases in a child process: 1 - 3 min each on the 2-core machine
@pytest.mark.parametrize("version", BEFORE_FACTORY)
def test_the_moe_block_runs_on_a_release_before_the_factory(version):
    """Before: every release before 0.28 refused a MoE case (no FusedMoEFactory). The fast tests of this file, on
    ``version``'s tree: silent fault-free steps, R1 and M1 where its code has them, the planted faults caught, the
    layer vLLM's (0.24: the fault-free case, R1 and the layer; 0.21 - 0.22, whose legacy MoE LoRA kernel casts to
    bfloat16 (triton_compat's repairs), every fast test of the file)."""
    import os
    if not (ROOT / ".cache" / "vllm" / version / "site" / "vllm").is_dir():
        pytest.skip(f"vLLM {version} is not set up here (scripts/vllm_setup.sh {version})")
    pick = ["-k", "fault_free_moe or r1_rslora or made_by_the_manager"] if version == "0.24.0" else []
    env = {**os.environ, "FUZZRUNNER_VLLM_VERSION": version, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                        "-m", "not slow", __file__, *pick], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0 and " passed" in r.stdout and "skipped" not in r.stdout.splitlines()[-1], \
        r.stdout[-3000:] + r.stderr[-2000:]


# A clean campaign's case (seed 0, before the block's input and expert weights were scaled down, moe.INPUT_SCALE):
# rsLoRA rank 1, alpha 16, hidden 32, 128 experts: intermediates of 20 - 60 in float16 put a small output element
# 0.04 off the float64 reference (vLLM rounds the gated activation's input and output to float16; the reference
# does not). Silent now: the values stay O(1).
LARGE = ({**CONFIG, "max_num_batched_tokens": 16, "num_speculative_tokens": 1, "hidden": 32, "specialize_active_lora": True,
          "layout": {"qkv": "fused", "gate_up": "fused"}, "seed": 1, "layers": ["embed_tokens", "experts", "lm_head"],
          "moe": {"experts": 128, "top_k": 1}, "max_num_seqs": 2, "max_cpu_loras": 2,
          "adapters": {"1": {"rank": 1, "alpha": 16, "rslora": True, "targets": ["down_proj", "embed_tokens", "experts", "gate_up_proj", "lm_head", "o_proj", "qkv_proj"], "seed": 76}, "2": {"rank": 4, "alpha": 16, "rslora": False, "targets": ["down_proj", "embed_tokens", "experts", "gate_up_proj", "lm_head", "o_proj", "qkv_proj"], "seed": 28}, "3": {"rank": 1, "alpha": 16, "rslora": False, "targets": ["down_proj", "embed_tokens", "experts", "gate_up_proj", "lm_head", "o_proj", "qkv_proj"], "seed": 25}, "4": {"rank": 2, "alpha": 16, "rslora": False, "targets": ["embed_tokens", "experts", "lm_head"], "seed": 41}}},
         [{"op": "add", "id": 3}, {"op": "add", "id": 2}, {"op": "step", "finish": [], "reqs": [{"id": "r1", "lora": 3, "tokens": 2, "drafts": 0, "prompt_logprobs": False}, {"id": "r2", "lora": 1, "tokens": 3, "drafts": 0, "prompt_logprobs": False}], "pad": 0, "seed": 0}, {"op": "step", "finish": ["r1", "r2"], "reqs": [{"id": "r3", "lora": 3, "tokens": 2, "drafts": 0, "prompt_logprobs": False}, {"id": "r4", "lora": 4, "tokens": 3, "drafts": 0, "prompt_logprobs": False}], "pad": 0, "seed": 0}])


@needs_vllm
def test_large_adapter_values_stay_within_float16s_tolerance_through_the_blocks_two_roundings():
    config, ops = LARGE
    assert _run(ops, **config) == []


# (fault, ops, config, tensor): after an eviction (max_loras 1) the slot of an adapter with expert weights is
# refilled by one without (activation) or with a smaller rank (set_lora): nothing stale may reach its rows
MOE_FAULT_CASES = {
    "fused_moe_swaps_gate_up": ([step(req("a", 2, 1), req("b", 0, 1))], {}, "step.experts.adapter_rows"),
    "activation_keeps_missing_modules": ([step(req("a", 1, 1)), step(req("b", 3, 2), finish=["a"])],
                                         {"max_loras": 1, "max_cpu_loras": 1}, "step.experts.adapter_rows"),
    "set_lora_keeps_old_weights": ([step(req("a", 1, 1)), step(req("b", 2, 2), finish=["a"])],
                                   {"max_loras": 1, "max_cpu_loras": 1}, "step.experts.adapter_rows"),
    # a base-model request given a finished request's adapter: its rows are no longer the twin's, exactly (an
    # adapter's request beside it: an all-base-model step after an adapter step is M1's case on 0.16 - 0.23)
    "lora_state_keeps_finished_adapter": ([step(req("a", 2, 1)), step(req("b", 0, 1), req("c", 1, 1), finish=["a"])],
                                          {}, "step.experts.base_rows"),
}


@needs_vllm
@pytest.mark.parametrize("fault", sorted(MOE_FAULT_CASES))
def test_each_moe_fault_is_caught_in_the_experts_rows_and_its_case_is_silent_without_it(fault):
    ops, config, tensor = MOE_FAULT_CASES[fault]
    if _r1():  # 0.28: the rsLoRA adapter's expert rows are R1's (its own test), fault or not
        config = dict(config, adapters=NO_RSLORA)
    found = _run(ops, (fault,), **config)
    assert any(v.kind == "numeric-mismatch" and v.tensor == tensor for v in found), _kinds(found)
    assert _run(ops, **config) == []


def _triton_experts(method):
    """The experts kernel of a fused-MoE method: its modular kernel's (``moe_kernel``, or 0.17 - 0.19's unwrapped
    method's ``kernel``), through the kernel's ``impl`` where it has one (0.19)."""
    k = getattr(method, "moe_kernel", None) or method.kernel
    return getattr(k, "impl", k).fused_experts


@needs_vllm
def test_the_moe_layer_is_vllms_fused_moe_with_lora_made_by_the_manager():
    """What the case runs is vLLM's: the manager's FusedMoEWithLoRA over vLLM's Triton experts."""
    from unittest import mock

    from fuzzrunner.target import load_target
    runner = sys.modules[load_target("vllm_engine").run.func.__module__]  # the module the target runs from
    Session, moe = runner.Session, runner.moe
    made = []
    init = Session.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)
    with mock.patch.object(Session, "__init__", keep):
        assert _run([step(req("a", 2, 1))], adapters=NO_RSLORA if _r1() else CONFIG["adapters"]) == []
    [s] = made
    layer = s.model.get_submodule(moe.PATH)
    assert type(layer).__name__ == "FusedMoEWithLoRA" and type(layer).__module__ == "vllm.lora.layers.fused_moe"
    method = moe.weights_of(layer).quant_method
    kernel = _triton_experts(method)
    assert type(kernel).__name__ == "TritonExperts"
    if hasattr(kernel, "_lora_context"):  # 0.20 on: the LoRA context set on the Triton experts
        assert kernel._lora_context is not None
    else:  # 0.17 - 0.19: the layer's decorators on the modular kernel's Triton experts (_inject_lora_into_fused_moe)
        assert type(method).__name__ == "FusedMoEModularMethod"
        assert kernel.activation.__qualname__.startswith("FusedMoEWithLoRA._inject_lora_into_fused_moe")
    assert type(_triton_experts(moe.weights_of(s.moe_twin).quant_method)).__name__ == "TritonExperts"
    # built as the release's Mixtral builds it: its FusedMoEFactory (0.28 on) or FusedMoE (a class up to 0.22, a
    # function returning a MoERunner over RoutedExperts from 0.24)
    import vllm.model_executor.layers.fused_moe as fm
    assert moe.builder() is (getattr(fm, "FusedMoEFactory", None) or fm.FusedMoE)
    assert (type(layer.base_layer).__name__, type(moe.weights_of(layer)).__name__) in {
        ("MoERunner", "RoutedExperts"), ("FusedMoE", "FusedMoE")}


@needs_vllm
@pytest.mark.slow  # a 300-example campaign: ~10 min on the 2-core machine
def test_the_moe_fault_is_found_from_scratch_within_300_examples(tmp_path):
    found_from_scratch(tmp_path, "fused_moe_swaps_gate_up")


def found_from_scratch(tmp_path, fault: str) -> None:
    """A 300-example campaign with ``fault`` planted (seed 0, one worker) finds it in the experts' adapter rows."""
    r = subprocess.run([sys.executable, "-m", "fuzzrunner", "fuzz", "--target", "vllm_engine", "--fault", fault,
                        "--max-examples", "300", "--seed", "0", "--no-shrink",
                        "--workers", "1", "--budget", "2400", "--corpus", str(tmp_path / "c"),
                        "--report", str(tmp_path / "r.json")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    [run] = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert any(f["violation"]["tensor"].endswith("experts.adapter_rows") for f in run["findings"]), run["findings"]


@needs_vllm
def test_the_moe_rows_follow_the_v1_runners_persistent_batch_both_ways():
    """A V1-runner case (0.33 and older): rows in the order of vLLM's InputBatch after condense(); with the mapping
    entry of the moved request dropped (the planted V1 fault) its experts rows lose their adapter."""
    from fuzzrunner.target import load_target
    if load_target("vllm_engine").faults_unavailable.get("condense_drops_lora_mapping"):
        pytest.skip("this vLLM has no V1 model runner (0.34 and later)")
    v1 = {"runner": "v1", "cudagraph_mode": "NONE", "cudagraph_capture_sizes": [1], "cudagraph_specialize_lora": True,
          "reorder_threshold": None, "adapters": NO_RSLORA if _r1() else CONFIG["adapters"]}
    condense = [step(req("a", 1, 2), req("b", 0, 1), req("c", 2, 1), seed=1),
                step(req("b", 0, 1), req("c", 2, 1), finish=["a"], seed=2)]
    assert _run(condense, **v1) == []
    found = _run(condense, ("condense_drops_lora_mapping",), **v1)
    assert ("numeric-mismatch", "step.experts.adapter_rows") in _kinds(found), _kinds(found)
