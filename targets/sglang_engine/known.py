"""The real SGLang bugs ``sglang_engine`` finds on a release as shipped (docs/findings/, docs/sglang.md's triage),
named in a campaign's report: ``label`` is the target's ``known_bugs`` (fuzzrunner/engine/known.py; "known: G3 ...").
Which bug a finding is comes from the sweep's triage (``targets.sglang_lora.sweep.category``: the finding's case and
signature, read against the release's own files), so a campaign and the sweep tell the same bugs apart; a bug a
release does not have (by its files) is never named there.
"""

from __future__ import annotations

from ..sglang_lora import site
from ..sglang_lora import sweep as lora_sweep
from . import keys as user_keys

# sweep.py's triage -> the bug a user reads (id, title, upstream, status); v2-rank-overread (triton_v2's by-design
# over-read, silent since the shadow oracle follows discarded lanes), target, untriaged: not bugs of SGLang's
BUGS = {
    "torch-native-lm-head": ("G1", "torch_native applies lm_head LoRA with the whole batch's routing to the "
                             "LogitsProcessor's pruned rows",
                             "new as far as we found (PR #18649, closed, described it)",
                             "open; docs/findings/sglang-g1-torch-native-lm-head.md"),
    "torch-native-graph-rank": ("G2", "torch_native under decode graphs runs adapters of a rank below "
                                "--max-lora-rank with the wrong weights", "new as far as we found",
                                "open; docs/findings/sglang-g2-torch-native-graph-rank.md"),
    "embedding-partial-unzeroed": ("G3", "an adapter with LoRA on embed_tokens but not lm_head (or the reverse) runs "
                                   "the evicted adapter's weights in the other", "new as far as we found",
                                   "open; docs/findings/sglang-g3-partial-embedding-unzeroed.md"),
    "SG1": ("SG1", "with a pinned adapter loaded, --lora-drain-wait-threshold never drains",
            "not reported upstream as far as we found", "open; docs/findings/sg1-drainer-ignores-pinned-slots.md"),
    "SG2": ("SG2", "an adapter marked draining keeps admitting requests against a budget its admissions renew: the "
            "drain never ends under steady traffic", "not reported upstream as far as we found",
            "open; docs/findings/sg2-drain-budget-recomputed.md"),
    "#21380": ("#21380", "an unloaded adapter stays in its pool slot", "sgl-project/sglang#21380",
               "fixed upstream (LoRAMemoryPool.remove_lora)"),
    "#28371": ("#28371", "csgmv under decode graphs: the kernels' grid is the capture's segment count",
               "sgl-project/sglang#28371", "fixed upstream (0.5.15)"),
    "#14177": ("#14177", "the triton backend's graph seg_indptr read before it is written",
               "sgl-project/sglang#14177", "fixed upstream (0.5.6.post2)"),
    "n-mask": ("n-mask", "sgemm_lora_b masks neither B nor the output by column", "not identified",
               "fixed upstream (0.5.10)"),
    "emb-unzeroed": ("emb-unzeroed", "an adapter without embedding / lm_head LoRA runs its slot's never-written "
                     "embedding buffers", "not identified", "fixed upstream (0.5.10)"),
    "csgmv-embedding": ("csgmv-embedding", "csgmv with an explicit embed_tokens target crashes", "not identified",
                        "fixed upstream (0.5.10)"),
    "#18649": ("#18649", "lm_head LoRA routed over every token while the LogitsProcessor keeps some rows",
               "sgl-project/sglang#18649", "fixed upstream (0.5.10)"),
    "#31910": ("#31910", "lm_head LoRA with input logprobs in more than one pass crashes", "sgl-project/sglang#31910",
               "fixed upstream (0.5.16)"),
    "#20564": ("#20564", "torch_native crashes on a batch with fewer runs of equal adapters than requests",
               "sgl-project/sglang#20564", "fixed upstream (0.5.10)"),
    "torch-native-embedding": ("torch-native-embedding", "torch_native with embed_tokens LoRA crashes",
                               "PR #21885 added it", "fixed upstream (0.5.12)"),
    "#27274": ("#27274", "--lora-use-virtual-experts computes the up half of a gated expert's gate_up LoRA from "
               "gate's A", "sgl-project/sglang#27274 (describes it)", "fixed upstream (0.5.23)"),
    "#16687": ("#16687", "a base-model request is admitted without the slot check and pushes a batch past "
               "--max-loras-per-batch", "sgl-project/sglang#16687 (#16333)", "fixed upstream (0.5.8)"),
    "#25865": ("#25865", "the LoRA admission counts the running batch's adapters only, not a chunked prefill already "
               "staged: a batch of more adapters than --max-loras-per-batch", "sgl-project/sglang#25865 (PRs #25567, "
               "#26029)", "fixed upstream (0.5.13)"),
    "#27597": ("#27597", "a finished request's adapter still counts as running at the next admission: unloaded "
               "meanwhile (a --max-loaded-loras eviction, an unload), validate_lora_batch's assertion crashes the "
               "scheduler", "sgl-project/sglang#27597", "fixed upstream (0.5.14)"),
    "#24638": ("#24638", "a request's own extra_key and its lora_id are concatenated into one radix namespace: a "
               "base-model request whose extra_key is an adapter's lora_id reuses that adapter's cached K/V",
               "sgl-project/sglang#24638 (PRs #25214, #25351: closed unmerged)",
               "open (the issue closed as inactive); every release 0.5.5 - 0.5.23 concatenates"),
    "#15187": ("#15187", "0.5.6.post1 - 0.5.6.post2's torch_native ops contract over a slot's never-written rows",
               "sgl-project/sglang#15187", "fixed upstream (0.5.7)"),
}


def label(finding: dict, version: str | None = None) -> dict | None:
    """The target's ``known_bugs``: ``{"id", "title", "upstream", "status"}`` of the known bug ``finding`` (a report's
    finding: ``signature``, ``case``, ``code_under_test``) is, or None (a planted fault's finding, a new bug, a target
    error). ``version``: the release when the finding does not name it."""
    if finding["case"].get("faults"):
        return None
    release = (finding.get("code_under_test") or {}).get("release") or version
    bug = BUGS.get(key_collision(finding, release) or lora_sweep.category(finding, release))
    return None if bug is None else dict(zip(("id", "title", "upstream", "status"), bug))


def key_collision(finding: dict, version: str | None) -> str | None:
    """``#24638`` where the finding is a request reusing another adapter's K/V (``step.prefix-cache``), its case
    sends a key naming an adapter's lora_id (keys.py) and the release's ``Req.__init__`` concatenates the user's key
    and the lora_id (its ``schedule_batch.py``, read from the set-up tree); else None."""
    sig = finding["signature"]
    if sig.get("kind") != "state-violation" or sig.get("tensor") != "step.prefix-cache" or not version:
        return None
    if "of another adapter" not in finding.get("message", "") or not user_keys.aliases_an_adapter(finding["case"]):
        return None
    path = site.site_dirs(version)[0] / "sglang" / "srt" / "managers" / "schedule_batch.py"
    return "#24638" if path.exists() and user_keys.concatenates(path.read_text(encoding="utf-8")) else None


__all__ = ["BUGS", "key_collision", "label"]
