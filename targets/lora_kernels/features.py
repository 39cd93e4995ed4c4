"""What a lora_kernels case exercises, from its JSON alone: coverage features."""

from __future__ import annotations

KERNELS = ("shrink", "expand", "bgmv")
FEATURE_SPACE = tuple(
    [f"kernel={k}" for k in KERNELS]
    + ["launch=empty", "launch=padded", "slots=no-lora", "slots=mixed", "slots=lora-only",
       "launch=smaller-after-larger", "mapping=repeated", "kernels=mixed"]
    + [f"max_loras={n}" for n in (1, 2, 3, 4)])


def _slots_kind(slots: list) -> str:
    lora = [s for s in slots if s >= 0]
    if not lora:
        return "slots=no-lora"
    return "slots=lora-only" if len(lora) == len(slots) else "slots=mixed"


def features(case) -> set:
    out = {f"max_loras={case.config.get('max_loras')}"}
    widest, last, kernels = 0, None, set()
    for op in case.ops:
        slots, pad = list(op.get("slots", [])), op.get("pad", 0)
        kernels.add(op.get("kernel"))
        out |= {f"kernel={op.get('kernel')}", _slots_kind(slots)}
        if not slots:
            out.add("launch=empty")
        if pad:
            out.add("launch=padded")
        if len(slots) + pad < widest:  # the persistent metadata holds a larger launch's leftovers
            out.add("launch=smaller-after-larger")
        if slots == last:
            out.add("mapping=repeated")
        widest, last = max(widest, len(slots) + pad), slots
    if len(kernels) > 1:
        out.add("kernels=mixed")
    return out
