"""``scripts/sglang_sweep.sh``'s table: one row per (release, finding) from the campaigns' JSON reports.

    python -m targets.sglang_lora.sweep OUT_DIR VERSION...   (reads OUT_DIR/VERSION.json, prints markdown)

Each finding is put in a triage category from where its violations happened (docs/sglang.md):
``#14177`` (the triton graph batch info's ``seg_indptr[0]`` read never written), ``#28371`` (a csgmv replay
that drops adapters or reads the stale segment tail), ``padding`` (a replay's padded rows reading the previous
batch's ``weight_indices``), ``n-mask`` (``sgemm_lora_b`` loading B and loading/storing the output without a
column mask, past ``N`` when ``N < BLOCK_N``: whatever lies beyond is reported, out of bounds or a neighbouring
tensor's unwritten or stale bytes; told by the source line the access is on, read from the release's tree),
``target`` (an exception of the target's own code), else ``untriaged``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _engine_ops(case: dict) -> str:
    """An ``sglang_engine`` case in one line: ``triton L=2 fifo graph≤2: load(a0) → step[a0, -](decode) → ...``."""
    c = case["config"]
    out = []
    for op in case["ops"]:
        k = op["op"]
        if k == "step":
            reqs = ", ".join(r or "-" for r in op.get("reqs", []))
            lp = f" logprob {op['logprob']}" if op.get("logprob") is not None else ""
            out.append(f"step[{reqs}]({op.get('mode', 'decode')}{' ' + str(op['lens']) if 'lens' in op else ''}{lp})")
        else:
            out.append(f"{k}({op.get('name')}{', v' + str(op['v']) if op.get('v') else ''})")
    graph = f" graph≤{c['graph_bs']}" if c.get("graph_bs") else ""
    graph += f" logprob-chunk {c['logprob_chunk']}" if c.get("logprob_chunk") is not None else ""
    return (f"{c['backend']} L={c['max_loras_per_batch']} {c['eviction_policy']}{graph} "
            f"[{','.join(c['target_modules'])}]: " + " → ".join(out))


def _ops(case: dict) -> str:
    if case.get("target") == "sglang_engine":
        return _engine_ops(case)
    c = case["config"]
    out = []
    for op in case["ops"]:
        k = op["op"]
        if k in ("step", "replay"):
            out.append(f"{k}{op['uids']}" + (f"({op.get('mode')})" if k == "step" else ""))
        elif k == "capture":
            out.append(f"capture({op['bs']})")
        elif k == "unload":
            out.append(f"unload({op['uid']})")
        else:
            out.append(k)
    return f"{c['backend']} L={c['max_loras']}: " + " → ".join(out)


def _source_line(location: str, version: str | None, before: int = 0) -> str:
    """The text of ``file:line`` (as a finding names it, a path suffix) in the release's set-up tree (with
    ``before`` lines above it)."""
    if not version or ":" not in location:
        return ""
    from .site import site_dirs
    path, _, line = location.rpartition(":")
    tree = site_dirs(version)[0] / "sglang"
    for f in tree.rglob(Path(path).name):
        if str(f).endswith(path) and line.isdigit():
            lines = f.read_text(encoding="utf-8").splitlines()
            n = int(line)
            return "\n".join(lines[max(0, n - 1 - before):n + 2])  # the statement and its first arguments
    return ""


def _release_file(version: str | None, rel: str) -> str:
    """The text of ``sglang/RELPATH`` in the release's set-up tree ("" when absent)."""
    if not version:
        return ""
    from .site import site_dirs
    path = site_dirs(version)[0] / "sglang" / rel
    return path.read_text(encoding="utf-8") if path.exists() else ""


def _sgemm_lora_b_unmasked(version: str | None) -> bool:
    """The release's ``sgemm_lora_b`` masks neither B nor the output by column (the ``n-mask`` bug)."""
    from .site import site_dirs
    if not version:
        return False
    found = list((site_dirs(version)[0] / "sglang").rglob("sgemm_lora_b.py"))
    return bool(found) and not any("n_mask" in p.read_text(encoding="utf-8") for p in found)


def engine_category(f: dict, version: str | None = None) -> str:
    """The triage of an ``sglang_engine`` finding (docs/sglang.md, "sglang_engine": sweep): ``target``,
    ``n-mask`` (as for ``sglang_lora``; with a numeric mismatch, or a base-model row that is not the base model's,
    of a triton case in a release that has it: the unmasked lanes add into the next request's output row),
    ``#21380`` (the unload keeps the adapter in the pool: releases without ``LoRAMemoryPool.remove_lora``),
    ``#14177`` (a read of the triton backend's never-written graph ``seg_indptr``), ``#28371`` (a numeric
    mismatch of a csgmv case with decode graphs where the kernels' grid is the capture's segment count),
    ``emb-unzeroed`` (an adapter without embedding / lm_head LoRA runs the slot's never-written embedding buffers:
    releases whose pool does not zero them), ``csgmv-embedding`` (embedding LoRA on a csgmv backend without
    ``run_lora_a_embedding``; ``torch-native-embedding``: the same on the torch_native backend, 0.5.6.post2 -
    0.5.11), ``#20564`` (torch_native's prepare crashing on a batch with fewer runs of equal adapters than requests),
    ``#15187`` (0.5.6.post1 - 0.5.6.post2's torch_native ops reading a slot's never-written rows past the adapter's
    rank or modules), ``#18649`` (lm_head LoRA's shrink reading past the LogitsProcessor's kept rows,
    or writing past its output, and the expand reading past the shrink's output, in releases without pruned
    lm_head routing), ``#31910`` (a triton case whose
    input-logprob passes of lm_head LoRA crash in ``_prepare_lm_head_batch_info``: releases that append the passes
    to the attribute), ``SG1`` (an adapter's request waiting past the drain bound, no adapter marked draining for
    it, with a pinned adapter loaded, in releases whose drainer counts running adapters against
    ``--max-loras-per-batch``: docs/findings/sg1-*), ``SG2`` (a request waiting past the drain bound while the
    adapter marked draining for it admitted more requests, in releases whose drainer recomputes the draining budget
    from every running request: docs/findings/sg2-*),
    ``#27597`` (the scheduler's crash "LoRA ID ... not found in lora_refs", in releases whose admission counts a
    finished request's adapter as running: an adapter unloaded after its request finished),
    ``#27274`` (a wrong row of a virtual-experts MoE case with gate / up expert LoRA, in releases whose virtual-expert
    path contracts the gated A's first half only),
    ``torch-native-lm-head`` (G1), ``torch-native-graph-rank`` (G2), ``embedding-partial-unzeroed`` (G3: a wrong
    row where an adapter has one of ``embed_tokens`` / ``lm_head`` and another adapter the other, in releases whose
    pool zeroes those buffers only for an adapter with neither), else ``untriaged``."""
    sig = f["signature"]
    if sig["tool"] == "target":
        return "target"
    if _rank_overread(sig, version):
        return "v2-rank-overread"
    if sig.get("kernel") == "_sgemm_lora_b_kernel" and sig["kind"] in ("out-of-bounds", "uninitialized-read",
                                                                      "stale-read"):
        text = _source_line(sig.get("location", ""), version)
        if ("w_ptrs" in text or "output_ptr" in text) and _sgemm_lora_b_unmasked(version):
            return "n-mask"
    config = f["case"]["config"]
    for bug, has in (("torch-native-lm-head", _torch_native_lm_head_unpruned),
                     ("torch-native-graph-rank", _torch_native_graph_max_rank),
                     ("embedding-partial-unzeroed", _embedding_partial_unzeroed), ("#27274", _virtual_gated_unpaired)):
        if has(sig, config, version):  # the bugs a finding's case and signature tell, read against the release
            return bug
    triage = _engine_release_bug(sig, config.get("backend"), version, _graph_path(sig, config),
                                 config.get("target_modules", ()))
    if triage:
        return triage
    backend = f["case"]["config"].get("backend")
    spills = sig["kind"] == "numeric-mismatch" or (sig["kind"] == "state-violation"
                                                   and _label(sig) == "base-rows")
    if spills and backend == "triton" and _sgemm_lora_b_unmasked(version):
        return "n-mask"  # the unmasked lanes add into the next request's row: an adapter's or the base model's
    # an unload leaves the slot: the user's, or (through the adapter-management API) --max-loaded-loras' eviction
    # inside a load or a step's implicit reload
    left = sig.get("tensor") == "unload" or (sig.get("tensor") in ("load", "step")
                                             and "pool slot" in f.get("message", ""))
    if sig["kind"] == "state-violation" and left and \
            "def remove_lora" not in _release_file(version, "srt/lora/mem_pool.py"):
        return "#21380"
    return _scheduler_bug(sig["kind"], f.get("message", ""), config, version)


def _scheduler_bug(kind: str, message: str, config: dict, version: str | None) -> str:
    """The scheduler path's bugs a finding's message tells (SG1, SG2, #16687, #25865, #27597), else ``untriaged``."""
    if kind == "state-violation" and "past the drain threshold" in message:
        return _drain_bug(message, config, version) or "untriaged"
    if kind == "state-violation" and OVER_SLOTS.search(message):
        return _admission_bug(config, version) or "untriaged"
    if kind == "crash" and LORA_REFS_ASSERT in message and finished_adapters_counted(version):
        return "#27597"
    return "untriaged"


# serving.py's batch check: the scheduler's batch holds more adapters (base included) than --max-loras-per-batch
OVER_SLOTS = re.compile(r"the scheduler made an? \w+ batch of \d+ adapters \(base included\) for \d+ slots")
# 0.5.7's admission lets a base-model request through unchecked (#16687 / #16333: "None never causes the check to fail")
BASE_NEVER_CHECKED = "should never cause this check to fail"
# 0.5.8 - 0.5.12.post1 count the running batch's adapters only: a chunked prefill staged in can_run_list is not
# counted (#25865; 0.5.7 counted can_run_list, 0.5.13 adds it back with running_loras.update(...))
RUNNING_ONLY = "running_loras = {req.lora_id for req in self.running_batch.reqs}"
STAGED_COUNTED = "running_loras.update(req.lora_id for req in adder.can_run_list)"


# 0.5.5 - 0.5.13.post1 build the running adapters from every request of the running batch, the finished ones too (they
# leave it later, in update_running_batch): one whose adapter was unloaded since trips validate_lora_batch's assertion
# (#27597, 0.5.14: "... for req in self.running_batch.reqs if not req.finished()")
LORA_REFS_ASSERT = "not found in lora_refs"
RUNNING_LORAS = "req.lora_id for req in self.running_batch.reqs"
FINISHED_FILTERED = "running_batch.reqs if not req.finished()"


def finished_adapters_counted(version: str | None) -> bool:
    """Whether the release's admission counts a finished request's adapter and asserts it is loaded (#27597)."""
    sched = _release_file(version, "srt/managers/scheduler.py")
    return LORA_REFS_ASSERT in _release_file(version, "srt/lora/lora_manager.py") and RUNNING_LORAS in sched and \
        FINISHED_FILTERED not in sched


def _admission_bug(config: dict, version: str | None) -> str:
    """#16687 or #25865 for a batch of more adapters than slots, where the release's scheduler has the bug's lines
    (#25865 needs a chunked prefill: the staged request it does not count); "" otherwise."""
    sched = _release_file(version, "srt/managers/scheduler.py")
    if BASE_NEVER_CHECKED in sched:
        return "#16687"
    if config.get("chunked_prefill_size") and RUNNING_ONLY in sched and STAGED_COUNTED not in sched:
        return "#25865"
    return ""


def _drain_bug(message: str, config: dict, version: str | None) -> str:
    """SG1 or SG2 for a request that waited past the drain bound (serving.py's message says what the drainer did),
    where the release's ``lora_drainer.py`` has the bug's line; "" otherwise."""
    drainer = _release_file(version, "srt/lora/lora_drainer.py")
    if "was marked draining for it at round" in message and "admitted 0 more" not in message and \
            DRAIN_BUDGET_RECOMPUTED in drainer:
        return "SG2"  # the draining adapter admitted requests against a budget its admissions keep renewing
    if "no running adapter was marked draining for it" in message and "(None) waited" not in message and \
            any(a.get("pinned") for a in config.get("adapters", {}).values()) and DRAINER_FULL_CHECK in drainer:
        return "SG1"  # the drainer counts running adapters, the admission the slots pinned adapters leave
    return ""


# triton_v2's expand kernels (0.5.23 kernels/ops/lora/common/lora_b.py) load a K block of the shrink's bridge under
# the pool's static rank mask and select the slot's live rank after the load ("Select, not multiply: the unselected
# lanes may hold anything"): the lanes past a smaller adapter's rank are read never written and discarded, by design
RANK_OVERREAD_KERNELS = ("_grouped_lora_b_kernel", "_per_row_lora_b_kernel")


def _rank_overread(sig: dict, version: str | None) -> bool:
    """An uninitialized read of the dense runner's bridge (``LoraWorkspace``) at an expand kernel's bridge load,
    which the kernel then masks to the live rank with ``tl.where`` (checked in the release's file)."""
    if sig["kind"] != "uninitialized-read" or sig.get("kernel") not in RANK_OVERREAD_KERNELS or \
            not (sig.get("tensor") or "").startswith("torch.empty@workspace.py"):
        return False
    location = sig.get("location", "")
    text, _, line = location.rpartition(":")
    after = _source_line(f"{text}:{int(line) + 40}", version, before=40) if line.isdigit() else ""
    return "lhs = tl.load(lhs_ptrs" in _source_line(location, version) and "lhs = tl.where(k_mask" in after


def _label(sig: dict) -> str:
    """A result's label without the path its logits went through: ``step.logits[torch_native, graph]`` ->
    ``step.logits`` (runner.Session.path: the backend and graph mode, named since G1 and G2 shared a signature)."""
    return (sig.get("tensor") or "").split("[", 1)[0]


def _graph_path(sig: dict, config: dict) -> bool:
    """Whether the result went through a decode graph replay: the label says so (``[backend, graph ...]``); a
    label without a path (findings of the target before it named one) counts every case with graphs."""
    tensor = sig.get("tensor") or ""
    if "[" in tensor:
        return ", graph" in tensor
    return bool(config.get("graph_bs"))


def _torch_native_lm_head_unpruned(sig: dict, config: dict, version: str | None) -> bool:
    """A wrong row (an adapter's logits or logprobs, or a base-model row that is not the base model's) of a
    torch_native case with lm_head LoRA, in a release whose torch_native backend never routes lm_head over the
    LogitsProcessor's kept rows (no pruned lm_head batch info: docs/findings/sglang-g1-torch-native-lm-head.md)."""
    wrong_row = sig["kind"] == "numeric-mismatch" or (sig["kind"] == "state-violation"
                                                       and _label(sig) == "base-rows")
    # 0.5.6.post1 - 0.5.6.post2's ops expand the segment lengths to the rows (repeat_interleave with output_size):
    # the whole batch's lengths over the LogitsProcessor's pruned rows raise instead of running the wrong slots
    wrong_row = wrong_row or (sig["kind"] == "crash" and sig.get("kernel") == "RuntimeError"
                              and "torch_ops/lora_ops.py" in sig.get("location", ""))
    torch_backend = _release_file(version, "srt/lora/backend/torch_backend.py")
    eager = "[" not in (sig.get("tensor") or "") or not _graph_path(sig, config)  # a decode graph keeps every row
    return (wrong_row and eager and config.get("backend") == "torch_native"
            and "lm_head" in config.get("target_modules", ()) and bool(torch_backend)
            and "lm_head" not in torch_backend)


# 0.5.12+'s torch_native graph ops (lora/torch_ops/graph_lora_ops.py) slice a stacked module's shrink output by
# --max-lora-rank and contract over the slot's whole max rank, while the pool packs an adapter's slices by its own
# rank and leaves the rows past it as they were (docs/findings/sglang-g2-torch-native-graph-rank.md)
GRAPH_MAX_RANK = "max_rank = input_dim // num_slices"


def _torch_native_graph_max_rank(sig: dict, config: dict, version: str | None) -> bool:
    """A wrong adapter row (or a base-model row that is not the base model's) of a torch_native case with decode
    graphs, in a release whose graph ops slice by the pool's max rank."""
    wrong_row = sig["kind"] == "numeric-mismatch" or (sig["kind"] == "state-violation"
                                                       and _label(sig) == "base-rows")
    return (wrong_row and config.get("backend") == "torch_native" and _graph_path(sig, config)
            and GRAPH_MAX_RANK in _release_file(version, "srt/lora/torch_ops/graph_lora_ops.py"))


EMBEDDING_ZEROED = "Zero out embedding/lm_head buffers for adapters without embedding LoRA"
# 0.5.10+ zeroes them in the ``else`` of ``if lora_adapter.embedding_layers:`` only (0.5.6.post2 - 0.5.9 never): an
# adapter with embed_tokens but not lm_head (or the reverse) keeps the slot's previous lm_head (embed_tokens) weights
# (G3, docs/findings/sglang-g3-partial-embedding-unzeroed.md)
EMBEDDING_ZEROED_ONLY_WITHOUT = re.compile(r"else:\s*#\s*" + re.escape(EMBEDDING_ZEROED))


def _embedding_partial_unzeroed(sig: dict, config: dict, version: str | None) -> bool:
    """A wrong row (an adapter's logits or logprobs) of a case where an adapter has one of ``embed_tokens`` /
    ``lm_head`` and another adapter has the other (whose weights a slot reuse leaves), in a release whose pool zeroes
    the embedding / lm_head buffers only for an adapter with neither (G3)."""
    wrong_row = sig["kind"] == "numeric-mismatch" or (sig["kind"] == "state-violation"
                                                       and sig.get("tensor") == "base-rows")
    pair = {"embed_tokens", "lm_head"}
    held = [set(a.get("modules", ())) & pair for a in config.get("adapters", {}).values()]
    stale = any(len(h) == 1 and any(o - h for o in held) for h in held)
    return (wrong_row and stale and pair <= set(config.get("target_modules", ()))
            and pool_leaves_partial_embedding(_release_file(version, "srt/lora/mem_pool.py")))


# 0.5.11 - 0.5.22: --lora-use-virtual-experts hands a gated expert's stacked gate_up LoRA (A of rank 2r: gate's, then
# up's; B of rank r) to merged_experts_fused_moe_lora_add, whose one expand contracts only the first r columns of the
# shrink: the up half gets gate's A (described by PR #27274; 0.5.23 pairs the halves: a_output_slices=2)
VIRTUAL_GATED_PAIRED = "a_output_slices"


def _virtual_gated_unpaired(sig: dict, config: dict, version: str | None) -> bool:
    """A wrong row of a MoE case with virtual experts whose adapters have LoRA on an expert's gate or up projection,
    in a release whose virtual-expert path does not pair the gate and up halves (#27274)."""
    wrong_row = sig["kind"] == "numeric-mismatch" or (sig["kind"] == "state-violation"
                                                       and (sig.get("tensor") or "").startswith("base-rows"))
    gated = any({"gate_proj", "up_proj"} & set(a.get("modules", ())) for a in config.get("adapters", {}).values())
    runners = _release_file(version, "srt/lora/lora_moe_runners.py")
    return (wrong_row and gated and bool((config.get("moe") or {}).get("virtual"))
            and "lora_use_virtual_experts" in runners and VIRTUAL_GATED_PAIRED not in runners)


def pool_leaves_partial_embedding(pool: str) -> bool:
    """The release's pool has embedding / lm_head buffers (0.5.6.post2+) and leaves them unzeroed for an adapter with
    one of the two modules: it zeroes them only for an adapter with neither (0.5.10+), or never (0.5.6.post2 - 0.5.9,
    where ``emb-unzeroed`` is the wider form)."""
    return "def get_embedding_lora_A_shape" in pool and (
        EMBEDDING_ZEROED not in pool or bool(EMBEDDING_ZEROED_ONLY_WITHOUT.search(pool)))
# 0.5.7 - 0.5.9's TorchNativeLoRABackend.prepare_lora_batch copies the per-run slot table (unique_consecutive of
# the requests' slots) into the first bs rows: a batch with fewer runs of equal adapters than requests (and more than
# one) crashes, "The size of tensor a (bs) must match ..." (fixed upstream by PR #20564, in 0.5.10: [:num_segments])
TORCH_NATIVE_RUNS_BY_REQUEST = "batch_info.weight_indices[:bs].copy_(weight_indices_tensor"


def _torch_native_runs_by_request(torch_backend: str) -> bool:
    """The torch_native backend groups requests into runs of equal adapters (``unique_consecutive``: 0.5.7+;
    0.5.6.post1 - 0.5.6.post2's table is per request) and copies the runs' table into ``bs`` rows (#20564)."""
    return "unique_consecutive" in torch_backend and TORCH_NATIVE_RUNS_BY_REQUEST in torch_backend
# 0.5.6.post1 - 0.5.6.post2's torch_native ops (vLLM's bgmv/sgmv, lora/torch_ops/lora_ops.py) take each slot's whole
# max-rank A and B and every stacked slice, ignoring the adapter's rank and the modules it lacks: they contract over
# pool rows that were never written (garbage on a GPU); reworked with per-slot ranks by PR #15187, in 0.5.7
TORCH_NATIVE_V0_OPS = "def bgmv_shrink("
DRAINER_FULL_CHECK = "if len(running_adapter_ids) < self.max_loras_per_batch:"
# SG2: a draining adapter's budget, stats.max_remaining_tokens, is recomputed every round over all its running
# requests (lora_drainer.py:98), the ones admitted while draining included (docs/findings/sg2-*)
DRAIN_BUDGET_RECOMPUTED = "<= stats.max_remaining_tokens * DRAIN_SCHEDULE_TOLERANCE"
# 0.5.10 - 0.5.15.post1's TritonLoRABackend._prepare_lm_head_batch_info appends each logprob pass's batch info to the
# attribute (None) instead of its local list: lm_head LoRA with input logprobs in > 1 pass crashes (described by
# PR #31910; gone from 0.5.16)
LM_HEAD_PASSES_DROPPED = "self.lm_head_pass_batch_infos.append("


def _csgmv_grid_frozen(version: str | None) -> bool:
    """The release's csgmv kernels size their grid and ``num_segs`` by the batch's segment count, which a CUDA
    graph freezes at its capture's (#28371; 0.5.15 sizes them by the static ``weight_indices``: ``segment_grid``)."""
    from .site import site_dirs
    if not version:
        return False
    found = list((site_dirs(version)[0] / "sglang").rglob("chunked_sgmv_shrink.py"))
    return bool(found) and not any("segment_grid" in p.read_text(encoding="utf-8") for p in found)


def _lm_head_unpruned(version: str | None) -> bool:
    """The release has lm_head LoRA but routes it over the batch's every token while the LogitsProcessor hands
    lm_head only the kept rows (no ``lm_head_batch_info``: 0.5.6.post2 - 0.5.9; PR #18649 adds it in 0.5.10)."""
    layers = _release_file(version, "srt/lora/layers.py")
    return "class ParallelLMHeadWithLoRA" in layers and "lm_head_batch_info" not in layers


def _engine_release_bug(sig: dict, backend, version: str | None, graph: bool = False, targets=()) -> str:
    """The engine findings whose cause is in the release's own file, recognised by what the release has."""
    tensor, kind = sig.get("tensor") or "", sig["kind"]
    if kind == "uninitialized-read" and tensor.startswith("torch.empty@triton_backend.py") and \
            sig.get("kernel", "").startswith("_sgemm_lora_") and "seg_indptr" in _source_line(sig.get("location", ""),
                                                                                              version):
        return "#14177"
    if kind == "uninitialized-read" and tensor.startswith("torch.empty@mem_pool.py:") and \
            "embedding" in _source_line(tensor.split("@", 1)[1], version, before=12) and \
            EMBEDDING_ZEROED not in _release_file(version, "srt/lora/mem_pool.py"):
        return "emb-unzeroed"
    if kind == "numeric-mismatch" and backend == "csgmv" and graph and _csgmv_grid_frozen(version):
        return "#28371"
    # the shrink reads past its input (the kept rows) and writes past its output; the expand then reads past the
    # shrink's output, its own input (the segments of the whole batch over the kept rows' LoRA-A result)
    # (csgmv the same: its chunked shrink over the kept rows, the expand over the shrink's output)
    shrink_out = tensor.startswith("torch.empty@triton_ops/sgemm_lora_a.py")
    csgmv_out = tensor.startswith("torch.empty@triton_ops/chunked_sgmv_shrink.py")
    kernel = sig.get("kernel", "")
    if kind == "out-of-bounds" and _lm_head_unpruned(version) and (
            (kernel == "_sgemm_lora_a_kernel" and (tensor == "_sgemm_lora_a_kernel:x" or shrink_out))
            or (kernel == "_sgemm_lora_b_kernel" and shrink_out)
            or (kernel == "_chunked_lora_shrink_kernel" and (tensor == "_chunked_lora_shrink_kernel:x" or csgmv_out))
            or (kernel == "_chunked_lora_expand_kernel" and csgmv_out)):
        return "#18649"
    if kind == "crash" and backend == "triton" and "triton_backend.py" in sig.get("location", "") and \
            LM_HEAD_PASSES_DROPPED in _release_file(version, "srt/lora/backend/triton_backend.py"):
        return "#31910"
    torch_backend = _release_file(version, "srt/lora/backend/torch_backend.py")
    location = sig.get("location", "")
    if kind == "crash" and backend == "torch_native" and sig.get("kernel") == "RuntimeError" and \
            "torch_backend.py" in location and _torch_native_runs_by_request(torch_backend):
        return "#20564"
    in_ops = "torch_ops/lora_ops.py" in location
    # None (the base class's run_lora_a_embedding) into the B GEMM: the ops' (0.5.7+) or the backend's (0.5.6.post2)
    if kind == "crash" and backend == "torch_native" and (in_ops or "torch_backend.py" in location) and \
            sig.get("kernel") == "AttributeError" and "embed_tokens" in targets and torch_backend and \
            "def run_lora_a_embedding" not in torch_backend:
        return "torch-native-embedding"
    if kind == "uninitialized-read" and backend == "torch_native" and in_ops and \
            tensor.startswith("torch.empty@mem_pool.py") and \
            TORCH_NATIVE_V0_OPS in _release_file(version, "srt/lora/torch_ops/lora_ops.py"):
        return "#15187"
    if kind == "crash" and backend == "csgmv" and "chunked_sgmv_expand" in sig.get("location", "") and \
            "def run_lora_a_embedding" not in _release_file(version, "srt/lora/backend/chunked_backend.py"):
        return "csgmv-embedding"
    return ""


def category(f: dict, version: str | None = None) -> str:
    if f["case"].get("target") == "sglang_engine":
        return engine_category(f, version)
    sig = f["signature"]
    vs = [f.get("violation") or {"kind": sig["kind"], "tensor": sig["tensor"]}] + f.get("others", [])
    backend = f["case"]["config"].get("backend")
    if sig["tool"] == "target":
        return "target"
    if sig.get("kernel") == "_sgemm_lora_b_kernel" and sig["kind"] in ("out-of-bounds", "uninitialized-read",
                                                                      "stale-read"):
        text = _source_line(sig.get("location", ""), version)
        if "w_ptrs" in text or "output_ptr" in text:
            return "n-mask"
    tensors = {v.get("tensor", "") for v in vs}
    if any(t.endswith("cuda_graph_batch_info.seg_indptr") for t in tensors) and \
            any(v.get("kind") == "uninitialized-read" for v in vs):
        return "#14177"
    if backend == "csgmv" and any(t.startswith("replay.") or t.startswith("cuda_graph_batch_info.") for t in tensors):
        return "#28371"
    if backend == "triton" and any(v.get("kind") == "stale-read"
                                   and v.get("tensor", "").startswith("cuda_graph_batch_info.weight_indices")
                                   for v in vs):
        return "padding"
    return "untriaged"


def rows(out: Path, versions: list[str]) -> list[str]:
    lines = ["| SGLang | cases | finding (signature) | triage | first found after | minimal case |",
             "|---|---|---|---|---|---|"]
    for v in versions:
        p = out / f"{v}.json"
        if not p.exists():
            lines.append(f"| {v} | — | no report (set-up or campaign failed: see {v}.log) | | | |")
            continue
        r = json.loads(p.read_text())
        run = r["runs"][0] if r.get("runs") else {}
        n = run.get("examples", r.get("summary", {}).get("examples", "?"))
        found = run.get("findings", [])
        if not found and not n and not run.get("replayed"):  # "none" would read as a clean release
            lines.append(f"| {v} | 0 | **no case ran** (the budget ended during the start-up: see {v}.log) | | | |")
        elif not found:
            lines.append(f"| {v} | {n} | none | | | |")
        for f in found:
            s = f["signature"]
            sig = f"{s['kind']} of `{s['tensor']}` in {s.get('kernel', '')} at {s.get('location', '')} [{s['tool']}]"
            after = f.get("first_found_after_examples", "?")
            lines.append(f"| {v} | {n} | {sig} | {category(f, v)} | {after} ex | {_ops(f['case'])} |")
    return lines


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print("\n".join(rows(Path(argv[0]), argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
