"""The properties of SGLang's LoRA state that its users and its kernels rely on, checked from outside.

Each function returns the broken ones, one line each (``ctx.check`` makes them ``state-violation``s).
They read SGLang's objects (that is what they check) but judge them against what the adapter files and
the requests say, never against another part of SGLang's metadata alone.
"""

from __future__ import annotations


def check_unloaded(mgr, lora_id: str, name: str) -> list[str]:
    """After ``unload_lora_adapter``: nothing of the adapter stays resident or reachable."""
    pool, out = mgr.memory_pool, []
    if lora_id in pool.uid_to_buffer_id:
        out.append(f"{name!r} still maps to pool slot {pool.uid_to_buffer_id[lora_id]} (uid_to_buffer_id)")
    slots = [i for i, u in enumerate(pool.buffer_id_to_uid) if u == lora_id]
    if slots:
        out.append(f"pool slot(s) {slots} still name {name!r} (buffer_id_to_uid)")
    for where in ("loras", "configs", "lora_refs"):
        if lora_id in getattr(mgr, where):
            out.append(f"the manager's {where} still holds {name!r}")
    if lora_id in getattr(pool.eviction_policy, "access_order", getattr(pool.eviction_policy, "insertion_order", {})):
        out.append(f"the eviction policy still tracks {name!r}")
    return out


def _slot_tensors(pool, slot: int, a_only: bool = False):
    for ab, bufs in (("A", pool.A_buffer), ("B", pool.B_buffer)):
        for key, layers in bufs.items():
            for layer, t in enumerate(layers):
                if ab == "A" or not a_only:
                    yield f"{key}.{ab}[layer {layer}]", t[slot]
    for kind, name in (("embedding.A", "embedding_A_buffer"), ("embedding.B", "embedding_B_buffer"),
                       ("lm_head.A", "lm_head_A_buffer"), ("lm_head.B", "lm_head_B_buffer")):
        if a_only and kind.endswith(".B"):
            continue
        for key, t in getattr(pool, name, {}).items():  # no embedding buffers before 0.5.12 (api.EngineAPI.modules)
            yield f"{kind} {key}", t[slot]


def check_pool(mgr, lora_ids: list, files: dict, names: list) -> list[str]:
    """After ``prepare_lora_batch``: the slot table is one-to-one, every adapter of the batch is resident,
    each request's row of the batch info names its adapter's slot, that slot's rank and scaling are its
    adapter's (from its files), and the base model's slot holds zeros: all its buffers where the release
    clears the slot for the base model (``_clear_buffer_slot_for_base``: "safe for graph-captured base-model
    replay"), its A buffers where the release zeroes only those (before that; its B stays as it was)."""
    pool, out = mgr.memory_pool, []
    for uid, slot in pool.uid_to_buffer_id.items():
        if not 0 <= slot < pool.max_loras_per_batch or pool.buffer_id_to_uid[slot] != uid:
            out.append(f"uid_to_buffer_id[{uid!r}] = {slot} but buffer_id_to_uid[{slot}] = "
                       f"{pool.buffer_id_to_uid[slot] if 0 <= slot < pool.max_loras_per_batch else 'out of range'}")
    info = mgr.lora_backend.batch_info
    # the triton and triton_v2 backends' weight_indices are per request; csgmv's per segment (requests sorted by
    # adapter), torch_native's per run of equal adapters (unique_consecutive)
    per_request = getattr(mgr.lora_backend, "name", "") in ("triton", "triton_v2")
    wi = info.weight_indices[: len(lora_ids)].tolist() if info is not None else []
    ranks = info.lora_ranks.tolist() if info is not None else []
    scalings = info.scalings.tolist() if info is not None else []
    for i, (uid, name) in enumerate(zip(lora_ids, names)):
        slot = pool.uid_to_buffer_id.get(uid)
        if slot is None:
            out.append(f"request {i}'s adapter {name!r} is not resident after prepare_lora_batch")
            continue
        if per_request and i < len(wi) and wi[i] != slot:
            out.append(f"request {i} ({name!r}) is routed to slot {wi[i]}, its adapter is in slot {slot}")
        want_r, want_s = (0, 0.0) if uid is None else (files[name].r, files[name].scaling)
        if slot < len(ranks) and (ranks[slot] != want_r or abs(scalings[slot] - want_s) > 1e-6):
            out.append(f"slot {slot} ({name!r}) has rank {ranks[slot]}, scaling {scalings[slot]:.4g}; its adapter "
                       f"has rank {want_r}, scaling {want_s:.4g}")
    base = pool.uid_to_buffer_id.get(None)
    if base is not None:
        a_only = not hasattr(pool, "_clear_buffer_slot_for_base")
        dirty = [k for k, t in _slot_tensors(pool, base, a_only) if t.count_nonzero()]
        if dirty:
            out.append(f"the base model's slot {base} holds non-zero LoRA weights in {dirty[:3]}")
    return out


def check_frontend(front, mgr, before: dict, max_loaded, keep: set) -> list[str]:
    """After a load, unload or step through the adapter-management API (frontend.py): what the registry names
    (``before``: name -> ``LoRARef`` registered before the op) and what the engine holds agree; every adapter
    that left the registry left the engine (``check_unloaded``); at most ``--max-loaded-loras`` are registered;
    the pinned adapters registered before that the user did not unload in the op (``keep``) are still
    registered; no request still holds an adapter."""
    out, now = [], front.registered()
    held = set(mgr.loras)
    pending = set(front.tok.pending_lora_unloads.values())
    for name, ref in now.items():
        if ref.lora_id not in held:
            out.append(f"{name!r} is registered (requests resolve it to {ref.lora_id}) but the engine does not hold it")
    reachable = {ref.lora_id for ref in now.values()} | pending
    for uid in sorted(held - reachable):
        out.append(f"the engine holds adapter {mgr.lora_refs[uid].lora_name!r} ({uid}) that no registered name "
                   f"reaches")
    for name, ref in before.items():
        if now.get(name) is None or now[name].lora_id != ref.lora_id:
            out += check_unloaded(mgr, ref.lora_id, name)
    if max_loaded is not None and len(now) > max_loaded:
        out.append(f"{len(now)} adapters are registered ({', '.join(now)}), above --max-loaded-loras {max_loaded}")
    for name in sorted(keep - set(now)):
        out.append(f"pinned adapter {name!r} is no longer registered, and the user did not unload it")
    busy = {uid: n for uid, n in front.in_flight().items() if n}
    if busy:
        out.append(f"requests that finished still hold adapters: {busy} (LoRARegistry counters)")
    return out
