"""The vllm_engine target's pieces that need no vLLM: case generation and validation, the model's shapes,
the adapters' PEFT folders and their float64 deltas."""

import json
import os

import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidCase
from fuzzrunner.target import _import_object

_import_object("targets.vllm_lora:vllm_available")  # puts the repository root (targets/) on sys.path

from targets.vllm_engine import adapters, case_check, cases, features, model, prompt_scores  # noqa: E402
from targets.vllm_engine.runner import wrapped_modules  # noqa: E402


def _scheduled(case) -> list[set]:
    """Per step, the requests live after it (finished ones out, scheduled ones in)."""
    live: dict = {}
    out = []
    for op in case.ops:
        if op["op"] == "step":
            for rid in op["finish"]:
                live.pop(rid, None)
            for r in op["reqs"]:
                assert live.setdefault(r["id"], r["lora"]) == r["lora"], "a live request keeps its adapter"
            out.append(set(live))
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases.vllm_engine_cases())
def test_generated_cases_are_valid_and_respect_vllms_limits(case):
    c = case_check.check(case)
    assert features.features(case) <= set(features.FEATURE_SPACE)
    assert c["max_cpu_loras"] >= c["max_loras"]
    for live in _scheduled(case):
        assert len(live) <= c["max_num_seqs"]  # each live request holds one of max_num_seqs indices
    json.dumps(case.to_dict())  # plain JSON


def test_a_request_in_its_prompt_is_scheduled_at_most_the_rest_of_it():
    """vLLM's scheduler gives a request in its prompt at most the rest of it (``case_check._check_chunks``). ``move`` re-ran
    the last step's token counts: a 2-token chunk of a 3-token prompt ran 2 tokens again, past the prompt, and the
    prompt-logprobs worker returned a row for a position past it (a state violation, 0.33.0's clean campaign, 98
    examples). These 300 cases (prompt scoring as 0.33's, which draws chunked prompts 3 times in 4) had 5 such; a
    later chunk or a finished request's id reused, fine."""
    bad = []

    @seed(0)
    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(cases.vllm_engine_cases(prompt_scoring=prompt_scores.Scoring("rows", False)))
    def collect(case):
        try:
            case_check._check_chunks(case.ops)
        except InvalidCase as e:
            bad.append(str(e))
    collect()
    assert not bad, bad[:3]
    ok = [{"op": "step", "finish": [], "reqs": [{"id": "a", "lora": 1, "tokens": 2, "prompt": 5}]},
          {"op": "step", "finish": [], "reqs": [{"id": "a", "lora": 1, "tokens": 3}]},
          {"op": "step", "finish": [], "reqs": [{"id": "a", "lora": 1, "tokens": 2, "drafts": 1}]},
          {"op": "step", "finish": ["a"], "reqs": [{"id": "a", "lora": 1, "tokens": 4, "prompt": 4}]}]
    case_check.check(_case(ops=ok))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases.vllm_engine_cases())
def test_pinned_adapters_never_leave_a_step_without_a_slot(case):
    """vLLM refuses (RuntimeError) a step needing more unpinned slots than there are: never drawn."""
    _pins_fit(case)


def _pins_fit(case) -> None:
    pinned: set = set()
    for op in case.ops:
        if op["op"] == "pin":
            pinned.add(op["id"])
        elif op["op"] == "remove":
            pinned.discard(op["id"])
        elif op["op"] == "dummy_run":
            pinned.clear()
        elif op["op"] == "step":
            batch = {r["lora"] for r in op["reqs"]} - {0}
            assert len(batch) + len(pinned - batch) <= case.config["max_loras"], (op, pinned)


def test_the_rules_reach_the_deep_states():
    """Over generated cases: a slot swap before an identical step, a request index reused, eviction pressure,
    a pin, a dummy run between steps."""
    seen: set = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(cases.vllm_engine_cases())
    def collect(case):
        seen.update(features.features(case))
    collect()
    for f in ("step=repeated", "step=index-reused", "state=more-adapters-than-cpu-slots", "state=pinned",
              "state=removed-in-use", "step=drafts", "step=prompt-logprobs", "op=dummy_run"):
        assert f in seen, f


def _dummy_run_meets_real_adapters(case) -> bool:
    """E1's state: a dummy run while a real adapter holding a warm-up id (1..max_loras) is registered and the
    CPU cache is full (a dummy then evicts it), or while an adapter is pinned. Registration modelled as vLLM's
    LRU of max_cpu_loras (pins kept); a dummy run removes every adapter."""
    c = case.config
    reg: list = []
    pinned: set = set()

    def touch(a):
        if a in reg:
            reg.remove(a)
        reg.append(a)
        while len(reg) > c["max_cpu_loras"] and any(x not in pinned for x in reg):
            reg.remove(next(x for x in reg if x not in pinned))
    for op in case.ops:
        if op["op"] == "add":
            touch(op["id"])
        elif op["op"] == "remove":
            reg[:] = [a for a in reg if a != op["id"]]
            pinned.discard(op["id"])
        elif op["op"] == "pin":
            pinned.add(op["id"])
        elif op["op"] == "step":
            for r in op["reqs"]:
                if r["lora"]:
                    touch(r["lora"])
        elif op["op"] == "dummy_run":
            if pinned or (len(reg) >= c["max_cpu_loras"] and any(a <= c["max_loras"] for a in reg)):
                return True
            reg, pinned = [], set()
    return False


def test_runtime_dummy_runs_meet_real_adapters_in_e1s_state():
    """The dummy-run rule comes before the adapter ops and is 3x as likely beside registered adapters: with it
    drawn last (after the deep-state rules came first), 0 of these 300 cases reached E1's state; now 6."""
    hits = []

    @seed(0)
    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(cases.vllm_engine_cases())
    def collect(case):
        hits.append(_dummy_run_meets_real_adapters(case))
    collect()
    assert sum(hits) >= 3, sum(hits)


def _case(config=None, ops=()):
    c = {"max_loras": 2, "max_cpu_loras": 2, "max_lora_rank": 8, "lora_dtype": "auto", "fully_sharded_loras": False,
         "specialize_active_lora": False, "target_modules": None, "max_num_seqs": 4, "max_num_batched_tokens": 8,
         "num_speculative_tokens": 1, "hidden": 16, "vocab": 32, "layout": {"qkv": "merged", "gate_up": "fused"},
         "seed": 0, "layers": ["qkv_proj"],
         "adapters": {"1": {"rank": 4, "alpha": 8, "rslora": False, "targets": ["q_proj"], "seed": 1}}}
    return Case("vllm_engine", {**c, **(config or {})}, tuple(ops))


@pytest.mark.parametrize("config, ops, words", [
    ({"layers": ["attn"]}, (), "layers"),
    ({"layout": {"qkv": "split", "gate_up": "fused"}}, (), "layout"),
    ({"adapters": {"1": {"rank": 16, "alpha": 8, "targets": ["q_proj"], "seed": 1}}}, (), "max_lora_rank=8"),
    ({"adapters": {"1": {"rank": 4, "alpha": 8, "targets": ["gate_proj"], "seed": 1}}}, (), "targets"),
    ({}, [{"op": "add", "id": 7}], "not in the config"),
    ({}, [{"op": "step", "finish": [], "reqs": [{"id": "a", "lora": 0, "tokens": 9}]}], "max_num_batched_tokens"),
    ({}, [{"op": "step", "finish": [], "reqs": [{"id": "a", "lora": 1, "tokens": 2, "drafts": 2}]}], "drafts"),
    ({}, [{"op": "dummy_run", "num_tokens": 0, "reqs": 1}], "dummy run"),
    ({}, [{"op": "evict"}], "unknown op"),
    ({}, [{"op": "step", "finish": [], "reqs": [{"id": "a", "lora": 1, "tokens": 2, "prompt": 3}]},
          {"op": "step", "finish": [], "reqs": [{"id": "a", "lora": 1, "tokens": 2}]}], "2 tokens with 1 of its prompt"),
    ({"dtype": "float32"}, (), "dtype"),
    ({"dtype": "float16", "lora_dtype": "bfloat16"}, (), "lora_dtype 'auto' or the model's"),
])
def test_invalid_cases_are_refused_with_the_rule(config, ops, words):
    with pytest.raises(InvalidCase, match=words):
        case_check.check(_case(config, ops))


def test_the_model_dtype_follows_the_device_and_adapter_weights_are_exact_in_it():
    """bfloat16 only where Triton runs compiled (the campaign's device comes as cases(..., device=)); the PEFT
    weights are exact in the model's dtype, so vLLM's cast to it changes nothing the float64 reference uses."""
    from fuzzrunner.target import Target
    target = Target("vllm_engine", "cases only", cases=cases.vllm_engine_cases, run=lambda case, ctx: None)

    def dtypes(device):
        seen = set()

        @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(target.strategy((), 8, device=device))  # as a campaign asks its target for cases
        def draw(case):
            case_check.check(case)
            seen.add((case.config["dtype"], case.config["lora_dtype"]))
        draw()
        return seen
    assert {d for d, _ in dtypes("cpu")} == {"float16"}
    on_gpu = dtypes("cuda")
    assert {d for d, _ in on_gpu} == {"float16", "bfloat16"} and all(lo in ("auto", d) for d, lo in on_gpu)
    c = _case({"dtype": "bfloat16", "lora_dtype": "auto"}).config
    case_check.check(_case({"dtype": "bfloat16", "lora_dtype": "bfloat16"}))
    for a, b in adapters.weights(c, c["adapters"]["1"]).values():
        assert torch.equal(a, a.bfloat16().float()) and torch.equal(b, b.bfloat16().float())
    assert case_check.check(_case()).get("dtype", "float16") == "float16"  # a case from before dtypes: float16


def test_the_layouts_pack_as_vllms_llama_does():
    assert model.packing({"qkv": "merged", "gate_up": "merged"})["qkv_proj"] == ("q_proj", "k_proj", "v_proj")
    assert model.packing({"qkv": "fused", "gate_up": "merged"})["qkv_proj"] == ("qkv_proj",)
    shapes = model.sub_shapes(_case().config)
    assert shapes["q_proj"] == (16, 16) and shapes["k_proj"] == (8, 16) and shapes["gate_up_proj"] == (64, 16)
    assert shapes["embed_tokens"] == (16, 32) and shapes["lm_head"] == (32, 16)


def test_the_deployment_filter_wraps_a_module_by_its_name_or_a_packed_sub_module():
    c = _case({"target_modules": ["q_proj", "lm_head"]}).config
    assert wrapped_modules(c) == {"qkv_proj", "lm_head"}
    assert wrapped_modules(_case().config) == set(model.PATHS)


def test_an_adapter_folder_is_what_peft_writes_and_its_delta_is_scaled_b_a_x():
    load_file = pytest.importorskip("safetensors.torch", reason="safetensors comes with a vLLM set-up").load_file
    c = _case({"adapters": {"1": {"rank": 4, "alpha": 8, "rslora": True, "targets": ["q_proj", "embed_tokens"],
                                  "seed": 3}}}).config
    spec = c["adapters"]["1"]
    d = adapters.folder(c, spec)
    with open(os.path.join(d, "adapter_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    assert cfg["r"] == 4 and cfg["use_rslora"] and sorted(cfg["target_modules"]) == ["embed_tokens", "q_proj"]
    t = load_file(os.path.join(d, "adapter_model.safetensors"))
    a, b = t["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"], \
        t["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
    assert a.shape == (4, 16) and b.shape == (16, 4)
    assert t["base_model.model.model.embed_tokens.lora_embedding_A"].shape == (4, 32)
    deltas = adapters.Deltas(c, model.packing(c["layout"]), set(model.PATHS))
    x = torch.randn(2, 16)
    d_qkv = deltas.linear("qkv_proj", 1, x)
    assert d_qkv.shape == (2, 32)  # q (16) + k (8) + v (8): only q has weights
    want = (8 / 2) * (x.double() @ a.double().T @ b.double().T)  # rsLoRA: alpha / sqrt(rank)
    torch.testing.assert_close(d_qkv[:, :16], want)
    assert d_qkv[:, 16:].abs().max() == 0
    assert deltas.linear("qkv_proj", 0, x).abs().max() == 0  # no adapter: no delta
    assert adapters.Deltas(c, model.packing(c["layout"]), {"lm_head"}).linear("qkv_proj", 1, x).abs().max() == 0


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases.vllm_engine_cases(runners=("v2", "v1")))
def test_v1_runner_cases_are_valid_and_draw_its_knobs(case):
    """Where the release has the V1 runner, cases draw it (v1_runner.py): its graph knobs are vLLM's names and
    sizes within the batch; its requests draw prompt logprobs and chunked prefills (v1_prompt_logprobs.py), never
    the V2 runner's prompt scoring (score ids, a start)."""
    c = case_check.check(case)
    assert features.features(case) <= set(features.FEATURE_SPACE)
    _pins_fit(case)
    for live in _scheduled(case):
        assert len(live) <= c["max_num_seqs"]
    if c.get("runner") == "v1":
        assert c["cudagraph_mode"] in case_check.GRAPH_MODES
        assert all(1 <= n <= c["max_num_batched_tokens"] for n in c["cudagraph_capture_sizes"])
        assert not any("score_ids" in r or "prompt_start" in r for op in case.ops if op["op"] == "step"
                       for r in op["reqs"])
    else:
        assert "cudagraph_mode" not in c


def test_v1_runner_cases_come_only_where_asked_and_reach_graphs_and_reorder():
    seen: set = set()

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(cases.vllm_engine_cases(runners=("v2", "v1")))
    def collect(case):
        seen.update(features.features(case))
    collect()
    assert {"runner=v1", "runner=v1-graphs", "runner=v1-reorder", "runner=v1-prompt-logprobs"} <= seen
    assert "step=chunked-prompt" in seen

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(cases.vllm_engine_cases())
    def v2_only(case):
        assert case.config.get("runner", "v2") == "v2"
    v2_only()


@pytest.mark.parametrize("bad, message", [({"runner": "v3"}, "runner 'v3'"),
                                          ({"cudagraph_mode": "ALL"}, "cudagraph_mode 'ALL'"),
                                          ({"cudagraph_capture_sizes": [0]}, "cudagraph_capture_sizes [0]")])
def test_bad_runner_knobs_are_refused_with_the_rule(bad, message):
    from hypothesis import find
    case = find(cases.vllm_engine_cases(runners=("v1",)), lambda c: True)
    with pytest.raises(InvalidCase, match=message.replace("[", r"\[").replace("]", r"\]")):
        case_check.check(Case(case.target, {**case.config, **bad}, case.ops, ()))


def test_a_full_decode_graph_smaller_than_a_decode_step_is_refused():
    """vLLM refuses it at start-up (CompilationConfig.adjust_cudagraph_sizes_for_spec_decode: ValueError): a case
    error, never drawn."""
    from hypothesis import find
    case = find(cases.vllm_engine_cases(runners=("v1",)), lambda c: c.config["num_speculative_tokens"] == 2)
    bad = {**case.config, "cudagraph_mode": "FULL", "cudagraph_capture_sizes": [1, 2]}
    with pytest.raises(InvalidCase, match="at least 1 \\+ num_speculative_tokens = 3"):
        case_check.check(Case(case.target, bad, case.ops, ()))
    case_check.check(Case(case.target, {**bad, "cudagraph_mode": "PIECEWISE"}, case.ops, ()))


def test_v2_graph_cases_come_only_where_the_v2_runner_captures_lora_graphs():
    """Where the V2 runner has LoRA capture cases (0.24 on: v2_graphs.py), V2-runner cases draw the graph knobs; their
    steps draw no padding (the dispatch pads); V1-runner cases keep theirs."""
    seen: set = set()

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None,
              derandomize=True)
    @given(cases.vllm_engine_cases(runners=("v2", "v1"), v2_graphs=True))
    def collect(case):
        c = case_check.check(case)
        seen.update(features.features(case))
        if c.get("runner", "v2") == "v2" and c.get("cudagraph_mode", "NONE") != "NONE":
            assert c["cudagraph_mode"] in case_check.GRAPH_MODES and "reorder_threshold" not in c
            assert all(op.get("pad", 0) == 0 for op in case.ops if op["op"] == "step")
    collect()
    assert {"runner=v2-graphs", "graphs=specialize-lora-off", "runner=v1-graphs"} <= seen, seen

# -- the MoE block (moe.py) -----------------------------------------------------------------------------------
MOE = {"moe": {"experts": 64, "top_k": 2}, "layers": ["experts"],
       "adapters": {"1": {"rank": 4, "alpha": 8, "rslora": False, "targets": ["q_proj", "experts"], "seed": 1}}}


@pytest.mark.parametrize("config, words", [
    ({"layers": ["experts"]}, "needs a moe block"),
    ({**MOE, "moe": {"experts": 4, "top_k": 2}}, "experts"),
    ({**MOE, "moe": {"experts": 64, "top_k": 3}}, "top_k"),
    ({**MOE, "fully_sharded_loras": True}, "fully_sharded_loras to false"),
    ({**MOE, "moe": {"experts": 64, "top_k": 2, "format": "fused"}}, "format"),
    ({**MOE, "moe": {"experts": 64, "top_k": 2, "layout": "3d"}}, "format"),
    ({"adapters": {"1": {"rank": 4, "alpha": 8, "targets": ["experts"], "seed": 1}}}, "targets"),
])
def test_invalid_moe_cases_are_refused_with_the_rule(config, words):
    with pytest.raises(InvalidCase, match=words):
        case_check.check(_case(config))


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(cases.vllm_engine_cases())
def test_moe_cases_are_drawn_valid_without_fully_sharded_loras(case):
    c = case_check.check(case)
    if c.get("moe"):
        assert "experts" in c["layers"] and not c["fully_sharded_loras"]
    else:
        assert "experts" not in c["layers"] and all("experts" not in a["targets"] for a in c["adapters"].values())


def test_vllm_takes_its_naive_moe_paths_only_for_sparse_enough_batches():
    from targets.vllm_engine import moe
    c = case_check.check(_case(MOE)).copy()
    assert moe.naive(c, 8) and not moe.naive(c, 9)  # base: rows * 2 * 4 <= 64; LoRA: rows * 2 * 8 <= 64 * 2
    assert moe.naive({**c, "max_loras": 1}, 4) and not moe.naive({**c, "max_loras": 1}, 5)  # LoRA: 5 * 16 > 64
    assert not moe.naive({**c, "fully_sharded_loras": True}, 1)  # fully sharded: always the sorted path


def test_a_moe_adapter_folder_is_what_peft_writes_for_mixtral_and_the_reference_is_the_gated_block():
    load_file = pytest.importorskip("safetensors.torch", reason="safetensors comes with a vLLM set-up").load_file
    from targets.vllm_engine import moe
    c = case_check.check(_case(MOE))
    spec = c["adapters"]["1"]
    with open(os.path.join(adapters.folder(c, spec), "adapter_config.json"), encoding="utf-8") as f:
        assert json.load(f)["target_modules"] == ["q_proj", "w1", "w2", "w3"]
    t = load_file(os.path.join(adapters.folder(c, spec), "adapter_model.safetensors"))
    name = "base_model.model.model.layers.0.block_sparse_moe.experts.63"
    assert t[f"{name}.w1.lora_A.weight"].shape == (4, 16) and t[f"{name}.w2.lora_B.weight"].shape == (16, 4)
    assert sum(k.startswith("base_model.model.model.layers.0.block_sparse_moe.") for k in t) == 64 * 3 * 2
    # the reference: one expert (top_k 1, its logit the largest), against the gated MLP written out
    torch.manual_seed(0)
    x, w13, w2 = torch.randn(1, 16), torch.randn(64, 32, 16), torch.randn(64, 16, 16)
    logits = torch.full((1, 64), -5.0)
    logits[0, 7] = 3.0
    lora = adapters.expert_weights(c, spec)
    got = moe.reference(x, logits, 1, w13.double(), w2.double(), lora, 2.0)
    (a1, b1), (a2, b2), (a3, b3) = (lora[p] for p in ("w1", "w2", "w3"))
    xd = x[0].double()
    g = (w13[7, :16].double() + 2 * b1[7].double() @ a1[7].double()) @ xd
    u = (w13[7, 16:].double() + 2 * b3[7].double() @ a3[7].double()) @ xd
    want = (w2[7].double() + 2 * b2[7].double() @ a2[7].double()) @ (torch.nn.functional.silu(g) * u)
    torch.testing.assert_close(got[0], want)
    assert adapters.expert_weights(c, {**spec, "targets": ["q_proj"]}) is None


def _peft_delta(a_weight: torch.Tensor, b_weight: torch.Tensor, experts: int) -> torch.Tensor:
    """[E, out, in]: PEFT's ``ParamWrapper.get_delta_weight`` for a 3D parameter, unscaled, re-stated (peft/tuners/
    lora/layer.py: ``A.reshape(E, -1, in)``, ``B.reshape(out, -1, E)``, ``einsum("o r e, e r i -> e i o")``), in
    vLLM's [out, in] orientation."""
    a = a_weight.reshape(experts, -1, a_weight.shape[-1])
    b = b_weight.reshape(b_weight.shape[0], -1, experts)
    return torch.einsum("o r e, e r i -> e i o", b.double(), a.double()).transpose(1, 2)


def test_a_3d_moe_adapter_folder_is_what_peft_writes_for_stacked_experts_and_its_experts_share_the_gate_up_a():
    """The 3D format (FusedMoE3DWithLoRA): two tensor pairs, ``experts.base_layer`` (gate_up_proj) and ``experts``
    (down_proj), whose PEFT delta per expert is the reference's: gate = the first half of gate_up's rows."""
    import sys

    from targets.vllm_lora import site
    sys.path.extend(str(p) for p in site.candidate_paths() or () if str(p) not in sys.path)  # a set-up's safetensors
    load_file = pytest.importorskip("safetensors.torch", reason="safetensors comes with a vLLM set-up").load_file
    c = case_check.check(_case({**MOE, "moe": {"experts": 64, "top_k": 2, "format": "3d"}}))
    spec = c["adapters"]["1"]
    with open(os.path.join(adapters.folder(c, spec), "adapter_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    assert cfg["target_modules"] == ["q_proj"] and cfg["target_parameters"] == ["experts.gate_up_proj",
                                                                               "experts.down_proj"]
    t = load_file(os.path.join(adapters.folder(c, spec), "adapter_model.safetensors"))
    name = "base_model.model.model.layers.0.block_sparse_moe.experts"
    assert sorted(k for k in t if ".experts" in k) == [f"{name}.{s}lora_{m}.weight" for s in ("base_layer.", "")
                                                       for m in "AB"]
    assert t[f"{name}.base_layer.lora_A.weight"].shape == (64 * 4, 16)
    assert t[f"{name}.base_layer.lora_B.weight"].shape == (32, 4 * 64)
    assert t[f"{name}.lora_A.weight"].shape == (64 * 4, 16) and t[f"{name}.lora_B.weight"].shape == (16, 4 * 64)
    lora = adapters.expert_weights(c, spec)
    gate_up = _peft_delta(t[f"{name}.base_layer.lora_A.weight"], t[f"{name}.base_layer.lora_B.weight"], 64)
    down = _peft_delta(t[f"{name}.lora_A.weight"], t[f"{name}.lora_B.weight"], 64)
    for proj, want in (("w1", gate_up[:, :16]), ("w3", gate_up[:, 16:]), ("w2", down)):
        a, b = lora[proj]
        torch.testing.assert_close(b.double() @ a.double(), want)
    assert lora["w1"][0] is lora["w3"][0]  # one A for the fused gate_up parameter
    assert model.arch(c) == model.ARCH_3D and model.arch(case_check.check(_case(MOE))) == model.ARCH


def test_moe_blocks_draw_both_adapter_formats_on_each_device_of_devices_3d_and_the_2d_one_elsewhere():
    """Half the MoE blocks of a campaign on a device of moe.DEVICES_3D are 3D (FusedMoE3DWithLoRA), 2D only on a
    device of moe.DEVICES without it; cuda joined DEVICES_3D when scripts/gpu/vllm_engine_moe3d.py passed on an H100."""
    from targets.vllm_engine import moe
    seen: dict = {"cpu": set(), "cuda": set()}

    def collector(device: str):
        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None,
                  derandomize=True)
        @given(cases.vllm_engine_cases(device=device))
        def collect(case):
            c = case_check.check(case)
            if c.get("moe"):
                seen[device].add(c["moe"].get("format", "2d"))
                assert ("moe=3d" in features.features(case)) == (c["moe"].get("format") == "3d")
        return collect
    for device in seen:
        collector(device)()
    for device, formats in seen.items():
        assert formats == ({"2d", "3d"} if device in moe.DEVICES_3D else {"2d"}), (device, seen)
    assert "cuda" in moe.DEVICES_3D


def test_the_restated_moe_align_block_size_gives_the_releases_own_example():
    """``_moe_C::moe_align_block_size`` re-stated (moe.align, 0.17 - 0.19's base experts on the CPU): the example of
    the release's own docstring (fused_moe/moe_align_block_size.py; experts 1 - 4 of 5, block 4): each expert's
    entries padded to a block with the sentinel 12, one expert per block, 16 entries after padding."""
    from targets.vllm_engine import moe
    topk = torch.tensor([[2, 3, 4], [1, 2, 4], [1, 3, 4], [1, 2, 3]], dtype=torch.int32)
    ids, experts, total = torch.full((27,), -7, dtype=torch.int32), torch.full((7,), -7, dtype=torch.int32), \
        torch.zeros(1, dtype=torch.int32)
    moe.align(topk, 5, 4, ids, experts, total)
    assert ids[:16].tolist() == [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12] and set(ids[16:].tolist()) == {12}
    assert experts[:4].tolist() == [1, 2, 3, 4] and total.tolist() == [16]


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st_experts=st.integers(1, 130), tokens=st.integers(1, 8), top_k=st.integers(1, 2), block=st.integers(1, 16),
       seed_=st.integers(0, 2 ** 16))
def test_the_restated_align_puts_every_entry_once_in_a_block_of_its_expert(st_experts, tokens, top_k, block, seed_):
    from targets.vllm_engine import moe
    g = torch.Generator().manual_seed(seed_)
    topk = torch.randint(0, st_experts, (tokens, top_k), generator=g, dtype=torch.int32)
    n = topk.numel() + st_experts * (block - 1)
    ids, experts, total = torch.full((n,), -1, dtype=torch.int32), torch.full((n // block + 1,), -1, dtype=torch.int32), \
        torch.zeros(1, dtype=torch.int32)
    moe.align(topk, st_experts, block, ids, experts, total)
    t, flat = int(total), topk.flatten().tolist()
    assert t % block == 0 and sorted(v for v in ids[:t].tolist() if v < len(flat)) == list(range(len(flat)))
    for b in range(t // block):
        assert all(v == len(flat) or flat[v] == int(experts[b]) for v in ids[b * block:(b + 1) * block].tolist())


@pytest.mark.parametrize("v1, v2_graphs, moe, scoring", [
    (False, True, True, True),    # 0.34: no V1 runner
    (True, True, True, True),     # 0.33
    (True, True, False, False),   # before MoE blocks and prompt scoring (0.2x)
    (True, False, False, False),  # no V2 graph manager
    (False, False, False, False),
])
def test_a_releases_declared_features_are_those_its_cases_can_give(v1, v2_graphs, moe, scoring):
    """A campaign lists the declared features it never reached: on 0.34 (no V1 runner) the V1 runner's three were
    listed every time, though no case there can reach them (second new-user trial). The space a release declares
    (``features.feature_space``, from what it has) holds every feature its cases give, and none of the parts it
    lacks."""
    space = set(features.feature_space(v1, v2_graphs, moe, scoring))
    assert space <= set(features.FEATURE_SPACE)
    lacks = {"runner=v1": v1, "runner=v1-reorder": v1, "runner=v2-graphs": v2_graphs, "moe=3d": moe,
             "layer=experts": moe, "step=prompt-start": scoring, "graphs=specialize-lora-off": v1 or v2_graphs}
    assert {f for f, has in lacks.items() if not has}.isdisjoint(space), space
    assert {f for f, has in lacks.items() if has} <= space
    strategy = cases.vllm_engine_cases(runners=("v2", "v1") if v1 else ("v2",), v2_graphs=v2_graphs, moe_blocks=moe,
                                       prompt_scoring=prompt_scores.Scoring("rows", False) if scoring else None)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(strategy)
    def each(case):
        assert features.features(case) <= space, features.features(case) - space
    each()


@pytest.mark.parametrize("knob, value", [
    ("max_loras", -3), ("max_loras", 0), ("max_lora_rank", 0), ("max_num_seqs", "4"), ("max_num_batched_tokens", 0),
    ("hidden", 1.5), ("vocab", True), ("num_speculative_tokens", -1), ("max_cpu_loras", 1), ("max_cpu_loras", None)])
def test_a_size_out_of_range_is_a_malformed_case_not_an_engine_crash(knob, value):
    """A corpus case with ``max_loras: -3`` (V2 runner, vLLM 0.34.0) was run: vLLM's ``LoRAConfig`` raised pydantic's
    ValidationError, reported as a ``crash`` finding of vLLM, where a malformed case is quarantined (new-user trial).
    Each config size out of range is refused as malformed (``InvalidCase``, not the release's ``UnsupportedCase``),
    naming the knob and the value; the generated cases pass (``test_generated_cases_are_valid_...``)."""
    from fuzzrunner.errors import UnsupportedCase
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs/findings/cases/triage/e1_v1_runner_dummy_batch_evicts_real_adapter.json")) as f:
        d = json.load(f)
    case_check.check(Case.from_dict(d))  # the case as written: valid (max_loras 2, max_cpu_loras 2)
    d["config"][knob] = value
    with pytest.raises(InvalidCase) as e:
        case_check.check(Case.from_dict(d))
    assert not isinstance(e.value, UnsupportedCase)
    assert str(e.value).startswith(f"{knob} {value!r}: an int >= "), str(e.value)
    d["config"][knob] = 2 if knob != "num_speculative_tokens" else 1
    d["config"]["adapters"]["1"]["rank"] = 0
    with pytest.raises(InvalidCase, match=r"adapter 1: rank 0: an int >= 1"):
        case_check.check(Case.from_dict(d))
