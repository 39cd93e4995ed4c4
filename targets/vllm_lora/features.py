"""What a vllm_lora case exercises, from its JSON alone (no vLLM import): coverage features."""

from __future__ import annotations

OPS = ("step", "dummy_run", "set_adapter", "capture", "replay")
FEATURE_SPACE = tuple(
    [f"op={o}" for o in OPS] + ["dummy=no_lora", "dummy=warmup"]
    + ["step=empty", "step=padded", "step=no-lora", "step=mixed", "step=no-lora-after-lora", "mapping=repeated",
       "capture=no-lora-key", "capture=lora-key", "replay=more-slots-than-key", "dummy=more-adapters-than-slots",
       "specialize_active_lora=on", "specialize_active_lora=off", "dtype=float16", "dtype=bfloat16"]
    + [f"entry={e}" for e in ("public", "private", "punica")] + [f"max_loras={n}" for n in (1, 2, 3, 4)]
    + ["layer=embedding", "layer=moe", "moe=mul_routed_weight", "moe=adapter-without-moe", "moe=one-shot",
       "moe=small-batch", "moe=sorted-path", "moe=no-lora-after-lora", "slot_ids=permuted"])


def _moe(c: dict, ops, out: set) -> None:
    """vLLM 0.33 takes the naive path while tokens * top_k * 8 <= experts * max_loras (else the sorted path,
    not driven), and then its small-batch kernel while pairs * rank <= 1024, else the one-shot kernel."""
    m = c["moe"]
    out.add("layer=moe")
    if m.get("mul_routed_weight"):
        out.add("moe=mul_routed_weight")
    if not all(m.get("enabled", [])):
        out.add("moe=adapter-without-moe")
    for op in ops:
        if op.get("op") in ("step", "dummy_run"):
            n, k = len(op.get("slots", [])) or op.get("num_tokens", 0), m.get("top_k", 1)
            if n * k * 8 > m.get("experts", 1) * c.get("max_loras", 1):
                out.add("moe=sorted-path")  # not driven: the layer is left out for that batch
            else:
                out.add("moe=one-shot" if n * k * m.get("rank", 8) > 1024 else "moe=small-batch")


def _batch(slots: list, pad: int, lora_seen: bool, out: set) -> bool:
    lora = [s for s in slots if s >= 0]
    if not slots:
        out.add("step=empty")
    if pad:
        out.add("step=padded")
    if slots and not lora:
        out.add("step=no-lora")
        if lora_seen:
            out.add("step=no-lora-after-lora")
    if lora and len(lora) < len(slots):
        out.add("step=mixed")
    return lora_seen or bool(lora)


def features(case) -> set:
    c = case.config
    out = {f"max_loras={c.get('max_loras')}", f"dtype={c.get('dtype')}", f"entry={c.get('entry')}",
           f"specialize_active_lora={'on' if c.get('specialize_active_lora') else 'off'}"}
    if c.get("embedding"):
        out.add("layer=embedding")
    if c.get("moe"):
        _moe(c, case.ops, out)
    ids = c.get("lora_index_to_id")
    if ids and list(ids) != list(range(1, len(ids) + 1)):
        out.add("slot_ids=permuted")
    lora_seen, last, key = False, None, None
    for op in case.ops:
        kind = op.get("op")
        out.add(f"op={kind}")
        if kind == "dummy_run":
            out.add(f"dummy={op.get('kind')}")
            if op.get("k", 0) > c.get("max_loras", 0):
                out.add("dummy=more-adapters-than-slots")
        elif kind == "capture":
            key = op.get("key", 0)
            out.add("capture=no-lora-key" if key == 0 else "capture=lora-key")
        elif kind in ("step", "replay"):
            slots = list(op.get("slots", []))
            if c.get("moe") and kind == "step" and slots and lora_seen and not any(s >= 0 for s in slots):
                out.add("moe=no-lora-after-lora")
            lora_seen = _batch(slots, op.get("pad", 0), lora_seen, out)
            if kind == "replay" and key is not None and len({s for s in slots if s >= 0}) > key:
                out.add("replay=more-slots-than-key")
            if slots == last:
                out.add("mapping=repeated")
            last = slots
    return out
