"""The real vLLM bugs ``vllm_engine`` finds on a release as shipped (docs/vllm.md, "What it found in vLLM";
docs/findings/), told apart in a campaign's report by their op, output and message: a finding that is one of
them is not new. ``label`` is the target's ``known_bugs`` (a campaign labels such findings: "known: V1 ...",
fuzzrunner/engine/known.py); also used by the sweep's table (sweep.py), the integration tests and the GPU
acceptance step ``vllm-engine`` (scripts/gpu/acceptance_steps.py).
"""

from __future__ import annotations


def _moe_bug(v: dict, case: dict, op: dict, *, moe_drops_rslora: bool, moe_ignores_no_lora: bool) -> str | None:
    """R1 or M1 (the MoE block, moe.py): R1 where this vLLM's ``pack_moe`` drops rsLoRA's scaling and the mismatched
    step has a request of an rsLoRA adapter with expert weights; M1 where its ``add_lora_fused_moe`` launches without
    the no-LoRA check and a step of base-model requests only gets an expert delta in its base rows, or the MoE LoRA
    kernel reads stale or never-written metadata. R1 only where the step's rsLoRA requests hold at least as many rows
    as the mismatch (``details["rows"]``, where the report has them)."""
    tensor = v.get("tensor") or ""
    if moe_ignores_no_lora and v["kind"] == "numeric-mismatch" and tensor.endswith("experts.base_rows") and \
            op.get("op") == "step" and not any(r.get("lora") for r in op.get("reqs", [])):
        return "M1"
    if moe_ignores_no_lora and v.get("tool") in ("shadow", "invariants") and \
            "fused_moe_lora" in (v.get("kernel") or ""):
        return "M1"
    adapters = case["config"].get("adapters") or {}
    if (case["config"].get("moe") or {}).get("format") == "3d":  # FusedMoE3DWithLoRA's adapters never reach pack_moe
        return None
    rs = {int(a) for a, spec in adapters.items() if spec.get("rslora") and "experts" in spec.get("targets", ())}
    # R1 weakens an rsLoRA adapter's expert rows only: a mismatch in more adapter rows than the step's requests of
    # such adapters hold is (also) something else (on 0.19.1 the first case of a seed-0 campaign that can show
    # fused_moe_swaps_gate_up, the 97th, was labelled R1 so: docs/vllm.md, "0.17 - 0.19's MoE LoRA")
    if not (moe_drops_rslora and v["kind"] == "numeric-mismatch" and tensor.endswith("experts.adapter_rows")
            and op.get("op") == "step"):
        return None
    rs_rows = sum(r.get("tokens", 0) for r in op.get("reqs", []) if r.get("lora") in rs)
    wrong = (v.get("details") or {}).get("rows")
    return "R1" if rs_rows and (wrong is None or len(wrong) <= rs_rows) else None


def _packed_bug(v: dict, case: dict) -> str | None:
    """Q1, Q2 or Q3: a crash in vLLM's LoRA layer of a module whose packed names are fewer than its output slices (the
    Qwen3.5 linear attention's ``in_proj_qkvz``, in_proj_qkv over q, k, v and in_proj_z over z: model.GDN ``qkvz``),
    told by the exception each release's ``column_parallel_linear.py`` raises. Q1 (before 0.21): ``set_lora`` indexes
    one packed list per output slice: ``lora_a[2]`` of two, or (an adapter's B, whose name covers more than one slice,
    copied into one slice) a size mismatch; Q2 (0.21 - 0.28): ``expand_packed_lora``
    reads ``b_i.shape`` of the member a partial adapter lacks (``None``); Q3 (0.29 on): #47640's guard gives a missing
    member every remaining slice, so a leading one (``in_proj_z`` alone) leaves none for the next."""
    if (case["config"].get("layout") or {}).get("gdn") != "qkvz":
        return None
    message = v.get("message") or ""
    if v["kind"] == "state-violation" and v.get("tensor") == "serve_load.answer":
        kind = None  # the serving layer answers the layer's exception as the load's error (serving.py), its text alone
    elif v["kind"] == "crash" and "column_parallel_linear.py" in (v.get("location") or ""):
        kind = v.get("kernel")
    else:
        return None
    return next((bug for bug, exc, text in _PACKED_EXCEPTIONS if kind in (None, exc) and text in message), None)


# (bug, exception, its message) of the packed-module bugs: Q1's lora_a[2] of two (a dummy adapter: one per name,
# sized by the first slices) or a name's B copied into one slice; Q2's missing member; Q3's split of the rest
_PACKED_EXCEPTIONS = (("Q1", "IndexError", "list index out of range"),
                      ("Q1", "RuntimeError", "must match the size of tensor b"),
                      ("Q2", "AttributeError", "'NoneType' object has no attribute 'shape'"),
                      ("Q3", "ValueError", "Cannot determine how to split lora_b"))


def _serving_bug(v: dict, lora_hash_name_only: bool) -> str | None:
    """U1 or H1 (serving.py, prefix_cache.py): U1, the worker still holds an adapter the API unloaded (every release:
    no ``remove_lora`` under ``vllm/entrypoints``); H1, a prefix-cache block reused under another adapter of the same
    name where this vLLM's block hash keys an adapter on its name alone (``lora_hash_name_only``: before #44950)."""
    if v["kind"] != "state-violation":
        return None
    if v.get("tensor") == "serve_unload.resident":
        return "U1"
    d = v.get("details") or {}
    reader, writer = d.get("reader") or {}, d.get("writer") or {}
    if v.get("tensor") == "step.prefix_cache" and lora_hash_name_only and reader.get("name") and \
            reader.get("name") == writer.get("name"):
        return "H1"
    return None


def _c1(v: dict, ops: list, at) -> bool:
    """C1's trigger: a layer's rows wrong in a step that schedules the same adapters, request by request, as the step
    before it, with an adapter removed between the two (re-added into another slot: the mapping is unchanged, so the
    cached one keeps the old slots)."""
    if v["kind"] != "numeric-mismatch" or not isinstance(at, int) or ops[at].get("op") != "step":
        return False
    before = [i for i in range(at) if ops[i].get("op") == "step"]
    if not before:
        return False

    def loras(op):
        return [(r.get("lora"), r.get("tokens")) for r in op.get("reqs", [])]
    return loras(ops[before[-1]]) == loras(ops[at]) and any(ops[i].get("op") == "remove"
                                                           for i in range(before[-1] + 1, at))


def known_bug(finding: dict, *, logits_mapped_per_row: bool, prompt_rows_mapped: bool = False,
              drops_last_chunk: bool = False, graphs_capture_per_lora: bool = True, moe_drops_rslora: bool = False,
              moe_ignores_no_lora: bool = False, mapping_cache_ignores_slots: bool = False,
              token_id_rows_mapped: bool = False, v1_prompt_rows_mapped: bool = False,
              lora_hash_name_only: bool = False) -> str | None:
    """"P1", "L1", "S1", "E1", "E2", "V1", "W1", "C1", "R1", "M1", "Q1", "Q2", "Q3", "U1" or "H1" where ``finding`` (a
    report's finding: ``violation``, ``case``) is that bug, else None. ``logits_mapped_per_row``: this vLLM's
    ``LoraState.make_lora_inputs`` takes ``num_logits`` (0.34 and later), so a wrong lm_head row is not S1 (nor in a
    V1-runner case: that runner maps 1 + drafts rows);
    ``prompt_rows_mapped``: this vLLM maps the prompt-logprobs rows to their requests' adapters (a fix of P1, such as
    docs/findings/p1_prompt_logprobs_mapping.patch), so a wrong prompt-logits row is not P1; ``token_id_rows_mapped``:
    the same for the rows of ``compute_prompt_token_id_logprobs`` (0.31 on: its logits are taken as the prompt
    logprobs' are; the patch does not touch it); ``v1_prompt_rows_mapped``: the same for the V1 runner's
    ``_get_prompt_logprobs_dict`` (a V1-runner case: P1's V1 form, vllm-project/vllm#51594, its fix #51597 touches the
    LoRA mapping there; v1_prompt_logprobs.py); ``drops_last_chunk``:
    this vLLM's prompt-logprobs worker skips a request whose prompt's last chunk is its last token
    (``computed_prefill < prompt_lens - 1``: L1, fixed by #41411), so prompt logprobs never returned are L1;
    ``graphs_capture_per_lora``: this vLLM's V2 runner captures its graphs per LoRA count (0.24 and later, #35536),
    else a V2-runner graph replay's mismatch under ``specialize_active_lora`` is W1 (the grid the start-up left). V1 is
    told by a graph replay's mismatch in a layer (the logits run outside the graph) under ``specialize_active_lora``,
    in a V1-runner case (v1_runner.py) or a V2-runner case with CUDA graphs (v2_graphs.py). ``moe_drops_rslora``: this
    vLLM's ``pack_moe`` scales expert adapters by ``alpha / rank`` (R1, fixed by #55548); ``moe_ignores_no_lora``: its
    ``add_lora_fused_moe`` does not check the no-LoRA flag (M1, fixed in 0.24): ``_moe_bug``;
    ``mapping_cache_ignores_slots``: its ``set_adapter_mapping`` skips a mapping equal to the last one whatever the
    slots (C1, fixed by #47725 in 0.26): ``_c1``."""
    v = finding["violation"]
    case = finding["case"]
    tensor, message = v.get("tensor") or "", v.get("message") or ""
    early = _serving_bug(v, lora_hash_name_only) or _packed_bug(v, case)
    if early:
        return early
    at = (v.get("details") or {}).get("op_index")
    op = case["ops"][at] if at is not None and at < len(case["ops"]) else {}
    if case["config"].get("runner") == "v1":  # the V1 runner's own prompt-logprobs path (v1_prompt_logprobs.py)
        prompt_rows_mapped = v1_prompt_rows_mapped
    if ("prompt_logits" in tensor and not prompt_rows_mapped) or \
            ("prompt_token_id_logits" in tensor and not token_id_rows_mapped):
        return "P1"  # the prompt-logprobs rows under the sampled rows' mapping (vllm-project/vllm#53842; V1: #51594)
    region = (v.get("details") or {}).get("region") or ""  # the runner's call the access was made in
    if v.get("tool") == "shadow" and v["kind"] == "out-of-bounds" and (v.get("kernel") or "").startswith("_lora_") \
            and (("prompt_token_id_logits[" in region and not token_id_rows_mapped) or
                 ("prompt_logits[" in region and not prompt_rows_mapped)):
        # P1's other form: a prompt path's logits call (one request's prompt rows on the token-id path) holds fewer
        # rows than the sampled rows the lm_head mapping was made for, so vLLM's LoRA kernels reach past the call's
        # rows (its input, or add_lora_logits' buffer); told by the call it happened in (prompt_logprobs.py's region)
        return "P1"
    if v["kind"] == "state-violation" and tensor.endswith("prompt_logprobs") and drops_last_chunk and \
            "the worker returned none" in message:
        return "L1"  # a chunked prompt's logprobs lost when its last chunk is one token (#41411)
    if v["kind"] == "crash" and "warmup_" in message and "/not/a/real/path" in message:
        return "E1"  # a runtime dummy run evicts a real adapter holding a warm-up id, then loads it
    if v["kind"] == "crash" and op.get("op") == "dummy_run" and (
            v.get("kernel") == "KeyError" or (v.get("kernel") == "ValueError"
                                              and "punica_wrapper/utils.py" in (v.get("location") or ""))):
        # its second form: a pinned adapter, more dummies activated than free slots; convert_mapping finds no
        # slot for the evicted dummy: KeyError (a dict of ids: 0.28 on), ValueError (list.index: 0.24)
        return "E1"
    if v["kind"] == "crash" and "StopIteration" in message and \
            set(case["config"].get("target_modules") or []) <= {"lm_head"}:
        return "E2"  # LoRA on lm_head alone: an empty dummy adapter
    if mapping_cache_ignores_slots and _c1(v, case["ops"], at):
        return "C1"  # the mapping's cache keyed on the mapping alone (vllm-project/vllm#47724, fixed by #47725)
    v1_runner = case["config"].get("runner") == "v1"
    if tensor.startswith("replay.") and not tensor.startswith("replay.logits") and \
            case["config"].get("specialize_active_lora"):
        # V1: a graph of key k replays a batch of k adapters and base-model rows with grid z = k; before #35536 the
        # V2 runner's graphs froze the grid z the start-up left: W1 (fixed in 0.24)
        return "V1" if v1_runner or graphs_capture_per_lora else "W1"
    if tensor.startswith("step.logits") and not logits_mapped_per_row and not v1_runner:
        return "S1"  # one lm_head row per request under speculative decoding (fixed in 0.34)
    return _moe_bug(v, case, op, moe_drops_rslora=moe_drops_rslora, moe_ignores_no_lora=moe_ignores_no_lora)


# id -> what a campaign's report and summary say of it (docs/findings/README.md is the source of each line)
BUGS = {
    "V1": {"title": "with specialize_active_lora, a CUDA graph captured for k adapters drops the last adapter of a "
                    "batch mixing k adapters with base-model tokens",
           "upstream": "not reported upstream as far as we found; docs/findings/v1-specialize-active-lora.md",
           "status": "open in 0.16.0 - 0.34.0; fix: docs/findings/v1_specialize_active_lora.patch"},
    "P1": {"title": "prompt logprobs take the logits of the prompt rows under the lm_head mapping made for the "
                    "sampled rows (V2 runner: every scheduled row; V1 runner: each request's rows)",
           "upstream": "vllm-project/vllm#53842, an open PR (V2 runner); V1 runner: #51594, open, its fix #51597 an "
                       "open PR",
           "status": "open in 0.15.0 - 0.34.0 (V2 runner) and 0.12.0 - 0.33.0 (V1 runner, its last release; by "
                     "source); a V2 fix here: docs/findings/p1_prompt_logprobs_mapping.patch (0.34.0; _on_0.33.patch "
                     "for 0.33.0)"},
    "S1": {"title": "V2 runner, speculative decoding: one lm_head row per request while a request has 1 + drafts "
                    "logits rows",
           "upstream": "fixed upstream in 0.34.0 (make_lora_inputs(..., num_logits))",
           "status": "fixed in 0.34.0"},
    "E1": {"title": "a runtime dummy run evicts a real adapter holding a warm-up id and loads it from "
                    "/not/a/real/path, or with a pinned adapter activates more dummies than free slots",
           "upstream": "not reported upstream as far as we found; docs/findings/e1-dummy-run-evicts-real-adapter.md",
           "status": "open in 0.24.0 - 0.34.0 (V2 runner; the V1 runner's dummy batch maps no adapter from 0.16); fix: "
                     "docs/findings/e1_e2_dummy_adapters.patch"},
    "E2": {"title": "--lora-target-modules lm_head: the warm-up's dummy adapter has no weights, the profile run "
                    "dies with StopIteration",
           "upstream": "not reported upstream as far as we found; docs/findings/e2-lm-head-only-target-modules.md",
           "status": "open in 0.19.0 - 0.34.0; fix: docs/findings/e1_e2_dummy_adapters.patch"},
    "L1": {"title": "V2 runner: the prompt logprobs of a chunked prefill are lost when its last chunk is the "
                    "prompt's last token (computed_prefill < prompt_lens - 1)",
           "upstream": "vllm-project/vllm#41411",
           "status": "fixed upstream (#41411; 0.21.0 has the fix, 0.17.0 not)"},
    "W1": {"title": "V2 runner with CUDA graphs and specialize_active_lora, before LoRA capture cases: every graph "
                    "freezes the grid z the start-up left, a replayed batch loses adapters",
           "upstream": "fixed upstream by vllm-project/vllm#35536",
           "status": "fixed in 0.24.0 (0.15.0 - 0.23.0 by source)"},
    "C1": {"title": "the adapter mapping's cache is keyed on the mapping alone: after a slot reassignment under an "
                    "unchanged batch the rows read the old slots",
           "upstream": "vllm-project/vllm#47724, fixed by #47725",
           "status": "fixed in 0.26.0 (0.12.0 - 0.25.0 by source)"},
    "R1": {"title": "rsLoRA expert adapters of a fused-MoE layer scaled by lora_alpha / rank (pack_moe): every expert "
                    "delta of an rsLoRA adapter sqrt(r) times too weak",
           "upstream": "vllm-project/vllm#55545, fixed by #55548",
           "status": "fixed in 0.30.0 (0.12.0 - 0.29.0 by source)"},
    "M1": {"title": "after an all-base-model batch the fused-MoE LoRA kernel (naive block assignment) applies the "
                    "previous batch's adapters: add_lora_fused_moe does not check the no-LoRA flag",
           "upstream": "fixed upstream (the flag check in add_lora_fused_moe); "
                       "docs/findings/m1-fused-moe-lora-without-no-lora-check.md",
           "status": "fixed in 0.24.0 (0.16.0 - 0.23.0 by source)"},
    "Q1": {"title": "a LoRA layer with more output slices than packed names (Qwen3.5's in_proj_qkvz: in_proj_qkv and "
                    "in_proj_z over q, k, v, z) indexes one packed LoRA per slice: a name's B copied into one slice (a "
                    "size mismatch), or IndexError at lora_a[2] (the warm-up's dummy adapter)",
           "upstream": "vllm-project/vllm#35286 (Qwen3.5), #36825 and the other fixes proposed; fixed by #37912's "
                       "expand_packed_lora",
           "status": "fixed in 0.21.0 (0.20.0 by source: MergedColumnParallelLinearWithLoRA.set_lora; 0.20's Qwen3.5 "
                     "builds its projections apart under LoRA)"},
    "Q2": {"title": "a partial adapter of a packed module whose names span several output slices (in_proj_qkv without "
                    "in_proj_z, or the converse): expand_packed_lora reads the shape of the missing member (None)",
           "upstream": "vllm-project/vllm#47639, fixed by #47640 (a regression from #37912)",
           "status": "fixed in 0.29.0 (0.21.0 - 0.28.0 by source)"},
    "Q3": {"title": "an adapter of in_proj_z alone (the packed in_proj_qkvz's trailing member): expand_packed_lora "
                    "gives the missing in_proj_qkv every slice, none is left for in_proj_z: ValueError",
           "upstream": "vllm-project/vllm#57851, an open PR (the converse of #47640's trailing-None case)",
           "status": "open in 0.29.0 - 0.33.0 (by source)"},
    "U1": {"title": "POST /v1/unload_lora_adapter only forgets the name: the worker keeps the adapter registered (CPU "
                    "cache) and in its GPU slot until LRU eviction",
           "upstream": "vllm-project/vllm#54839 (and #42633); fix PRs #54939, #42634, open",
           "status": "open in 0.12.0 - 0.34.0 (no remove_lora call under vllm/entrypoints in any tree read)"},
    "H1": {"title": "prefix-cache block hashes key an adapter on its name alone: a same-name reload with other "
                    "weights, or two adapters of one name and different ids, reuse each other's KV blocks",
           "upstream": "vllm-project/vllm#42125 (fixed by #44950) and #30931",
           "status": "fixed in 0.31.0 (name and path hashed; 0.30.0 and older hash the name alone, by source)"},
    "V0": {"title": "the V2 runner's dummy runs launch the LoRA kernels on metadata nobody programmed",
           "upstream": "vllm-project/vllm#43139",
           "status": "fixed in 0.22.0 (#43139; replaced by #35536 in 0.24.0)"},
}


def known_id(finding: dict, *, logits_mapped_per_row: bool, dummy_maps_nothing: bool = False,
             prompt_rows_mapped: bool = False, drops_last_chunk: bool = False,
             graphs_capture_per_lora: bool = True, moe_drops_rslora: bool = False,
             moe_ignores_no_lora: bool = False,
             mapping_cache_ignores_slots: bool = False, token_id_rows_mapped: bool = False,
             v1_prompt_rows_mapped: bool = False, lora_hash_name_only: bool = False) -> str | None:
    """``known_bug``'s id, or "V0": a memory finding in a dummy run of a release whose V2 runner programs nothing
    for it (``dummy_maps_nothing``: 0.15 - 0.21, docs/findings/v0-v2-runner-dummy-run-no-mapping.md), or a read of
    never-written metadata at a graph-padding row of a step there (the same root cause)."""
    bug = known_bug(finding, logits_mapped_per_row=logits_mapped_per_row, prompt_rows_mapped=prompt_rows_mapped,
                    drops_last_chunk=drops_last_chunk, graphs_capture_per_lora=graphs_capture_per_lora,
                    moe_drops_rslora=moe_drops_rslora, moe_ignores_no_lora=moe_ignores_no_lora,
                    mapping_cache_ignores_slots=mapping_cache_ignores_slots,
                    token_id_rows_mapped=token_id_rows_mapped, v1_prompt_rows_mapped=v1_prompt_rows_mapped,
                    lora_hash_name_only=lora_hash_name_only)
    if bug:
        return bug
    v = finding["violation"]
    details = v.get("details") or {}
    at = details.get("op_index")
    ops = finding["case"]["ops"]
    if not (dummy_maps_nothing and isinstance(at, int) and at < len(ops)):
        return None
    op = ops[at]
    config = finding["case"].get("config") or {}
    if config.get("runner") == "v1":  # V0 is the V2 runner's start-up; the V1 runner's dummy runs map every row
        return None
    if op.get("op") == "dummy_run" and v.get("tool") in ("shadow", "invariants"):
        return "V0"
    # its padded-step form: a step padded to a graph size reads a padding row's metadata (the embedding's offsets)
    # that no mapping ever wrote, since the start-up's dummy runs over every row mapped nothing (#43139's assert).
    # The padding is the step's own (``pad``) or, in a case with V2 graphs, the dispatch's: a replay runs the
    # graph's padded rows (v2_graphs.py; the V1-runner test's campaign on 0.17.0, FULL_AND_PIECEWISE, size 8)
    padded = op.get("pad") or config.get("cudagraph_mode", "NONE") != "NONE"
    element = details.get("element") or []
    if (op.get("op") == "step" and padded and v.get("kind") == "uninitialized-read" and element
            and element[-1] >= sum(r.get("tokens", 0) for r in op.get("reqs", []))):
        return "V0"
    return None


def label(finding: dict, *, logits_mapped_per_row: bool, dummy_maps_nothing: bool = False,
          prompt_rows_mapped: bool = False, drops_last_chunk: bool = False,
          graphs_capture_per_lora: bool = True, moe_drops_rslora: bool = False,
          moe_ignores_no_lora: bool = False,
          mapping_cache_ignores_slots: bool = False, token_id_rows_mapped: bool = False,
          v1_prompt_rows_mapped: bool = False, lora_hash_name_only: bool = False) -> dict | None:
    """The target's ``known_bugs``: ``{"id", "title", "upstream", "status"}`` of the known bug ``finding`` is, or
    None (a planted fault's finding, a new bug, a target error)."""
    if finding.get("signature", {}).get("tool") == "target":
        return None
    bug = known_id(finding, logits_mapped_per_row=logits_mapped_per_row, dummy_maps_nothing=dummy_maps_nothing,
                   prompt_rows_mapped=prompt_rows_mapped, drops_last_chunk=drops_last_chunk,
                   graphs_capture_per_lora=graphs_capture_per_lora, moe_drops_rslora=moe_drops_rslora,
                   moe_ignores_no_lora=moe_ignores_no_lora, mapping_cache_ignores_slots=mapping_cache_ignores_slots,
                   token_id_rows_mapped=token_id_rows_mapped, v1_prompt_rows_mapped=v1_prompt_rows_mapped,
                   lora_hash_name_only=lora_hash_name_only)
    return {"id": bug, **BUGS[bug]} if bug else None
