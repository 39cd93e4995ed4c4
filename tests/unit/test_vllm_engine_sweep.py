"""The ``vllm_engine`` release sweep: its triage (targets/vllm_engine/known.py, sweep.py) and its source verdicts
(source_facts.py); no vLLM import (the source verdicts read the pinned release's files where set up)."""

import json

import pytest

from fuzzrunner.target import _import_object

_import_object("targets.vllm_lora:vllm_available")  # puts the repository root (targets/) on sys.path

from targets.vllm_engine import known, source_facts, sweep  # noqa: E402
from targets.vllm_lora.source_facts import _Tree  # noqa: E402

PINNED = "0.33.0"


def _finding(kind, tool, op_index, ops, *, kernel="", location="", tensor="", message="", config=None, examples=3):
    v = {"tool": tool, "kind": kind, "kernel": kernel, "location": location, "tensor": tensor, "message": message,
         "details": {"op_index": op_index}}
    return {"signature": {"tool": tool, "kind": kind, "tensor": tensor, "kernel": kernel, "location": location},
            "violation": v, "case": {"config": config or {}, "ops": ops},
            "first_found_after_examples": examples, "found_after_s": 1.0}


PINNED_THEN_DUMMY = [{"op": "add", "id": 4}, {"op": "pin", "id": 4}, {"op": "dummy_run", "num_tokens": 2}]


def test_e1s_pinned_form_is_known_in_both_of_convert_mappings_spellings():
    # 0.28 and later: a dict of ids (KeyError); 0.24: lora_index_to_id.index (ValueError "... is not in list")
    for kernel, where in (("KeyError", "vllm/lora/punica_wrapper/utils.py:101"),
                          ("ValueError", "vllm/lora/punica_wrapper/utils.py:96")):
        f = _finding("crash", "python", 2, PINNED_THEN_DUMMY, kernel=kernel, location=where)
        assert known.known_bug(f, logits_mapped_per_row=True) == "E1"
    # a ValueError elsewhere, or in a step, is not E1
    assert known.known_bug(_finding("crash", "python", 2, PINNED_THEN_DUMMY, kernel="ValueError",
                                    location="vllm/lora/model_manager.py:10"), logits_mapped_per_row=True) is None
    assert known.known_bug(_finding("crash", "python", 0, [{"op": "step"}], kernel="ValueError",
                                    location="vllm/lora/punica_wrapper/utils.py:96"),
                           logits_mapped_per_row=True) is None


def test_a_memory_finding_in_a_dummy_run_is_v0_only_where_the_release_programs_nothing_for_it():
    f = _finding("uninitialized-read", "shadow", 0, [{"op": "dummy_run", "num_tokens": 2}],
                 tensor="token_mapping_meta.active_lora_ids")
    assert sweep.category(f, True, dummy_maps_nothing=True) == "V0"
    assert sweep.category(f, True, dummy_maps_nothing=False) == "other"
    assert sweep.category(dict(f, signature=dict(f["signature"], tool="target")), True, True) == "target"


def _cells(tmp_path, version: str) -> dict:
    """The row's cells by column name."""
    cells = [c.strip() for c in sweep.row(tmp_path, version).strip("|").split("|")]
    return dict(zip(["vLLM", "cases", *sweep.COLUMNS, "other", "errors"], cells))


def test_the_columns_are_every_known_bug():
    assert sorted(sweep.COLUMNS) == sorted(known.BUGS)
    assert set(sweep.REACH) | set(sweep.SEEDS) == set(known.BUGS)  # each bug: a seed, or what shows it


def test_the_row_gives_each_known_bug_a_verdict_seed_search_or_why_not(tmp_path, monkeypatch):
    seeds = tmp_path / "9.9.9.corpus" / "cases" / "vllm_engine"
    seeds.mkdir(parents=True)
    (seeds / "e1_x.json").write_text(json.dumps({"ops": PINNED_THEN_DUMMY}))
    (seeds / "p1_x.json").write_text(json.dumps({"ops": [{"op": "step", "n": 1}]}))
    (seeds / "s1_x.json").write_text(json.dumps({"ops": [{"op": "step", "n": 2}]}))
    seeded = _finding("crash", "python", 2, PINNED_THEN_DUMMY, kernel="KeyError", examples=0)
    searched = _finding("crash", "python", 2, PINNED_THEN_DUMMY + [{"op": "step"}], kernel="KeyError", examples=40)
    odd = _finding("numeric-mismatch", "numeric", 0, [{"op": "step"}], tensor="step.o_proj.adapter_rows", examples=7)
    broke = _finding("crash", "target", 0, [{"op": "step"}], examples=9)
    coverage = {"features": {"op=dummy_run": 3, "adapter=experts": 0, "step=chunked-prompt": 2}}
    report = {"runs": [{"examples": 50, "generated": 48, "duration_s": 90.4, "coverage": coverage,
                        "findings": [seeded, searched, odd, broke], "stop_reason": "budget",
                        "replayed": [{"path": str(seeds / "e1_x.json"), "still_failing": True},
                                     {"path": str(seeds / "p1_x.json"), "still_failing": False}],
                        "quarantined": [{"path": str(seeds / "s1_x.json"), "why": "s1_x.json: InvalidCase: "
                                                                                   "no drafts here"}]}]}
    (tmp_path / "9.9.9.json").write_text(json.dumps(report))
    cells = _cells(tmp_path, "9.9.9")
    assert cells["cases"] == "48 generated + 2 replayed in 90 s"
    assert cells["E1"] == "**yes** (search: 40 ex)"  # its seed and the search
    assert cells["P1"] == "no" and cells["S1"] == "n/a (refused: no drafts here)"
    assert cells["E2"] == "**budget ran out** (seed not run)"  # no seed replayed before the budget ended
    assert cells["R1"] == "n/a (not reached: adapter=experts, adapter=rslora)"  # no case could show it
    assert cells["L1"] == "not found"  # reached, not found
    assert cells["other"] == "1 to triage (7 ex)" and cells["errors"] == "1"
    # verdicts against the release's source: E1 found where the source has none, L1 not found where it has it
    monkeypatch.setattr(sweep, "_Tree", lambda v: True)
    monkeypatch.setattr(sweep, "facts", lambda v: {"E1": False, "L1": True, "P1": False})
    cells = _cells(tmp_path, "9.9.9")
    assert cells["E1"] == "**yes** (search: 40 ex) (source: absent)" and cells["L1"] == "not found (source: present)"
    assert cells["P1"] == "no"
    # on 0.15 - 0.21 E1's case fails as V0 (its dummy run reads never-written metadata): V0, not E1
    v0 = _finding("uninitialized-read", "shadow", 2, PINNED_THEN_DUMMY, tensor="token_mapping_meta.x", examples=0)
    report["runs"][0]["findings"] = [v0]
    (tmp_path / "9.9.9.json").write_text(json.dumps(report))
    monkeypatch.setattr(sweep, "known_flags", lambda v: {"logits_mapped_per_row": True, "dummy_maps_nothing": True})
    cells = _cells(tmp_path, "9.9.9")
    assert cells["E1"] == "no" and cells["V0"] == "**yes**" and cells["other"] == "none"
    (tmp_path / "1.0.0.log").write_text("fuzz: vllm_engine is not available: vLLM 1.0.0 has no V2 model runner "
                                        "LoraState (vllm.v1.worker.gpu.lora_utils)\n")
    refused = _cells(tmp_path, "1.0.0")
    assert all(refused[b] == "n/a" for b in sweep.COLUMNS)
    assert refused["other"].startswith("unsupported or not run: fuzz: vllm_engine is not available")


@pytest.mark.skipif(not _Tree(PINNED), reason=f"vLLM {PINNED} is not set up (scripts/setup.sh)")
def test_the_pinned_release_ships_e1_e2_p1_and_s1_by_source():
    f = source_facts.facts(PINNED)
    assert f["lora_state"] and f["add_dummy_skips_registered"] and f["v2_runtime_dummy_maps"]
    assert f["select_takes_count"] and not f["v1_runtime_dummy_maps"]  # 0.33's V1 runner maps none (count 0)
    assert f["target_modules"] and f["unguarded_first_lora"]
    assert (f["E1"], f["E2"], f["P1"], f["S1"]) == (True, True, True, True)
    assert not f["per_logits_row"]


def _tree(root, files: dict) -> None:
    for rel, text in files.items():
        f = root / "site" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)


OLD_MIXIN = '''class LoRAModelRunnerMixin:
    @contextmanager
    def maybe_select_dummy_loras(
        self,
        lora_config,
        num_scheduled_tokens,
        activate_lora: bool = True,
    ):
        lora_requests = {LoRARequest(f"warmup_{i}", i, "/not/a/real/path") for i in range(1, n + 1)}
'''
SKIP = "    def add_dummy_lora(self, lora_request, rank):\n        if lora_request.lora_int_id in self.list_adapters():\n"


def test_e1_by_source_follows_which_runners_runtime_dummy_run_asks_for_the_warmup_ids(tmp_path, monkeypatch):
    import targets.vllm_lora.source_facts as lora_facts
    monkeypatch.setattr(lora_facts, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    # 0.14-like: the V1 runner's _dummy_run calls the mixin, whose select takes no count (every warm-up id asked
    # for); the V2 runner calls it too, but only at start-up (no num_active_loras=max_loras)
    v1_call = "        with self.maybe_dummy_run_with_lora(\n"
    _tree(tmp_path / "1.14", {"vllm/lora/worker_manager.py": SKIP, "vllm/v1/worker/lora_model_runner_mixin.py": OLD_MIXIN,
                              "vllm/v1/worker/gpu_model_runner.py": v1_call,
                              "vllm/v1/worker/gpu/model_runner.py": v1_call})
    f = source_facts.facts("1.14")
    assert f["E1"] and f["v1_runtime_dummy_maps"] == "v1/worker/gpu_model_runner.py:1" and not f["v2_runtime_dummy_maps"]
    # 0.16-like: the select takes the count, the V1 runner's dummy batch asks for none
    _tree(tmp_path / "1.16", {"vllm/lora/worker_manager.py": SKIP,
                              "vllm/v1/worker/lora_model_runner_mixin.py": OLD_MIXIN.replace(
                                  "activate_lora: bool = True", "num_active_loras: int = 0"),
                              "vllm/v1/worker/gpu_model_runner.py": v1_call})
    assert not source_facts.facts("1.16")["E1"]
    # 0.24-like: the V2 runner's _dummy_run maps max_loras dummies
    _tree(tmp_path / "1.24", {"vllm/lora/worker_manager.py": SKIP,
                              "vllm/v1/worker/gpu/model_runner.py": "            num_active_loras=max_loras,\n"})
    assert source_facts.facts("1.24")["v2_runtime_dummy_maps"] == "v1/worker/gpu/model_runner.py:1"
    assert source_facts.facts("1.24")["E1"]


def test_older_releases_pinned_memory_questions_are_answered_as_vllms_cpu_platform_answers(monkeypatch):
    """0.17 - 0.2x ask ``is_pin_memory_available()`` at each call (imported by name), 0.22's ``convert_mapping``
    copies through ``async_tensor_h2d(..., pin_memory=PIN_MEMORY)`` (a default bound at definition): a CPU-only
    torch cannot pin, and every 0.22 case crashed "pin_memory=True requires a CUDA ... backend"."""
    import sys
    import types

    from targets.vllm_engine import vllm_env

    def h2d(data, dtype, device, pin_memory: bool = True):
        return pin_memory
    old = types.ModuleType("vllm._fuzzrunner_old_release")
    old.is_pin_memory_available = lambda: True
    old.async_tensor_h2d = h2d
    monkeypatch.setitem(sys.modules, old.__name__, old)
    monkeypatch.setattr(h2d, "__defaults__", (True,))
    vllm_env.unpin_host_memory()
    assert old.is_pin_memory_available() is False
    assert old.async_tensor_h2d([1], None, "cpu") is False


STEP = [{"op": "step", "finish": [], "reqs": [{"id": "a", "lora": 1, "tokens": 3, "prompt_logprobs": True}]}]


def test_a_prompt_logits_finding_is_p1_only_where_vllm_maps_no_prompt_rows_of_its_own():
    f = _finding("numeric-mismatch", "numeric", 0, STEP, tensor="step.prompt_logits[0].adapter_rows")
    assert known.known_bug(f, logits_mapped_per_row=True) == "P1"
    # under a fix of P1 (docs/findings/p1_prompt_logprobs_mapping.patch) the same finding is new: a planted fault's
    assert known.known_bug(f, logits_mapped_per_row=True, prompt_rows_mapped=True) is None
    # the worker's output (token ids, log-probabilities) is never P1: its rows' logits are checked on their own
    out = _finding("numeric-mismatch", "numeric", 0, STEP, tensor="step.prompt_logprobs.token_ids")
    assert known.known_bug(out, logits_mapped_per_row=True) is None


def test_a_v1_runner_prompt_logits_finding_is_p1_by_the_v1_runners_own_path_not_the_v2_workers():
    """P1's V1 form (vllm-project/vllm#51594: ``_get_prompt_logprobs_dict`` takes a request's prompt rows under the
    step's sampled-rows mapping; v1_prompt_logprobs.py): in a V1-runner case it is P1 unless the V1 runner maps the
    prompt rows itself (``v1_prompt_rows_mapped``: #51597's fix), whatever a fix of the V2 worker says; a V2-runner
    case is told by the V2 worker's flag alone."""
    v1 = _finding("numeric-mismatch", "numeric", 0, STEP, tensor="step.prompt_logits[0].adapter_rows",
                  config={"runner": "v1"})
    assert known.known_bug(v1, logits_mapped_per_row=True) == "P1"
    assert known.known_bug(v1, logits_mapped_per_row=True, prompt_rows_mapped=True) == "P1"  # the V2 patch
    assert known.known_bug(v1, logits_mapped_per_row=True, v1_prompt_rows_mapped=True) is None
    replay = _finding("numeric-mismatch", "numeric", 0, STEP, tensor="replay.prompt_logits[0].adapter_rows",
                      config={"runner": "v1", "specialize_active_lora": True})
    assert known.known_bug(replay, logits_mapped_per_row=True) == "P1"  # not V1: the logits run outside the graph
    v2 = _finding("numeric-mismatch", "numeric", 0, STEP, tensor="step.prompt_logits[0].adapter_rows")
    assert known.known_bug(v2, logits_mapped_per_row=True, v1_prompt_rows_mapped=True) == "P1"
    label = known.label(v1, logits_mapped_per_row=True)
    assert label is not None and "51594" in label["upstream"] and "V1 runner" in label["status"]


def test_prompt_logprobs_never_returned_are_l1_only_where_the_worker_skips_a_one_token_last_chunk():
    f = _finding("state-violation", "state", 2, STEP * 3, tensor="step.prompt_logprobs",
                 message="request 'a': its prompt completed this step and asked for prompt logprobs; the worker "
                         "returned none")
    assert known.known_bug(f, logits_mapped_per_row=True, drops_last_chunk=True) == "L1"
    assert known.known_bug(f, logits_mapped_per_row=True) is None  # 0.21 and later: a new bug


def test_the_label_names_each_known_bug_with_its_upstream_and_status_and_never_a_target_error():
    f = _finding("numeric-mismatch", "numeric", 0, STEP, tensor="step.prompt_logits[0].adapter_rows")
    label = known.label(f, logits_mapped_per_row=True)
    assert label is not None and label["id"] == "P1" and "53842" in label["upstream"] and label["status"]
    assert all(set(b) == {"title", "upstream", "status"} and all(b.values()) for b in known.BUGS.values())
    assert known.label(dict(f, signature={**f["signature"], "tool": "target"}), logits_mapped_per_row=True) is None
    assert known.label(f, logits_mapped_per_row=True, prompt_rows_mapped=True) is None


def test_a_sweep_row_triages_with_the_releases_own_flags(tmp_path, monkeypatch):
    """Each finding is triaged under the release's flags read from its files (source_facts.known_flags): a repeated
    batch after a removal is C1 where the mapping cache ignores the slots, to triage elsewhere (before, the sweep
    passed no C1 / R1 / M1 flags and left every C1 of 0.15 - 0.25 "to triage")."""
    step = {"op": "step", "finish": [], "reqs": [_req("r1", 3), _req("r2", 1, 2)]}
    ops = [{"op": "add", "id": 3}, step, {"op": "remove", "id": 3}, {"op": "add", "id": 3}, step]
    c1 = _finding("numeric-mismatch", "numeric", 4, ops, tensor="step.o_proj.adapter_rows", examples=7)
    (tmp_path / "0.99.0.json").write_text(json.dumps({"runs": [{"findings": [c1], "generated": 9, "duration_s": 5.0,
                                                                "examples": 9}]}))
    monkeypatch.setattr(sweep, "known_flags", lambda v: {"mapping_cache_ignores_slots": True})
    cells = _cells(tmp_path, "0.99.0")
    assert cells["C1"] == "**yes** (search: 7 ex)" and cells["other"] == "none"
    monkeypatch.setattr(sweep, "known_flags", lambda v: {})
    cells = _cells(tmp_path, "0.99.0")
    assert cells["C1"] == "not found" and cells["other"] == "1 to triage (7 ex)"


@pytest.mark.skipif(not all(_Tree(v) for v in ("0.17.0", "0.24.0", "0.26.0", "0.34.0")),
                    reason="vLLM 0.17.0, 0.24.0, 0.26.0 and 0.34.0 are not all set up (scripts/vllm_setup.sh)")
def test_the_source_flags_give_each_bugs_documented_range():
    """source_facts.known_flags (the sweep's triage) against known.BUGS' ranges: C1 0.12 - 0.25, M1 0.16 - 0.23,
    V0 0.15 - 0.21, W1 0.15 - 0.23, L1 to 0.17, R1 to 0.29, S1 to 0.33."""
    f = {v: source_facts.known_flags(v) for v in ("0.17.0", "0.24.0", "0.26.0", "0.34.0")}
    assert [f[v]["mapping_cache_ignores_slots"] for v in f] == [True, True, False, False]
    assert [f[v]["moe_ignores_no_lora"] for v in f] == [True, False, False, False]
    assert [f[v]["dummy_maps_nothing"] for v in f] == [True, False, False, False]
    assert [f[v]["graphs_capture_per_lora"] for v in f] == [False, True, True, True]
    assert [f[v]["drops_last_chunk"] for v in f] == [True, False, False, False]
    assert [f[v]["moe_drops_rslora"] for v in f] == [True, True, True, False]
    assert [f[v]["logits_mapped_per_row"] for v in f] == [False, False, False, True]


def test_a_v2_graph_replay_under_specialize_is_w1_before_lora_capture_cases_and_v1_after():
    f = _finding("numeric-mismatch", "numeric", 0, [{"op": "step"}], tensor="replay.qkv_proj.adapter_rows",
                 config={"specialize_active_lora": True, "cudagraph_mode": "FULL"})
    assert known.known_bug(f, logits_mapped_per_row=True) == "V1"
    assert known.known_bug(f, logits_mapped_per_row=True, graphs_capture_per_lora=False) == "W1"
    v1_runner = dict(f, case={"config": {"specialize_active_lora": True, "runner": "v1"}, "ops": [{"op": "step"}]})
    assert known.known_bug(v1_runner, logits_mapped_per_row=True, graphs_capture_per_lora=False) == "V1"
    assert known.label(f, logits_mapped_per_row=True, graphs_capture_per_lora=False)["id"] == "W1"


def _req(rid, lora, tokens=1):
    return {"id": rid, "lora": lora, "tokens": tokens, "drafts": 0, "prompt_logprobs": False}


MOE_ADAPTERS = {"1": {"rank": 4, "alpha": 8, "rslora": False, "targets": ["experts", "q_proj"]},
                "2": {"rank": 2, "alpha": 8, "rslora": True, "targets": ["experts"]},
                "3": {"rank": 2, "alpha": 8, "rslora": True, "targets": ["q_proj"]}}


def test_an_expert_rows_mismatch_is_r1_only_with_an_rslora_expert_adapter_where_pack_moe_drops_its_scaling():
    """R1 (#55545, fixed by #55548): pack_moe scales by alpha / rank. Only a step with a request of an rsLoRA adapter
    that has expert weights, on a release whose pack_moe drops the adapters' scaling, is R1; a planted fault's rows
    (fused_moe_swaps_gate_up) on a plain adapter, or on a release with the fix, are not."""
    def f(lora):
        return _finding("numeric-mismatch", "numeric", 0, [{"op": "step", "reqs": [_req("a", lora)]}],
                        tensor="step.experts.adapter_rows", config={"adapters": MOE_ADAPTERS})
    assert known.known_bug(f(2), logits_mapped_per_row=True, moe_drops_rslora=True) == "R1"
    assert known.known_bug(f(2), logits_mapped_per_row=True) is None  # 0.31 on, or R1's back-port
    assert known.known_bug(f(1), logits_mapped_per_row=True, moe_drops_rslora=True) is None  # a plain adapter
    assert known.known_bug(f(3), logits_mapped_per_row=True, moe_drops_rslora=True) is None  # rsLoRA, no experts
    # a 3D-format block (FusedMoE3DWithLoRA): its adapters never reach pack_moe, so an rsLoRA expert adapter's rows
    # there are not R1
    three_d = _finding("numeric-mismatch", "numeric", 0, [{"op": "step", "reqs": [_req("a", 2)]}],
                       tensor="step.experts.adapter_rows",
                       config={"adapters": MOE_ADAPTERS, "moe": {"experts": 64, "top_k": 2, "format": "3d"}})
    assert known.known_bug(three_d, logits_mapped_per_row=True, moe_drops_rslora=True) is None


def test_an_expert_rows_mismatch_beyond_the_rslora_requests_rows_is_not_r1():
    """R1 weakens the rows of an rsLoRA adapter's requests only. A step of an rsLoRA expert adapter (3 rows) and a plain
    one (4 rows) whose 7 adapter rows all mismatch is something else too (0.19.1's fused_moe_swaps_gate_up case: every
    row of both adapters wrong, labelled R1 before, so the fault was never found); the rsLoRA request's rows alone are
    R1; a report without the rows keeps the step's rule."""
    step = {"op": "step", "reqs": [_req("a", 2, tokens=3), _req("b", 1, tokens=4)]}

    def f(rows):
        out = _finding("numeric-mismatch", "numeric", 0, [step], tensor="step.experts.adapter_rows",
                       config={"adapters": MOE_ADAPTERS})
        if rows is not None:
            out["violation"]["details"]["rows"] = rows
        return out
    assert known.known_bug(f(list(range(7))), logits_mapped_per_row=True, moe_drops_rslora=True) is None
    assert known.known_bug(f([0, 1, 2]), logits_mapped_per_row=True, moe_drops_rslora=True) == "R1"
    assert known.known_bug(f([4, 5]), logits_mapped_per_row=True, moe_drops_rslora=True) == "R1"  # order not known
    assert known.known_bug(f(None), logits_mapped_per_row=True, moe_drops_rslora=True) == "R1"


def test_a_base_rows_expert_delta_after_an_adapter_step_is_m1_only_where_the_moe_lora_ignores_the_no_lora_flag():
    """M1 (0.16 - 0.23, fixed in 0.24): a step of base-model requests only gets the previous step's expert deltas."""
    ops = [{"op": "step", "reqs": [_req("a", 1)]}, {"op": "step", "reqs": [_req("b", 0)]}]
    f = _finding("numeric-mismatch", "numeric", 1, ops, tensor="step.experts.base_rows")
    assert known.known_bug(f, logits_mapped_per_row=True, moe_ignores_no_lora=True) == "M1"
    assert known.known_bug(f, logits_mapped_per_row=True) is None  # 0.24 on: a new bug
    mixed = _finding("numeric-mismatch", "numeric", 1, [ops[0], {"op": "step", "reqs": [_req("b", 0), _req("c", 1)]}],
                     tensor="step.experts.base_rows")  # an adapter in the batch: the flag is not set, not M1
    assert known.known_bug(mixed, logits_mapped_per_row=True, moe_ignores_no_lora=True) is None
    read = _finding("stale-read", "shadow", 1, ops, kernel="_fused_moe_lora_kernel",
                    tensor="token_mapping_meta.token_lora_mapping")
    assert known.known_bug(read, logits_mapped_per_row=True, moe_ignores_no_lora=True) == "M1"


def test_a_repeated_batch_after_a_removal_is_c1_only_where_the_mapping_cache_ignores_the_slots():
    """C1 (#47724, fixed by #47725 in 0.26): the same batch after an adapter was removed (and re-added elsewhere)
    keeps the cached mapping's old slots."""
    step = {"op": "step", "finish": [], "reqs": [_req("r1", 3), _req("r2", 1, 2)]}
    ops = [{"op": "add", "id": 3}, step, {"op": "remove", "id": 3}, {"op": "add", "id": 3}, step]
    f = _finding("numeric-mismatch", "numeric", 4, ops, tensor="step.o_proj.adapter_rows")
    assert known.known_bug(f, logits_mapped_per_row=True, mapping_cache_ignores_slots=True) == "C1"
    assert known.known_bug(f, logits_mapped_per_row=True) is None  # 0.26 on
    other = [*ops[:4], {"op": "step", "finish": [], "reqs": [_req("r1", 3), _req("r2", 1, 1)]}]  # another mapping
    assert known.known_bug(_finding("numeric-mismatch", "numeric", 4, other, tensor="step.o_proj.adapter_rows"),
                           logits_mapped_per_row=True, mapping_cache_ignores_slots=True) is None
    no_removal = [ops[0], step, {"op": "add", "id": 2}, step]
    assert known.known_bug(_finding("numeric-mismatch", "numeric", 3, no_removal, tensor="step.o_proj.adapter_rows"),
                           logits_mapped_per_row=True, mapping_cache_ignores_slots=True) is None
    assert known.label(f, logits_mapped_per_row=True, mapping_cache_ignores_slots=True)["upstream"].startswith(
        "vllm-project/vllm#47724")


def test_a_never_written_read_at_a_padding_row_of_a_step_is_v0_where_the_start_up_maps_nothing():
    """V0's padded-step form (the third sweep, 0.16 - 0.20): a base-model step of 1 token padded to 8 reads the
    embedding's offsets at padding column 1, which no mapping ever wrote (0.15 - 0.21's start-up maps nothing).
    Not V0 at a scheduled row, nor a stale read, nor where the release's start-up maps every row (0.22 on)."""
    step = {"op": "step", "finish": [], "pad": 7, "seed": 0,
            "reqs": [{"id": "r2", "lora": 0, "tokens": 1, "drafts": 0, "prompt_logprobs": False}]}
    ops = [dict(step, pad=0, reqs=[dict(step["reqs"][0], id="r1")]), step]

    def read(element, kind="uninitialized-read", op=step):
        f = _finding(kind, "shadow", 1, [ops[0], op],
                     tensor="torch.empty@vllm/lora/punica_wrapper/punica_base.py:147")
        f["violation"]["details"]["element"] = element
        return f
    assert sweep.category(read([1, 1]), True, dummy_maps_nothing=True) == "V0"
    assert sweep.category(read([1, 1]), True, dummy_maps_nothing=False) == "other"
    assert sweep.category(read([1, 0]), True, dummy_maps_nothing=True) == "other"  # the scheduled row
    assert sweep.category(read([1, 1], kind="stale-read"), True, dummy_maps_nothing=True) == "other"
    assert sweep.category(read([1, 1], op=dict(step, pad=0)), True, dummy_maps_nothing=True) == "other"


def test_v0s_padded_form_counts_the_v2_graph_dispatchs_padding_and_never_a_v1_runner_case():
    """The V1-runner test's campaign on 0.17.0 (seed 0) met V0's padded form through a V2 graph replay: a 4-token
    step (``pad`` 0) given the FULL_AND_PIECEWISE graph of 8 reads the embedding's offsets at padding column 4, never
    written (replayed: 0.17.0 and, FULL, 0.19.0 reproduce; 0.22.0 and 0.23.0, #43139's zero mapping, do not). The
    V1 runner's dummy runs map every row: a V1-runner case's read is not V0."""
    step = {"op": "step", "finish": [], "pad": 0, "seed": 2,
            "reqs": [{"id": "r1", "lora": 0, "tokens": 2, "drafts": 0, "prompt_logprobs": True, "prompt": 4},
                     {"id": "r2", "lora": 0, "tokens": 2, "drafts": 0, "prompt_logprobs": False}]}
    graphs = {"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [8]}

    def read(element, config):
        f = _finding("uninitialized-read", "shadow", 0, [step, {"op": "add", "id": 2}], config=config,
                     tensor="torch.empty@vllm/lora/punica_wrapper/punica_base.py:147")
        f["violation"]["details"]["element"] = element
        return f
    assert sweep.category(read([1, 4], graphs), True, dummy_maps_nothing=True) == "V0"
    assert sweep.category(read([1, 4], graphs), True, dummy_maps_nothing=False) == "other"  # 0.22 on: new
    assert sweep.category(read([1, 3], graphs), True, dummy_maps_nothing=True) == "other"  # a scheduled row
    assert sweep.category(read([1, 4], {}), True, dummy_maps_nothing=True) == "other"  # no graph, no pad: no padding
    assert sweep.category(read([1, 4], dict(graphs, runner="v1")), True, dummy_maps_nothing=True) == "other"
    dummy = _finding("uninitialized-read", "shadow", 0, [{"op": "dummy_run", "num_tokens": 2}],
                     config={"runner": "v1"}, tensor="token_mapping_meta.active_lora_ids")
    assert sweep.category(dummy, True, dummy_maps_nothing=True) == "other"
