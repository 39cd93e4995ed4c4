"""#27597 (docs/sglang.md, Triage): a campaign on 0.5.12 crashed in ``validate_lora_batch``'s assertion ("LoRA ID ...
not found in lora_refs", ``lora_manager.py:275``) after a ``--max-loaded-loras`` eviction during a step, and nothing
named it. The admission of 0.5.5 - 0.5.13.post1 counts a finished request's adapter as running until
``update_running_batch`` drops the request; SGLang's PR #27597 (0.5.14) counts unfinished requests only. The crash is
that bug where the release's files have those lines, and nothing where they do not (without SGLang: the release's files
are written here)."""

import json
from importlib import import_module
from pathlib import Path

known = import_module("fuzzrunner.targets.sglang_engine.known")
esweep = import_module("fuzzrunner.targets.sglang_engine.sweep")
site = import_module("fuzzrunner.targets.sglang_lora.site")
sweep = esweep.lora_sweep
SEED = Path(__file__).resolve().parents[2] / "targets" / "sglang_engine" / "seeds" / "finished_adapter_unloaded_27597.json"


def _release(tmp_path: Path, v: str, scheduler: str, manager: str = f"assert x, '{sweep.LORA_REFS_ASSERT}.'") -> None:
    srt = tmp_path / v / "site" / "sglang" / "srt"
    (srt / "managers").mkdir(parents=True)
    (srt / "lora").mkdir()
    (srt / "managers" / "scheduler.py").write_text(scheduler + "\n")
    (srt / "lora" / "lora_manager.py").write_text(manager + "\n")
    (srt / "lora" / "mem_pool.py").write_text("class LoRAMemoryPool: ...\n")  # a set-up tree


def _finding(release: str, message: str, faults=()) -> dict:
    sig = {"tool": "python", "kind": "crash", "kernel": "AssertionError", "location": "lora_manager.py:275",
           "tensor": "", "site": "lora_manager.py::LoRAManager.validate_lora_batch"}
    case = json.loads(SEED.read_text())
    return {"signature": sig, "violation": dict(sig, message=message), "message": message,
            "case": dict(case, faults=list(faults)), "code_under_test": {"engine": "sglang", "release": release}}


def test_the_lora_refs_assertion_is_27597_where_the_admission_counts_finished_requests(tmp_path, monkeypatch):
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    _release(tmp_path, "v5", "lora_set = set([req.lora_id for req in self.running_batch.reqs])")  # 0.5.5 - 0.5.7
    _release(tmp_path, "v12", "running_loras = {req.lora_id for req in self.running_batch.reqs}")  # 0.5.8 - 0.5.13
    _release(tmp_path, "v14", "running_loras = {\n    req.lora_id for req in self.running_batch.reqs if not "
                              "req.finished()\n}")  # 0.5.14: the PR's line
    _release(tmp_path, "v23", "running_loras = {\n    req.lora_id for req in running_batch.reqs if not req.finished()\n}")
    crash = "op 3: AssertionError: LoRA ID 00000000000000000000000000000003 not found in lora_refs."
    assert [sweep.category(_finding(v, crash), v) for v in ("v5", "v12", "v14", "v23")] == \
        ["#27597", "#27597", "untriaged", "untriaged"]
    assert [esweep.present("#27597", v) for v in ("v5", "v12", "v14", "v23")] == [True, True, False, False]
    bug = known.label(_finding("v12", crash))
    assert bug and bug["id"] == "#27597" and "0.5.14" in bug["status"], bug
    assert known.label(_finding("v12", crash, faults=["logprob_cursor_not_advanced"])) is None
    # another crash of the admission is not this bug
    assert sweep.category(_finding("v12", "op 3: AssertionError: Number of pinned LoRA adapters in the batch (2) "
                                          "exceeds the total"), "v12") == "untriaged"


def test_the_seed_evicts_the_adapter_of_a_request_that_finishes_while_another_waits():
    """The seed's shape: a pinned adapter loaded (``validate_lora_batch`` skips its loop without one), two more under
    ``--max-loaded-loras 2``, and a step whose second request's implicit reload (0.5.12+) evicts the first request's
    adapter, an unload that waits for that request to finish: the next admission then meets its id."""
    d = json.loads(SEED.read_text())
    c = d["config"]
    assert d["faults"] == [] and c["max_loaded_loras"] == 2 and [a["pinned"] for a in c["adapters"].values()] == \
        [False, False, True]
    assert [o["op"] for o in d["ops"]] == ["load", "load", "load", "step"]
    assert d["ops"][-1]["reqs"] == ["a1", "a0"]  # a0 evicted by a1's load, reloaded by request 1: evicts a1
    assert c["backend"] == "csgmv" and c["graph_bs"] == 0  # no n-mask or #28371 first (the admission seeds' rule)
    assert "#27597" in esweep.SEEDS and esweep.SEEDS["#27597"] == SEED.stem
