"""Target ``vllm_engine``: vLLM's own LoRA engine state, as shipped.

Where ``vllm_lora`` drives vLLM's LoRA kernels and their metadata, this target drives the state an engine
keeps between steps, with vLLM's own objects: the worker's ``LRUCacheWorkerLoRAManager`` and the
``LRUCacheLoRAModelManager`` it builds (loading PEFT folders, LRU eviction under ``max_loras`` /
``max_cpu_loras``, pinning, the mapping and its cache), every ``*WithLoRA`` layer of a Llama-shaped model of
vLLM's layer classes through its own forward, and the V2 model runner's ``LoraState`` and LoRA mixin
(``make_lora_inputs``, ``_set_active_loras``, ``maybe_dummy_run_with_lora``); up to 0.33, also the V1 runner's
``InputBatch`` and ``CudagraphDispatcher`` (v1_runner.py). Same vLLM set-up as
``vllm_lora`` (``scripts/vllm_setup.sh VERSION``). See docs/vllm.md, "The engine target".
"""

from __future__ import annotations

import functools
import os

from fuzzrunner.errors import HarnessError, TargetUnavailable

from ..vllm_lora import check_patch, load_api, vllm_available

_FOUND: dict = {}
HERE = os.path.dirname(os.path.abspath(__file__))

# what of vLLM this target drives, as `fuzzrunner targets` says it (catalog.py reads it without importing this)
DRIVES = ("the worker's LRUCacheWorkerLoRAManager and LRUCacheLoRAModelManager (PEFT loading, LRU eviction, pinning)",
          "every *WithLoRA layer of a Llama-shaped model, and FusedMoEWithLoRA over vLLM's FusedMoE (MoE cases) "
          "and FusedMoE3DWithLoRA with PEFT's 3D-format expert adapters (half the MoE cases, on the CPU and on a GPU)",
          "the V2 model runner's LoraState, LoRA mixin and CUDA-graph dispatch",
          "the V1 model runner's InputBatch, CudagraphDispatcher and prompt logprobs (up to 0.33)",
          "the API server's OpenAIServingModels (load / unload an adapter, a request's served name) and the "
          "scheduler's KVCacheManager (prefix caching keyed by adapter)")


def load_engine() -> dict:
    """vLLM imported (as ``vllm_lora`` imports it: its site, patch and this process's CPU settings) and the engine
    pieces found, once per process. What a run's device changes is done by the run (``vllm_env.on_device``, from
    the run's context)."""
    if _FOUND:
        return _FOUND
    api = load_api()
    from . import vllm_env
    try:
        found = vllm_env.prepare()
    except HarnessError:
        raise
    except Exception as e:  # noqa: BLE001 - a release whose engine pieces do not import: say which
        raise TargetUnavailable(f"vLLM {api.version}'s LoRA manager or model runner does not import here "
                                f"({type(e).__name__}: {str(e).splitlines()[0][:200]}).") from None
    if found.get("LoraState") is None:
        raise TargetUnavailable(f"vLLM {api.version} has no V2 model runner LoraState (vllm.v1.worker.gpu.lora_utils);"
                                f" the vllm_engine target drives the V2 runner's LoRA bookkeeping.")
    check_patch(api, "vllm_engine")  # after its own imports: it runs files vllm_lora never imports
    found["api"] = api
    _FOUND.update(found)
    return _FOUND


def describe() -> list[str]:
    from . import moe
    f = load_engine()
    args = "req_ids, idx_mapping, num_scheduled_tokens" + (", num_logits" if f["make_lora_inputs_takes_num_logits"]
                                                           else "")
    how = f"make_lora_inputs({args})"
    return [f"vllm         {f['api'].version} (engine pieces)",
            "vllm driven  LRUCacheWorkerLoRAManager, LRUCacheLoRAModelManager, PEFT loading, the *WithLoRA layers of "
            "a Llama-shaped model of vLLM's layer classes (and, over vLLM's FusedMoE in moe cases, "
            f"{moe.LAYERS['2d']}, or {moe.LAYERS['3d']} for 3D-format adapters), "
            "PunicaWrapperGPU, LoRAModelRunnerMixin, LoraState."
            f"{how}" + (", sort_batch_req_ids" if f["sort_batch_req_ids"] else "")
            + ("; V1 runner: InputBatch, set_active_loras, CudagraphDispatcher, _get_prompt_logprobs_dict"
               if f.get("v1") else
               f"; no V1 runner cases ({_v1_missing()})")
            + (_v2_graphs_line(f["v2_graphs"]) if f.get("v2_graphs") else
               f"; no V2 runner graph cases ({_v2_graphs_missing()})")
            + _serving_line()]


def _serving_line() -> str:
    """What the serving cases drive on this release (serving.py, prefix_cache.py), or why none are drawn."""
    missing = serving_missing()
    return (f"; no serving cases ({missing})" if missing else
            "; serving layer: OpenAIServingModels (load_lora_adapter, unload_lora_adapter, the request path's "
            "_check_model, _maybe_get_adapters); prefix cache: KVCacheManager, the release's block hasher")


def _v2_graphs_line(g) -> str:
    """What the V2 runner's graph cases drive on this release (v2_graphs.find's shape)."""
    return {"lora_cases": "; V2 runner graphs: ModelCudaGraphManager, get_lora_capture_cases, "
                          "create_lora_capture_hook, get_num_active_loras_for_dispatch, dispatch_cg_and_sync_dp",
            "descriptors": "; V2 runner graphs (no LoRA capture cases before 0.24): ModelCudaGraphManager, "
                           "dispatch_cg_and_sync_dp" + ("" if g.piecewise_keyed_on_lora else
                                                        "; PIECEWISE graphs keyed without the LoRA: never replayed"),
            "sizes": "; V2 runner graphs (keyed on size): CudaGraphManager, get_cudagraph_runtime_mode, "
                     "get_cudagraph_and_dp_padding"}[g.shape]


def _v1_missing() -> str:
    from .v1_runner import MISSING
    return MISSING[0] if MISSING else "no V1 model runner"


def _v2_graphs_missing() -> str:
    from .v2_graphs import MISSING
    return MISSING[0] if MISSING else "no V2 runner CUDA-graph manager"


def prompt_rows_mapped(found: dict) -> bool:
    """This vLLM maps the prompt-logprobs rows to their requests' adapters (a fix of P1: its worker takes
    ``set_lora_rows``, docs/findings/p1_prompt_logprobs_mapping.patch)."""
    return bool(found.get("prompt_logprobs") and "set_lora_rows" in found["prompt_logprobs"].call)


def known_flags(found: dict) -> dict:
    """What ``known.label`` / ``known_id`` need to know of this vLLM to tell its known bugs apart."""
    from . import moe
    return {"logits_mapped_per_row": found["make_lora_inputs_takes_num_logits"],
            "dummy_maps_nothing": found["api"].protocol == "no_mapping",
            "prompt_rows_mapped": prompt_rows_mapped(found),
            "drops_last_chunk": bool(found.get("prompt_logprobs") and found["prompt_logprobs"].drops_last_chunk),
            "graphs_capture_per_lora": found.get("v2_graphs") is None or found["v2_graphs"].shape == "lora_cases",
            "mapping_cache_ignores_slots": mapping_cache_ignores_slots(), **moe.known_flags(),
            "token_id_rows_mapped": bool(found.get("prompt_logprobs") and
                                         "set_lora_rows" in found["prompt_logprobs"].token_id_call),
            "v1_prompt_rows_mapped": bool(found.get("v1") and found["v1"].prompt_logprobs.maps_prompt_rows),
            "lora_hash_name_only": lora_hash_name_only()}


def mapping_cache_ignores_slots() -> bool:
    """C1 (known.py) by the code this process imported: ``LoRAModelManager.set_adapter_mapping`` compares the mapping
    alone with the last one (#47725, 0.26, compares the slot layout too)."""
    import inspect

    from vllm.lora.model_manager import LoRAModelManager
    return "slot" not in inspect.getsource(LoRAModelManager.set_adapter_mapping)


def lora_hash_name_only() -> bool:
    """H1 (known.py) by the code this process imported: the prefix cache's block hash keys an adapter on its name
    alone (before #44950, 0.31)."""
    from . import prefix_cache
    try:
        return prefix_cache.hashes_name_only(prefix_cache.find())
    except ImportError:
        return False


def serving_missing() -> str | None:
    """Why this vLLM's serving layer or prefix cache cannot be driven here (serving.py, prefix_cache.py), or None."""
    from . import prefix_cache, serving
    found = serving.find()
    if "missing" in found:
        return found["missing"]
    try:
        prefix_cache.find()
    except ImportError as e:
        return f"vLLM's KV cache manager does not import here ({e})"
    return None


def make_target():
    from fuzzrunner.target import Target

    from . import cases, faults, features, known, runner
    found = load_engine()
    serving = serving_missing()
    return Target(
        name="vllm_engine",
        description=f"vLLM {found['api'].version}'s LoRA adapter manager (load, LRU eviction, pinning, mapping), "
                    f"*WithLoRA layers and V2-runner LoRA bookkeeping, driven through steps, dummy runs and churn",
        cases=functools.partial(cases.vllm_engine_cases, runners=("v2", "v1") if found.get("v1") else ("v2",),
                                v2_graphs=found.get("v2_graphs") is not None,
                                moe_blocks=found.get("moe_unavailable") is None,
                                prompt_scoring=found["prompt_logprobs"].scoring if found.get("prompt_logprobs")
                                else None, serving=serving is None),
        run=functools.partial(runner.run, found=found),
        faults=tuple(faults.FAULTS),
        fault_descriptions=dict(faults.FAULTS),
        features=features.features,
        feature_space=features.feature_space(bool(found.get("v1")), found.get("v2_graphs") is not None,
                                             found.get("moe_unavailable") is None,
                                             bool(found.get("prompt_logprobs") and found["prompt_logprobs"].scoring),
                                             serving=serving is None),
        details=tuple(describe()),
        faults_unavailable=faults.unavailable(found),
        code_under_test=found["api"].code,
        own_code=(HERE, os.path.join(os.path.dirname(HERE), "vllm_lora")),
        known_bugs=functools.partial(known.label, **known_flags(found)),
    )


TARGET = make_target
__all__ = ["TARGET", "load_engine", "make_target", "vllm_available"]
