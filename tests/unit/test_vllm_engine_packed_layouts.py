"""The linear-attention layouts of the vllm_engine target's model (model.GDN: Qwen3.5's ``in_proj_qkvz``, whose two
packed names span four output slices), as far as they need no vLLM: the shapes, the float64 oracle's slices, the
cases that draw them (partial adapters included) and the labels of the crashes vLLM's releases give them."""

import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings

from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidCase
from fuzzrunner.target import _import_object

_import_object("targets.vllm_lora:vllm_available")  # puts the repository root (targets/) on sys.path

from targets.vllm_engine import adapters, case_check, cases, features, known, model  # noqa: E402
from targets.vllm_engine.runner import wrapped_modules  # noqa: E402

QKVZ = {"qkv": "merged", "gate_up": "fused", "gdn": "qkvz"}
SPLIT = {"qkv": "merged", "gate_up": "fused", "gdn": "split"}


def _config(layout=QKVZ, **over) -> dict:
    c = {"max_loras": 2, "max_cpu_loras": 2, "max_lora_rank": 8, "lora_dtype": "auto", "fully_sharded_loras": False,
         "specialize_active_lora": False, "target_modules": None, "max_num_seqs": 2, "max_num_batched_tokens": 8,
         "num_speculative_tokens": 0, "hidden": 16, "vocab": 32, "layout": layout, "seed": 0,
         "layers": sorted(model.GDN.get(layout.get("gdn", "none"), {})),
         "adapters": {"1": {"rank": 4, "alpha": 8, "rslora": False, "targets": ["in_proj_qkv", "in_proj_z"], "seed": 1},
                      "2": {"rank": 4, "alpha": 8, "rslora": False, "targets": ["in_proj_qkv"], "seed": 2}}}
    return {**c, **over}


def test_qwen35s_in_proj_qkvz_packs_two_names_over_four_output_slices():
    assert model.packing(QKVZ)["in_proj_qkvz"] == ("in_proj_qkv", "in_proj_z")
    assert model.gdn_sizes("in_proj_qkvz", QKVZ) == [8, 8, 16, 16]  # [k, k, v, v]: q and k of one size, v and z another
    shapes = model.sub_shapes(_config())
    assert shapes["in_proj_qkv"] == (32, 16) and shapes["in_proj_z"] == (16, 16)  # q + k + v rows; z rows
    split = model.packing(SPLIT)
    assert split["in_proj_qkv"] == ("in_proj_qkv",) and split["in_proj_z"] == ("in_proj_z",)
    assert model.gdn_sizes("in_proj_qkv", SPLIT) == [8, 8, 16]  # one name over three slices
    assert "in_proj_qkvz" not in model.packing({"qkv": "merged", "gate_up": "fused"})  # a layout from before: none
    assert model.path("in_proj_qkvz") == "model.layers.0.linear_attn.in_proj_qkvz"
    assert wrapped_modules(_config(target_modules=["in_proj_z"])) == {"in_proj_qkvz"}  # by a packed name


def test_each_output_slice_gets_the_delta_of_the_name_covering_it_and_none_for_a_name_not_targeted():
    c = _config()
    d = adapters.Deltas(c, model.packing(c["layout"]), {"in_proj_qkvz"})
    x = torch.randn(3, 16)
    full, partial = d.linear("in_proj_qkvz", 1, x), d.linear("in_proj_qkvz", 2, x)
    assert full.shape == partial.shape == (3, 48)
    w1, w2 = adapters.weights(c, c["adapters"]["1"]), adapters.weights(c, c["adapters"]["2"])
    for cols, (a, b), got in ((slice(0, 32), w1["in_proj_qkv"], full), (slice(32, 48), w1["in_proj_z"], full),
                              (slice(0, 32), w2["in_proj_qkv"], partial)):
        torch.testing.assert_close(got[:, cols], 2.0 * (x.double() @ a.double().T @ b.double().T))
    assert partial[:, 32:].abs().max() == 0  # in_proj_z not targeted: its slice keeps the base output
    assert "in_proj_z" not in w2


def test_a_linear_attention_layout_is_checked():
    case_check.check(Case("vllm_engine", _config(), (), ()))
    case_check.check(Case("vllm_engine", _config(SPLIT), (), ()))
    with pytest.raises(InvalidCase, match="gdn"):
        case_check.check(Case("vllm_engine", _config({**QKVZ, "gdn": "interleaved"}, layers=["qkv_proj"]), (), ()))
    with pytest.raises(InvalidCase, match="layers"):  # the module of a layout the case does not have
        case_check.check(Case("vllm_engine", _config(SPLIT, layers=["in_proj_qkvz"]), (), ()))
    with pytest.raises(InvalidCase, match="targets"):
        case_check.check(Case("vllm_engine", _config({"qkv": "merged", "gate_up": "fused"}, layers=["qkv_proj"]), (),
                              ()))


def test_cases_draw_the_packed_layout_with_partial_adapters_and_run_its_module():
    seen = {"qkvz": 0, "split": 0, "partial": 0}

    @seed(0)
    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(cases.vllm_engine_cases())
    def collect(case):
        c = case_check.check(case)
        g = c["layout"].get("gdn")
        if g:
            seen[g] += 1
            assert set(model.gdn(c["layout"])) <= set(c["layers"])  # its module(s) run in every forward
        if "adapter=packed-partial" in features.features(case):
            seen["partial"] += 1
    collect()
    assert seen["qkvz"] >= 30 and seen["split"] >= 10 and seen["partial"] >= 15, seen


def _crash(kernel: str, message: str, layout=QKVZ, where="vllm/lora/layers/column_parallel_linear.py:280") -> dict:
    return {"violation": {"tool": "python", "kind": "crash", "kernel": kernel, "location": where,
                          "message": f"op 0: {kernel}: {message}", "details": {"op_index": 0}},
            "case": {"config": _config(layout), "ops": [{"op": "step", "reqs": []}]}}


@pytest.mark.parametrize("kernel, message, bug", [
    ("IndexError", "list index out of range", "Q1"),  # 0.20: set_lora's lora_a[2] (a warm-up's dummy adapter)
    ("RuntimeError", "The size of tensor a (8) must match the size of tensor b (32) at non-singleton dimension 0",
     "Q1"),  # 0.20: set_lora copies in_proj_qkv's B (q + k + v rows) into the q slice (an adapter's)
    ("AttributeError", "'NoneType' object has no attribute 'shape'", "Q2"),          # 0.21 - 0.28: #47639
    ("ValueError", "Cannot determine how to split lora_b with 16 rows into 4 slices", "Q3")])  # 0.29 on: #57851
def test_the_packed_crashes_are_labelled_by_release_form(kernel, message, bug):
    assert known.known_bug(_crash(kernel, message), logits_mapped_per_row=True) == bug
    assert known.label(_crash(kernel, message), logits_mapped_per_row=True)["id"] == bug
    # the same exception elsewhere, or without the packed layout, is not that bug
    assert known.known_bug(_crash(kernel, message, layout=SPLIT), logits_mapped_per_row=True) is None
    assert known.known_bug(_crash(kernel, message, where="vllm/lora/model_manager.py:10"),
                           logits_mapped_per_row=True) is None
