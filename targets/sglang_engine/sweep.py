"""``scripts/sglang_sweep.sh --target sglang_engine``'s verdict table: one row per release, one column per known bug.

    python -m targets.sglang_engine.sweep OUT_DIR VERSION...   (reads OUT_DIR/VERSION.json, prints markdown)

Every campaign replays the target's seeds first (``seeds/``: each known bug's minimal case), so each release gets a
deterministic verdict per bug: **yes** (a finding of the campaign, the seed's or the search's, is triaged as that
bug by ``targets.sglang_lora.sweep.category``), no (the seed ran, and nothing was triaged as the bug), n/a (the
seed cannot run on the release: its one-line reason, e.g. no pool buffers for ``embed_tokens``). Each verdict is
checked against the release's own source (``present``: the buggy line, or the fix's absence, read from the set-up
tree): a verdict the source contradicts is marked ``(source: present)`` / ``(source: absent)``, a wrong verdict of
the target or of the triage to look at. The per-finding rows follow (``targets.sglang_lora.sweep.rows``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from ..sglang_lora import sweep as lora_sweep
from . import keys as user_keys

# bug -> its seed's file stem (seeds/STEM.json)
SEEDS = {"#21380": "unload_keeps_slot_21380", "#28371": "csgmv_graph_segments_28371",
         "#14177": "graph_seg_indptr_14177", "n-mask": "sgemm_lora_b_n_mask", "emb-unzeroed": "embedding_unzeroed",
         "csgmv-embedding": "csgmv_embedding", "#18649": "lm_head_rows_18649", "#31910": "lm_head_passes_31910",
         "torch-native-lm-head": "torch_native_lm_head_g1", "torch-native-graph-rank": "torch_native_graph_rank_g2",
         "SG1": "drainer_pinned_slots_sg1", "SG2": "drain_budget_recomputed_sg2", "#20564": "torch_native_runs_20564",
         "torch-native-embedding": "torch_native_embedding", "#15187": "torch_native_rank_below_max_15187",
         "#27274": "moe_virtual_gated_27274",
         "embedding-partial-unzeroed": "embedding_partial_unzeroed_g3",
         "#16687": "base_request_over_limit_16687", "#25865": "staged_chunk_admission_25865",
         "#27597": "finished_adapter_unloaded_27597", "#24638": "radix_key_aliases_adapter_24638"}
KNOWN = tuple(SEEDS)
# the findings pages' names of the bugs sweep.py triages by what they are (docs/findings/)
NAMES = {"torch-native-lm-head": "G1", "torch-native-graph-rank": "G2", "embedding-partial-unzeroed": "G3"}


def present(bug: str, version: str) -> bool | None:
    """Whether the release's own files have the bug (None: no set-up tree to read)."""
    f = lambda rel: lora_sweep._release_file(version, rel)  # noqa: E731
    if not f("srt/lora/mem_pool.py"):
        return None
    pool = f("srt/lora/mem_pool.py")
    # embedding / lm_head LoRA: the pool has their buffers (0.5.6.post2+; 0.5.5's layers.py has the layer class already)
    embedding = "def get_embedding_lora_A_shape" in pool
    return {
        "#21380": "def remove_lora" not in pool,
        "#28371": lora_sweep._csgmv_grid_frozen(version),
        "#14177": "seg_indptr=torch.empty(max_bs_in_cuda_graph" in f("srt/lora/backend/triton_backend.py"),
        "n-mask": lora_sweep._sgemm_lora_b_unmasked(version),
        "emb-unzeroed": embedding and lora_sweep.EMBEDDING_ZEROED not in pool,
        "csgmv-embedding": embedding and "def run_lora_a_embedding" not in f("srt/lora/backend/chunked_backend.py"),
        "#18649": lora_sweep._lm_head_unpruned(version),
        "#31910": lora_sweep.LM_HEAD_PASSES_DROPPED in f("srt/lora/backend/triton_backend.py"),
        # G1: a torch_native backend that never routes lm_head LoRA over the LogitsProcessor's kept rows
        "torch-native-lm-head": embedding and bool(f("srt/lora/backend/torch_backend.py"))
        and "lm_head" not in f("srt/lora/backend/torch_backend.py"),
        "torch-native-graph-rank": lora_sweep.GRAPH_MAX_RANK in f("srt/lora/torch_ops/graph_lora_ops.py"),  # G2
        "SG1": lora_sweep.DRAINER_FULL_CHECK in f("srt/lora/lora_drainer.py"),
        "SG2": lora_sweep.DRAIN_BUDGET_RECOMPUTED in f("srt/lora/lora_drainer.py"),
        "#20564": lora_sweep._torch_native_runs_by_request(f("srt/lora/backend/torch_backend.py")),
        "torch-native-embedding": embedding and bool(f("srt/lora/backend/torch_backend.py"))
        and "def run_lora_a_embedding" not in f("srt/lora/backend/torch_backend.py"),
        # the first torch_native ops (vLLM's bgmv / sgmv) over each slot's whole max rank and every stacked slice
        "#15187": lora_sweep.TORCH_NATIVE_V0_OPS in f("srt/lora/torch_ops/lora_ops.py"),
        # virtual experts without the gate / up pairing (0.5.11 - 0.5.22)
        "#27274": "lora_use_virtual_experts" in f("srt/lora/lora_moe_runners.py")
        and lora_sweep.VIRTUAL_GATED_PAIRED not in f("srt/lora/lora_moe_runners.py"),
        # G3: the pool leaves the embedding / lm_head buffers of an adapter with one of the two modules
        "embedding-partial-unzeroed": lora_sweep.pool_leaves_partial_embedding(pool),
        # the scheduler's LoRA admission: a base-model request never checked (0.5.7), a staged chunk not counted
        "#16687": lora_sweep.BASE_NEVER_CHECKED in f("srt/managers/scheduler.py"),
        "#25865": lora_sweep.RUNNING_ONLY in f("srt/managers/scheduler.py")
        and lora_sweep.STAGED_COUNTED not in f("srt/managers/scheduler.py"),
        # a finished request's adapter counted as running, asserted loaded after an unload (0.5.5 - 0.5.13.post1)
        "#27597": lora_sweep.finished_adapters_counted(version),
        # a request's own extra_key and its lora_id concatenated into one radix namespace (every 0.5.x: keys.py)
        "#24638": user_keys.concatenates(f("srt/managers/schedule_batch.py")),
    }[bug]


def _seed_runs(run: dict) -> tuple[set, dict]:
    """The seeds the campaign replayed (stems), and those it could not run (stem -> why)."""
    def stem(path: str) -> str:
        p = Path(path)
        return p.stem if p.parent.name == "seeds" else ""
    replayed = {stem(e["path"]) for e in run.get("replayed", [])} - {""}
    refused = {stem(q["path"]): q.get("why", "") for q in run.get("quarantined", []) + run.get("unsupported", [])
               if stem(q["path"])}  # unsupported: the release's refusal (UnsupportedCase), kept
    return replayed, refused


def _signature(violation: dict) -> dict:
    return {k: violation.get(k) or "" for k in ("tool", "kind", "kernel", "location", "tensor")}


def _top_level(text: str, sep: str) -> int:
    """Where ``sep`` first occurs in ``text`` outside parentheses, or -1."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith(sep, i):
            return i
    return -1


def refusal(why: str) -> str:
    """A seed's refusal (the target's ``UnsupportedCase`` message, as the report lists it) as a verdict cell says
    it: what the seed needs, and the release's own reason where the message quotes one (the scheduler path's "this
    release lacks ..."), without the file, the advice after ";" or the lists in parentheses; for example
    ``the scheduler path is not driven on SGLang 0.5.9: lacks sglang.srt.observability.req_time_stats`` (0.5.9's
    before the eighth stint; every release drives the path now, and SG1's seed before 0.5.12 reads
    ``lora_drain_wait_threshold=1.0: SGLang 0.5.9 has no LoRADrainer``)."""
    if why.startswith("/") and ".json: " in why:  # the file named first
        why = why.split(".json: ", 1)[1]
    end = _top_level(why, ";")
    head = (why if end < 0 else why[:end]).strip().rstrip(".")
    head = re.sub(r" \((it has|backends\.py|--lora-drain)[^()]*\)", "", head)
    release = re.search(r"this release ((lacks|fails to import)[^;()]*(\([^()]*\))?)", why[len(head):])
    return head + (f": {release.group(1).strip().rstrip('.')}" if release else "")


def cell(bug: str, version: str, triaged: set, replayed: set, refused: dict, stop: str = "") -> str:
    """One verdict: **yes**, no, n/a (the seed refused, with why), ``budget ran out`` (the campaign stopped on its
    budget before it replayed the seed: nothing is known, not "not found"), else ``– (seed not run)``."""
    seed = SEEDS[bug]
    if bug in triaged:
        verdict, found = "**yes**", True
    elif seed in replayed:
        verdict, found = "no", False
    elif seed in refused:
        # a release whose files have the bug while its seed cannot run there: a gap of the target, not a clean release
        gap = " (source: present)" if present(bug, version) else ""
        return f"n/a (refused: {refusal(refused[seed])}){gap}"
    elif stop == "budget":
        return "**budget ran out** (seed not run)"
    else:
        return "– (seed not run)"
    has = present(bug, version)
    if has is not None and has != found:
        verdict += f" (source: {'present' if has else 'absent'})"
    return verdict


def _why_no_report(out: Path, version: str) -> str:
    """Why a release has no report, from its log's last line (the set-up's error, or the campaign's)."""
    log = out / f"{version}.log"
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.exists() else []
    return f"{lines[-1][:200].replace('|', '/')} ({version}.log)" if lines else f"no {version}.log (not run)"


def verdicts(out: Path, version: str) -> dict:
    """The release's verdict cell per known bug (``row``'s), or {} without a report."""
    p = out / f"{version}.json"
    if not p.exists():
        return {}
    return dict(zip(KNOWN, row(out, version).split(" | ")[2:2 + len(KNOWN)]))


def _spans(versions: list[str], chosen: set) -> str:
    """``chosen`` among the ordered ``versions`` as runs of consecutive ones: ``0.5.8 - 0.5.23, 0.5.5``."""
    runs: list[list[str]] = []
    prev = False
    for v in versions:
        if v in chosen:
            if prev:
                runs[-1].append(v)
            else:
                runs.append([v])
        prev = v in chosen
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]} - {r[-1]}" for r in runs) or "none"


def ranges(out: Path, versions: list[str]) -> list[str]:
    """Per known bug, its release range from the sweep (the releases whose campaign found it: ``yes``), beside the
    releases where its seed ran silent, could not run, or was not reached, and the range the releases' own files
    give (``present``): what docs/findings' ranges are checked against. ``versions`` in release order."""
    lines = ["| bug | found on (the sweep) | seed ran, not found | n/a (seed refused) | not reached | "
             "release files have it |", "|---|---|---|---|---|---|"]
    cells = {v: verdicts(out, v) for v in versions}
    for b in KNOWN:
        got = {v: cells[v].get(b, "–") for v in versions}
        found, silent, refused = ({v for v in versions if got[v].startswith(p)} for p in ("**yes", "no", "n/a"))
        has = {v for v in versions if present(b, v)}
        lines.append(f"| {NAMES.get(b, b)}{f' ({b})' if b in NAMES else ''} | {_spans(versions, found)} | "
                     f"{_spans(versions, silent)} | {_spans(versions, refused)} | "
                     f"{_spans(versions, set(versions) - found - silent - refused)} | {_spans(versions, has)} |")
    return lines


def paths(run: dict) -> str:
    """The paths the campaign drove, from its declared features (the target declares a path's features only where
    it drives it on the release): SGLang's scheduler (and its LoRADrainer), and MoE LoRA with how many of the
    campaign's cases had the sparse block, by expert layout (cases.MOE_LAYOUTS)."""
    cov = run.get("coverage") or {}
    declared, counts = set(cov.get("declared", ())), cov.get("features", {})
    sched = ("scheduler + drainer" if "drain=on" in declared else "scheduler" if "step=stream" in declared
             else "no scheduler")
    if "moe=on" not in declared:
        return f"{sched}; no MoE"
    virtual, shared = counts.get("moe.virtual_experts=on", 0), counts.get("moe.shared_outer=on", 0)
    return (f"{sched}; MoE {counts.get('moe=on', 0)} of {cov.get('cases', 0)} cases (shared-outer {shared}, "
            f"virtual {virtual})")


def row(out: Path, version: str) -> str:
    p = out / f"{version}.json"
    if not p.exists():
        return (f"| {version} | – | " + " | ".join("–" for _ in KNOWN)
                + f" | – | no report: {_why_no_report(out, version)} | |")
    r = json.loads(p.read_text())
    run = r["runs"][0] if r.get("runs") else r
    findings = run.get("findings", [])
    cats = [lora_sweep.category(f, version) for f in findings]
    # a finding reproduces every bug one of its violations is triaged as: the campaign files a case under its first
    # violation, the rest ride along as "others" (0.5.6.post2's #18649 seed is filed as n-mask, its shrink's reads
    # past the LogitsProcessor's rows among the others)
    also = {lora_sweep.category(dict(f, signature={**f["signature"], **_signature(o)}, message=o.get("message", "")),
                                version) for f in findings for o in f.get("others", [])}
    replayed, refused = _seed_runs(run)
    others = [c for c in cats if c not in KNOWN and c != "target"]
    stop = run.get("stop_reason", "")
    if not run.get("examples") and not run.get("replayed") and not refused:
        why = "the budget ended during the start-up" if stop == "budget" else f"stop: {stop or 'unknown'}"
        others = [f"**no case ran** ({why})"]  # every cell says "seed not run" or "budget ran out"
    targets = cats.count("target")
    generated = run.get("generated", run.get("examples", "?"))
    budget = (run.get("settings") or {}).get("budget_s")
    cases = f"{generated} + {len(replayed)} seeds, {run.get('duration_s', 0):.0f} s"
    cases += f" of {budget:.0f}" if budget else ""
    found = set(cats) | also
    return (f"| {version} | {cases} | " + " | ".join(cell(b, version, found, replayed, refused, stop) for b in KNOWN)
            + f" | {paths(run)} | {', '.join(others) or 'none'} | {targets or '–'} |")


def table(out: Path, versions: list[str]) -> list[str]:
    head = "| SGLang | generated + seeds, campaign s of budget s | " + " | ".join(
        f"{NAMES[b]} ({b})" if b in NAMES else b for b in KNOWN)
    return ([head + " | paths driven | other findings | target errors |",
             "|---|---|" + "---|" * len(KNOWN) + "---|---|---|"]
            + [row(out, v) for v in versions])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out, versions = Path(argv[0]), argv[1:]
    print("\n".join(table(out, versions)))
    print()
    print("\n".join(ranges(out, versions)))
    print()
    print("\n".join(lora_sweep.rows(out, versions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
