"""The sweep table's verdicts (targets/vllm_lora/sweep.py) from campaign reports; no vLLM needed."""

import json

from fuzzrunner.target import _import_object

_import_object("targets.vllm_lora:vllm_available")  # puts the repository root (targets/) on sys.path

from targets.vllm_lora import sweep  # noqa: E402

V1_CASE = {"ops": [{"op": "capture", "size": 4, "key": 1, "reqs": 4}, {"op": "replay", "slots": [0, 0, -1]}]}


def _finding(tool, kind, tensor, op_index, ops, message="", examples=5):
    v = {"tool": tool, "kind": kind, "tensor": tensor, "message": message, "details": {"op_index": op_index}}
    return {"signature": {"tool": tool, "kind": kind, "tensor": tensor, "kernel": "k", "location": "l"},
            "violation": v, "others": [], "message": message, "case": {"config": {}, "ops": ops},
            "first_found_after_examples": examples, "found_after_s": 1.0}


def test_categories():
    dummy = [{"op": "dummy_run", "num_tokens": 1}]
    assert sweep.category(_finding("shadow", "uninitialized-read", "t", 0, dummy)) == "V0"
    assert sweep.category(_finding("numeric", "numeric-mismatch", "replay.y", 1, V1_CASE["ops"])) == "V1"
    assert sweep.category(_finding("invariants", "invariant-violation", "a", 1, V1_CASE["ops"],
                                   "grid z=1 is too narrow: ...")) == "V1"
    assert sweep.category(_finding("target", "crash", "", 1, V1_CASE["ops"])) == "target"
    assert sweep.category(_finding("numeric", "numeric-mismatch", "step.moe", 0, [{"op": "step"}])) == "M1"
    assert sweep.category(_finding("numeric", "numeric-mismatch", "step.y", 0, [{"op": "step"}])) == "other"


def test_verdicts_separate_the_replayed_seeds_from_what_the_search_found(tmp_path):
    seeds = tmp_path / "9.9.corpus" / "cases" / "vllm_lora"
    seeds.mkdir(parents=True)
    (seeds / "v1_x.json").write_text(json.dumps(V1_CASE))
    (seeds / "v0_x.json").write_text(json.dumps({"ops": [{"op": "dummy_run"}]}))
    report = {"runs": [{"examples": 10, "duration_s": 20.0, "findings": [
        _finding("numeric", "numeric-mismatch", "replay.y", 1, V1_CASE["ops"], examples=0),
        _finding("target", "crash", "", 0, [{"op": "step"}])],
        "replayed": [{"path": str(seeds / "v1_x.json"), "id": None, "still_failing": True},
                     {"path": str(seeds / "v0_x.json"), "id": None, "still_failing": False}]}]}
    (tmp_path / "9.9.json").write_text(json.dumps(report))
    row = sweep.verdicts(tmp_path, "9.9")
    assert row == "| 9.9 | 10 in 20 s | no | **reproduced** | – | – | – | 1 | – |"
    assert sweep.verdicts(tmp_path, "8.8").startswith("| 8.8 | no report")
