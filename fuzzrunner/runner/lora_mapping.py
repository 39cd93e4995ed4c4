"""``LoRAMapping`` (user adapter ids, 0 = none) and its conversion to kernel slots (-1 = none)."""

from __future__ import annotations

from dataclasses import dataclass

NO_LORA_ID = 0


@dataclass(frozen=True)
class LoRAMapping:
    index_mapping: tuple  # adapter id per token
    prompt_mapping: tuple  # adapter id per sampled row (request)
    is_prefill: bool = False


def convert_mapping(ids, lora_index_to_id: list) -> list[int]:
    """vLLM's ``convert_mapping`` per token: id -> slot, ids <= 0 -> -1.

    An id that is not active raises ``ValueError``, as ``list.index`` does in vLLM.
    """
    return [lora_index_to_id.index(i) if i > 0 else -1 for i in ids]


def embedding_offsets(slots: list[int], vocab_size: int, max_loras: int) -> list[int]:
    """Row offsets into the stacked LoRA-A embedding table ``[(max_loras + 1) * V, R]``.

    Slot -1 points at the extra all-zero table after the real slots, as vLLM's
    ``embeddings_indices`` replaces -1 by the last slot.
    """
    return [(s if s >= 0 else max_loras) * vocab_size for s in slots]
