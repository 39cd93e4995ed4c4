"""What a vLLM release's source says about E1, E2, P1 and S1 (docs/findings/), read from its files, never imported.

    python -m targets.vllm_engine.source_facts [--wheels DIR] VERSION...
        (markdown; reads the tree scripts/vllm_setup.sh made, else the release's wheel: as
        ``python -m targets.vllm_lora.source_facts``)

Per release, with ``file:line`` of each fact:

* whether ``vllm_engine`` can load it: the V2 runner's ``LoraState`` (``v1/worker/gpu/lora_utils.py``);
* E1's halves: ``add_dummy_lora`` keeps a registered adapter under a warm-up id (``if lora_request.lora_int_id in
  self.list_adapters()``), and which runner's runtime dummy run (``execute_dummy_batch``) asks for every warm-up
  id: the V2 runner's ``_dummy_run(..., num_active_loras=max_loras)`` (#35536), or the V1 runner's ``_dummy_run``
  where ``maybe_select_dummy_loras`` has no ``num_active_loras`` (before 0.16 it hands every warm-up request to
  ``set_active_adapters`` whatever the mapping);
* E2's halves: ``LoRAConfig.target_modules`` (#34984) and the unguarded
  ``next(iter(lora_model.loras.values()))`` of ``_create_merged_loras_inplace``;
* P1: the V2 runner's ``prompt_logprob.py`` computes prompt logits without touching the LoRA mapping; its V1 form
  (``P1_v1``, vllm-project/vllm#51594): the V1 runner's ``_get_prompt_logprobs_dict`` does the same (#51597 would
  program the prompt rows' mapping there);
* S1: ``LoraState.make_lora_inputs`` maps one lm_head row per request (no ``num_logits``) while the V2 runner has
  speculative decoding (``v1/worker/gpu/spec_decode/``);
* W1: the V2 runner captures its graphs under ``maybe_setup_dummy_loras`` with no capture hook
  (``create_lora_capture_hook``, #35536, 0.24);
* R1: ``PackedLoRALayerWeights.pack_moe`` scales the expert adapters by ``lora_alpha / rank`` (recomputed there, or by
  the packed class from the alphas it is given) instead of each adapter's own ``scaling``: rsLoRA's ``alpha / sqrt(r)``
  dropped (vllm-project/vllm#55545, fixed by #55548);
* C1: ``LoRAModelManager.set_adapter_mapping`` compares the mapping alone with the last one (#47725 compares the slot
  layout too); M1, V0, V1: ``targets.vllm_lora.source_facts``' verdicts (``add_lora_fused_moe`` without the no-LoRA
  check; the V2 runner's "Fix warmup for LoRA" start-up; ``specialize_active_lora`` with a dispatch by LoRA count);
  L1: the V2 runner's prompt-logprobs worker skips a prompt whose last chunk is its last token (``prompt_lens - 1``);
* H1: the prefix cache's ``_gen_lora_extra_hash_keys`` keys an adapter on its name without its path (before #44950).

``known_flags(version)`` turns them into ``known.known_id``'s flags, as ``targets.vllm_engine.known_flags`` does from
the imported code (sweep.py triages every report's findings with them, in a process that imports no vLLM).
"""

from __future__ import annotations

import re
import sys

from ..vllm_lora import source_facts as lora_facts
from ..vllm_lora.source_facts import _find, _Tree

MIXIN = "vllm/v1/worker/lora_model_runner_mixin.py"
LORA_UTILS = "vllm/v1/worker/gpu/lora_utils.py"
V2 = "vllm/v1/worker/gpu/model_runner.py"
V1 = "vllm/v1/worker/gpu_model_runner.py"


def _function(root: _Tree, rel: str, name: str) -> str:
    """The source of ``def name`` in ``rel`` up to the next ``def`` at the same or a lower indent, or ''."""
    lines = (root.text(rel) or "").splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith(f"def {name}(")), None)
    if start is None:
        return ""
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= indent
                and not lines[i].lstrip().startswith((")", "]"))), len(lines))
    return "\n".join(lines[start:end])


def facts(version: str, wheel_dirs: tuple = ()) -> dict:
    root = _Tree(version, wheel_dirs)
    lora_state = _find(root, LORA_UTILS, r"^class LoraState")
    skip = _find(root, "vllm/lora/worker_manager.py", r"if lora_request\.lora_int_id in self\.list_adapters\(\)")
    select = _function(root, MIXIN, "maybe_select_dummy_loras")
    select_counts = "num_active_loras" in select.split("):", 1)[0]  # in its signature
    # the V2 runner's runtime dummy run (execute_dummy_batch) maps max_loras dummies from #35536 (0.24); 0.12 - 0.14's
    # V2 runner maps them in _dummy_run, which only its start-up calls (its DP dummy batch is
    # execute_model(dummy_run=True), which programs no LoRA)
    v2_maps = _find(root, V2, r"num_active_loras=max_loras") if root.text(V2) else ""
    v1_lora_dummy = _find(root, V1, r"maybe_dummy_run_with_lora\(") if root.text(V1) else ""
    v1_maps = v1_lora_dummy if (v1_lora_dummy and select and not select_counts) else ""
    target_modules = _find(root, "vllm/config/lora.py", r"^\s+target_modules: ")
    first = (_find(root, "vllm/lora/model_manager.py", r"first_lora.*= next\(iter\(lora_model\.loras\.values\(\)\)\)")
             or _find(root, "vllm/lora/models.py", r"first_lora.*= next\(iter\(lora_model\.loras\.values\(\)\)\)"))
    prompt = root.text("vllm/v1/worker/gpu/sample/prompt_logprob.py")
    prompt_at = _find(root, "vllm/v1/worker/gpu/sample/prompt_logprob.py", r"def compute_prompt_logprobs")
    make = _function(root, LORA_UTILS, "make_lora_inputs")
    spec = _find(root, V2, r"spec_decode")
    captures = _find(root, V2, r"with self\.maybe_setup_dummy_loras\(") if root.text(V2) else ""
    hook = _find(root, LORA_UTILS, r"def create_lora_capture_hook")
    pack_moe = _function(root, "vllm/lora/lora_weights.py", "pack_moe")
    mapping = (_function(root, "vllm/lora/model_manager.py", "set_adapter_mapping")
               or _function(root, "vllm/lora/models.py", "set_adapter_mapping"))
    kernels = lora_facts.facts(version, wheel_dirs) if root else {}
    v1_prompt = _function(root, V1, "_get_prompt_logprobs_dict") if root.text(V1) else ""
    lora_keys = _function(root, "vllm/v1/core/kv_cache_utils.py", "_gen_lora_extra_hash_keys")
    return {
        "version": version, "lora_state": lora_state, "add_dummy_skips_registered": skip,
        "select_takes_count": select_counts, "v2_runtime_dummy_maps": v2_maps, "v1_runtime_dummy_maps": v1_maps,
        "target_modules": target_modules, "unguarded_first_lora": first,
        "prompt_logprobs_v2": prompt_at if prompt is not None else "",
        "prompt_logprobs_touch_lora": bool(prompt and "lora" in prompt.lower()),
        "make_lora_inputs": _find(root, LORA_UTILS, r"def make_lora_inputs"),
        "per_logits_row": "num_logits" in make, "v2_spec_decode": spec,
        "E1": bool(skip and (v2_maps or v1_maps)),
        "E2": bool(target_modules and first),
        "P1": bool(prompt is not None and prompt_at and "lora" not in prompt.lower() and lora_state),
        "P1_v1": bool(v1_prompt and "compute_logits" in v1_prompt and "lora" not in v1_prompt.lower()),
        "v1_prompt_logprobs": _find(root, V1, r"def _get_prompt_logprobs_dict") if root.text(V1) else "",
        "S1": bool(make and "num_logits" not in make and spec),
        "W1": bool(lora_state and captures and not hook),
        "R1": bool(pack_moe) and not re.search(r"\w\.scaling\b", pack_moe),  # not the adapters' own scaling
        "C1": bool(mapping) and "slot" not in mapping,
        "M1": bool(kernels.get("moe_no_flag_check") and kernels.get("moe_naive")),  # the naive path reads it
        "V0": bool(kernels.get("V0")), "V1": bool(kernels.get("V1")),
        "L1": bool(_find(root, "vllm/v1/worker/gpu/sample/prompt_logprob.py", r"prompt_lens - 1")),
        "H1": bool(lora_keys) and "lora_path" not in lora_keys,  # the block hash keys the adapter's name alone
    }


def known_flags(version: str) -> dict:
    """``known.known_id``'s flags for the release as shipped, read from its files (``targets.vllm_engine.
    known_flags`` asks the imported code the same questions); no tree: the flags under which no finding is called a
    bug that the release may not have (S1, W1, V0, L1, C1, R1, M1 all off)."""
    if not _Tree(version):
        return {"logits_mapped_per_row": True}
    f = facts(version)
    return {"logits_mapped_per_row": f["per_logits_row"], "dummy_maps_nothing": f["V0"],
            "drops_last_chunk": f["L1"], "graphs_capture_per_lora": not f["W1"], "moe_drops_rslora": f["R1"],
            "moe_ignores_no_lora": f["M1"], "mapping_cache_ignores_slots": f["C1"],
            "v1_prompt_rows_mapped": bool(f["v1_prompt_logprobs"]) and not f["P1_v1"],
            "lora_hash_name_only": f["H1"]}


def _yes(flag: bool, *where: str) -> str:
    at = ", ".join(w for w in where if w)
    return f"**yes** ({at})" if flag else "no"


def main(argv: list[str]) -> int:
    wheel_dirs: tuple = ()
    if argv[:1] == ["--wheels"]:
        wheel_dirs, argv = (argv[1],), argv[2:]
    print("| vLLM | V2 `LoraState` (engine target loads) | E1 (runner whose runtime dummy run maps dummies) "
          "| E2 | P1 | S1 |")
    print("|---|---|---|---|---|---|")
    for v in argv:
        if not _Tree(v, wheel_dirs):
            print(f"| {v} | not set up | | | | |")
            continue
        f = facts(v, wheel_dirs)
        runners = [f"V2 {f['v2_runtime_dummy_maps']}" if f["v2_runtime_dummy_maps"] else "",
                   f"V1 {f['v1_runtime_dummy_maps']}" if f["v1_runtime_dummy_maps"] else ""]
        print(f"| {v} | {f['lora_state'] or 'no'} | {_yes(f['E1'], f['add_dummy_skips_registered'], *runners)} "
              f"| {_yes(f['E2'], f['target_modules'], f['unguarded_first_lora'])} "
              f"| {_yes(f['P1'], f['prompt_logprobs_v2'])} | {_yes(f['S1'], f['make_lora_inputs'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
