"""``sglang_engine``'s ``known_bugs`` (targets/sglang_engine/known.py): a campaign labels the SGLang bugs the sweep
triages, without SGLang (the release's files are written here)."""

import json
from importlib import import_module
from pathlib import Path

known = import_module("fuzzrunner.targets.sglang_engine.known")
esweep = import_module("fuzzrunner.targets.sglang_engine.sweep")
site = import_module("fuzzrunner.targets.sglang_lora.site")
CASE = Path(__file__).resolve().parents[2] / "docs" / "findings" / "cases" / "sglang_g3_embed_only_after_lm_head.json"


def _finding(release: str, faults=()) -> dict:
    case = json.loads(CASE.read_text())
    sig = {"tool": "numeric", "kind": "numeric-mismatch", "kernel": "step", "location": "float64 reference",
           "tensor": "step.logits"}
    return {"signature": sig, "violation": dict(sig), "case": dict(case, faults=list(faults)),
            "code_under_test": {"engine": "sglang", "release": release}}


def test_the_fault_free_triton_v2_campaigns_finding_is_labelled_g3_on_a_release_that_has_it(tmp_path, monkeypatch):
    """The fault-free triton_v2 campaign on 0.5.23 ended with one unlabelled finding (a numeric mismatch of
    step.logits, an embed_tokens-only adapter after an lm_head one in its slot): G3. Not on a release whose pool
    zeroes the buffers before loading (the patch), nor when a planted fault is on."""
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    zeroed = f"# {esweep.lora_sweep.EMBEDDING_ZEROED}\n"
    for v, text in (("has", "else:\n    " + zeroed), ("fixed", zeroed + "if lora_adapter.embedding_layers:\n")):
        pool = tmp_path / v / "site" / "sglang" / "srt" / "lora" / "mem_pool.py"
        pool.parent.mkdir(parents=True)
        pool.write_text("def get_embedding_lora_A_shape(self): ...\n" + text)
    bug = known.label(_finding("has"))
    assert bug and bug["id"] == "G3" and "sglang-g3" in bug["status"], bug
    assert known.label(_finding("fixed")) is None
    assert known.label(_finding("has", faults=["unload_keeps_slot"])) is None
    assert known.label(dict(_finding(""), code_under_test={}), version="has")["id"] == "G3"  # the target's release


def test_every_bug_the_sweep_has_a_seed_for_is_named():
    assert set(esweep.KNOWN) <= set(known.BUGS)
    assert all(len(v) == 4 and all(v) for v in known.BUGS.values())
