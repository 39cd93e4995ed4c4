"""Planted faults: each a small change of one SGLang object of the case (the pool, its eviction policy, the
tokenizer manager's registry, the scheduler's admission), made after start-up, so that the oracles are shown to
catch the class of bug it stands for."""

from __future__ import annotations

import torch

from fuzzrunner import tracking

from . import backend_faults
from .moe import unavailable as moe_unavailable
from .scheduler_faults import SERVER_FAULTS

FAULTS = {
    "unload_keeps_slot":
        "LoRAMemoryPool.remove_lora drops the adapter's uid -> slot entry but leaves buffer_id_to_uid naming it: the "
        "slot table is no longer one-to-one and the unloaded adapter stays reachable from its slot (a later "
        "eviction of it then looks up a uid the pool forgot).",
    "load_keeps_residual_weights":
        "LoRAMemoryPool.load_lora_weight_to_buffer skips zeroing the modules the new adapter does not adapt (SGLang "
        "zeroes them 'to avoid contamination from the residual weight of the evicted adapters'): an adapter that "
        "takes a slot after one with more target modules runs the old adapter's weights there.",
    "evict_batch_adapter":
        "the eviction policy's select_victim ignores its candidates and takes a resident adapter that is not one "
        "of them, i.e. one the current batch needs: a full pool evicts an adapter its batch still needs.",
    "lru_evicts_pinned":
        "LoRARegistry.lru_lora_name ignores exclude_pinned: --max-loaded-loras unloads the least recently used "
        "adapter even when the user pinned it.",
    "admission_ignores_running":
        "the scheduler admits each waiting LoRA request against its own adapter only, not the adapters of the "
        "batch it joins (can_schedule_lora_req's running set left out): a batch needs more pool slots than "
        "--max-loras-per-batch.",
    "capture_without_lora_batch":
        "the decode graph runner captures without preparing its dummy LoRA batch (decode_cuda_graph_runner.py:1397 "
        "left out): the graphs point at whatever batch info the backend held at start-up.",
    "logprob_pass_stale_routing":
        "ParallelLMHeadWithLoRA.set_lm_head_pass ignores the pass index the LogitsProcessor gives it: every chunked "
        "input-logprob pass of lm_head runs with the first pass's adapter routing (lm_head_pass_batch_infos[0]), "
        "so later passes' rows get another request's lm_head delta, or a routing of another row count.",
    "moe_load_swaps_gate_up":
        "LoRAMemoryPool.load_lora_weight_to_buffer writes each expert's gate and up LoRA B into each other's half of "
        "the slot's gate_up_proj_moe buffer (MoE cases): an adapter's experts run its up delta on the gate and its "
        "gate delta on the up projection.",
}
FAULTS |= backend_faults.FAULTS  # the backends beyond triton / csgmv, the graph runner's variant choice
FAULTS |= SERVER_FAULTS
FRONTEND_FAULTS = ("lru_evicts_pinned", "admission_ignores_running")


def plant(mgr, faults: set, front=None, model=None, server=None) -> None:
    if server is not None:
        from .scheduler_faults import plant_server
        plant_server(server, faults)
    elif faults & set(SERVER_FAULTS):
        raise ValueError(f"faults {sorted(faults & set(SERVER_FAULTS))} need SGLang's scheduler path (scheduler.py)")
    if "logprob_pass_stale_routing" in faults and model is not None and hasattr(model.lm_head, "set_lm_head_pass"):
        _stale_pass(model.lm_head)
    if "lru_evicts_pinned" in faults:
        _lru_evicts_pinned(front.tok.lora_registry)
    # admission_ignores_running: Frontend.admit(ignore_running=True); capture_without_lora_batch: DecodeGraphs
    # (skip_prepare): the runner passes them
    pool = mgr.memory_pool
    if "unload_keeps_slot" in faults:
        _unload_keeps_slot(pool)
    if "load_keeps_residual_weights" in faults:
        _load_keeps_residual_weights(pool)
    if "evict_batch_adapter" in faults:
        _evict_batch_adapter(pool)
    if "moe_load_swaps_gate_up" in faults:
        _moe_load_swaps_gate_up(pool)


def _unload_keeps_slot(pool) -> None:
    def remove_lora(uid):
        slot = pool.uid_to_buffer_id.get(uid)
        if slot is None:
            return None
        pool._clear_buffer_slot_for_base(slot)
        del pool.uid_to_buffer_id[uid]
        pool.eviction_policy.remove(uid)  # buffer_id_to_uid[slot] = EMPTY_SLOT left out
        return slot
    pool.remove_lora = remove_lora


EMBEDDING_BUFFERS = ("embedding_A_buffer", "embedding_B_buffer", "lm_head_A_buffer", "lm_head_B_buffer")


def unavailable(api, fe=None, logits_processor: bool = True, scheduler: bool = False, drawn=None) -> dict:
    """{fault: why it cannot be planted in this release, or with only the backends ``drawn`` drawn}."""
    out = backend_faults.unavailable(api, drawn)
    if not scheduler:
        for f in SERVER_FAULTS:
            out[f] = (f"SGLang {api.version}'s scheduler is not driven here (scheduler.py: its Scheduler / "
                      f"ModelRunner lack a method the path runs, or its pools do not build on the CPU)")
    if not logits_processor or not api.lm_head_passes:
        out["logprob_pass_stale_routing"] = (f"SGLang {api.version}'s lm_head LoRA has no per-pass routing "
                                             f"(ParallelLMHeadWithLoRA.set_lm_head_pass: 0.5.10+)")
    why = moe_unavailable()
    if why:
        out["moe_load_swaps_gate_up"] = f"SGLang {api.version}'s MoE LoRA is not driven here ({why}: moe.py)"
    if not api.unload_frees_slot:
        out["unload_keeps_slot"] = (f"SGLang {api.version}'s unload_lora_adapter leaves the pool as it is (no "
                                    f"LoRAMemoryPool.remove_lora): there is no slot-freeing step to break")
    if fe is None:
        for f in FRONTEND_FAULTS:
            out[f] = (f"SGLang {api.version}'s tokenizer manager and scheduler are not driven here (no "
                      f"frontend-ok stamp: scripts/sglang_setup.sh {api.version})")
    elif not fe.evicts:
        out["lru_evicts_pinned"] = (f"SGLang {api.version}'s load_lora_adapter refuses loads beyond "
                                    f"--max-loaded-loras: it evicts nothing")
    return out


def _moe_load_swaps_gate_up(pool) -> None:
    original = pool.load_lora_weight_to_buffer

    def load(uid, buffer_id, *args, **kwargs):
        original(uid, buffer_id, *args, **kwargs)
        if uid is None:
            return
        for b in pool.B_buffer.get("gate_up_proj_moe", ()):  # [slots, experts, 2 * inter, rank]
            half = b.shape[2] // 2
            with tracking.quiet():
                b[buffer_id] = torch.cat([b[buffer_id, :, half:], b[buffer_id, :, :half]], dim=1)
    pool.load_lora_weight_to_buffer = load


def _stale_pass(lm_head) -> None:
    original = lm_head.set_lm_head_pass

    def set_lm_head_pass(pass_idx):
        return original(0)
    lm_head.set_lm_head_pass = set_lm_head_pass


def _lru_evicts_pinned(registry) -> None:
    original = registry.lru_lora_name

    async def lru_lora_name(exclude_pinned=False):
        return await original(exclude_pinned=False)
    registry.lru_lora_name = lru_lora_name


def _slot_views(pool, slot: int) -> list:
    views = [t[slot] for bufs in (pool.A_buffer, pool.B_buffer) for layers in bufs.values() for t in layers]
    return views + [t[slot] for name in EMBEDDING_BUFFERS for t in getattr(pool, name, {}).values()]


def _load_keeps_residual_weights(pool) -> None:
    original = pool.load_lora_weight_to_buffer

    def load(uid, buffer_id, *args, **kwargs):
        with tracking.quiet():  # the fault's own snapshot: never-written bytes are no read of SGLang's
            before = [v.clone() for v in _slot_views(pool, buffer_id)]
        original(uid, buffer_id, *args, **kwargs)
        if uid is None:
            return
        with tracking.quiet():
            for view, old in zip(_slot_views(pool, buffer_id), before):
                if not view.count_nonzero() and old.count_nonzero():  # zeroed as a module the adapter lacks
                    view.copy_(old)
    pool.load_lora_weight_to_buffer = load


def _evict_batch_adapter(pool) -> None:
    policy = pool.eviction_policy
    original = policy.select_victim

    def select_victim(candidates):
        # a resident adapter that is not a candidate: one the batch needs. Always one of those (not the least
        # recently used resident): the pool loads a batch's adapters in the order of a set of ids, which changes
        # with the process's string hashing, and a victim the batch reloads later would hide the fault
        order = list(getattr(policy, "access_order", getattr(policy, "insertion_order", {})))
        needed = [u for u in order if u is not None and u in pool.uid_to_buffer_id and u not in candidates]
        return needed[0] if needed else original(candidates)
    policy.select_victim = select_victim
