"""Bug-finding power: each oracle catches the planted fault it is meant for, deterministically,
and stays silent on the same case with the fault off."""

import pytest

from fuzzrunner import Case, replay
from fuzzrunner.finding import primary

CFG = {"max_loras": 2, "capture_sizes": [1, 2, 4, 8]}
ADD = {"op": "add_adapter", "adapter_id": 1, "rank": 4}
ADD2 = {"op": "add_adapter", "adapter_id": 2, "rank": 2}


def step(*reqs, op="step"):
    return {"op": op, "requests": [{"adapter_id": a, "tokens": list(range(1, n + 1))} for a, n in reqs]}


CASES = {
    # fault: (ops, oracle, expected (kind, tensor, kernel), location suffix)
    "dummy_run_skips_mapping": (
        [{"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}], "shadow",
        ("uninitialized-read", "embeddings_indices", "aten.add.Tensor"), "fuzzrunner/runner/punica.py"),
    "padding_not_mapped": (
        [step((0, 3))], "shadow",
        ("uninitialized-read", "embeddings_indices", "aten.add.Tensor"), "fuzzrunner/runner/punica.py"),
    "stale_after_all_no_lora": (
        [ADD, step((1, 3)), step((0, 3))], "shadow",
        ("stale-read", "token_meta.token_lora_mapping", "_lora_bgmv_kernel"), "fuzzrunner/kernels/lora_bgmv.py"),
    "graph_freezes_active_loras": (
        [ADD, ADD2, {"op": "capture", "size": 8}, step((0, 2), (1, 2), (2, 2), op="replay")], "numeric",
        ("numeric-mismatch", "hidden", "replay"), "float64 reference"),
    "mapping_cache_ignores_slot_changes": (  # 2 moves from slot 1 to slot 0 between two same mappings
        [ADD, ADD2, step((1, 1), (2, 1)), step((2, 2)), {"op": "remove_adapter", "adapter_id": 1}, ADD2,
         step((2, 2))], "numeric", ("numeric-mismatch", "hidden", "step"), "float64 reference"),
}


@pytest.mark.parametrize("fault", sorted(CASES))
def test_the_right_oracle_catches_each_fault(fault):
    ops, oracle, (kind, tensor, kernel), where = CASES[fault]
    vs = replay(Case("reference_runner", CFG, ops, [fault]), oracles=[oracle])
    assert vs, f"{oracle} missed {fault}"
    v = primary(vs)
    assert (v.kind, v.tensor, v.kernel) == (kind, tensor, kernel)
    assert v.location.startswith(where)
    assert replay(Case("reference_runner", CFG, ops), oracles=[oracle]) == []


def test_shadow_stale_report_names_the_op_that_last_wrote():
    ops, *_ = CASES["stale_after_all_no_lora"]
    v = primary(replay(Case("reference_runner", CFG, ops, ["stale_after_all_no_lora"]), oracles=["shadow"]))
    assert v.details["written_in_op"] == 1 and v.details["op_index"] == 2
    assert v.details["program_id"] == [0, 0, 0] and v.location == "fuzzrunner/kernels/lora_bgmv.py:28"
    assert "last written in op 1, not in this op 2" in v.message


def test_invariants_see_a_graph_too_narrow_for_the_replayed_slots():
    ops, *_ = CASES["graph_freezes_active_loras"]
    vs = replay(Case("reference_runner", CFG, ops, ["graph_freezes_active_loras"]), oracles=["invariants"])
    assert any(v.kind == "invariant-violation" and "too narrow" in v.message for v in vs)
    assert replay(Case("reference_runner", CFG, ops), oracles=["invariants"]) == []


def test_invariants_see_garbage_slots_of_an_unprogrammed_dummy_run():
    ops, *_ = CASES["dummy_run_skips_mapping"]
    vs = replay(Case("reference_runner", {**CFG, "seed": 1}, [ADD, step((1, 4))] + ops,
                     ["dummy_run_skips_mapping"]), oracles=["invariants", "shadow"])
    assert any(v.kind == "stale-read" for v in vs)


def test_poison_divergence_catches_a_stale_mapping_without_the_shadow():
    ops, *_ = CASES["stale_after_all_no_lora"]
    vs = replay(Case("reference_runner", CFG, ops, ["stale_after_all_no_lora"]), oracles=["poison"])
    assert {(v.kind, v.tensor) for v in vs} == {("poison-divergence", "hidden"), ("poison-divergence", "logits")}
    assert "token_meta.token_lora_mapping" in vs[0].message
    assert replay(Case("reference_runner", CFG, ops), oracles=["poison"]) == []


def test_poison_catches_an_unprogrammed_dummy_run_as_a_one_sided_failure():
    ops, *_ = CASES["dummy_run_skips_mapping"]
    vs = replay(Case("reference_runner", CFG, ops, ["dummy_run_skips_mapping"]), oracles=["poison"])
    assert any(v.kind == "poison-divergence" and "only the run under pattern" in v.message for v in vs)
