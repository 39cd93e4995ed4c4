"""What a vllm_lora case exercises, from its JSON alone (no vLLM import): coverage features."""

from __future__ import annotations

OPS = ("step", "dummy_run", "set_adapter", "capture", "replay")
FEATURE_SPACE = tuple(
    [f"op={o}" for o in OPS] + ["dummy=no_lora", "dummy=warmup"]
    + ["step=empty", "step=padded", "step=no-lora", "step=mixed", "step=no-lora-after-lora", "mapping=repeated",
       "capture=no-lora-key", "capture=lora-key", "replay=more-slots-than-key", "dummy=more-adapters-than-slots",
       "specialize_active_lora=on", "specialize_active_lora=off", "dtype=float16", "dtype=bfloat16"]
    + [f"entry={e}" for e in ("public", "private", "punica")] + [f"max_loras={n}" for n in (1, 2, 3, 4)])


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
            lora_seen = _batch(slots, op.get("pad", 0), lora_seen, out)
            if kind == "replay" and key is not None and len({s for s in slots if s >= 0}) > key:
                out.add("replay=more-slots-than-key")
            if slots == last:
                out.add("mapping=repeated")
            last = slots
    return out
