"""Adapters: deterministic weights per id, and the slot manager (add, remove, LRU eviction).

Weights come from a seed, so the float64 reference model can rebuild them from the
adapter id alone, independent of which slot the manager put them in.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from ..errors import InvalidCase
from .config import RunnerConfig


@dataclass(frozen=True)
class AdapterWeights:
    """float64 weights of one adapter at its own rank; shapes per layer below."""
    adapter_id: int
    rank: int
    emb_a: torch.Tensor      # [V, r]
    emb_b: torch.Tensor      # [H, r]
    qkv_a: list              # 3 x [r, H]
    qkv_b: list              # 3 x [N_s, r]
    gate_a: torch.Tensor     # [r, H]
    gate_b: torch.Tensor     # [H, r]
    lm_a: torch.Tensor       # [r, H]
    lm_b: torch.Tensor       # [V, r]


def make_adapter(config: RunnerConfig, adapter_id: int, rank: int) -> AdapterWeights:
    g = torch.Generator().manual_seed(config.seed * 1_000_003 + adapter_id * 7919 + 17)
    H, V = config.hidden_size, config.vocab_size

    def w(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) / max(shape[-1], 1) ** 0.5

    return AdapterWeights(
        adapter_id, rank,
        emb_a=w(V, rank), emb_b=w(H, rank),
        qkv_a=[w(rank, H) for _ in config.qkv_slices],
        qkv_b=[w(n, rank) for n in config.qkv_slices],
        gate_a=w(rank, H), gate_b=w(H, rank), lm_a=w(rank, H), lm_b=w(V, rank))


class AdapterManager:
    """Registered adapters, ``max_loras`` slots, LRU eviction, and the slot table.

    ``lora_index_to_id[slot]`` is the adapter id in that slot or None. ``slots_changed``
    counts slot-table changes so the runner can tell when a cached mapping's slots
    went stale (vLLM keeps ``_last_mapping`` across slot changes: see docs/background.md, vLLM 2.5).
    """

    def __init__(self, config: RunnerConfig, on_activate, on_deactivate):
        self.config = config
        self.registered: dict[int, AdapterWeights] = {}
        self.lora_index_to_id: list = [None] * config.max_loras
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._on_activate, self._on_deactivate = on_activate, on_deactivate
        self.slots_changed = 0

    def add(self, adapter_id: int, rank: int) -> None:
        if adapter_id <= 0:
            raise InvalidCase(f"adapter id {adapter_id} must be positive (0 means no adapter).")
        if not 1 <= rank <= self.config.max_lora_rank:
            raise InvalidCase(f"adapter {adapter_id} rank {rank} must be in "
                              f"1..max_lora_rank={self.config.max_lora_rank}.")
        if adapter_id in self.registered:
            self.remove(adapter_id)
        self.registered[adapter_id] = make_adapter(self.config, adapter_id, rank)

    def remove(self, adapter_id: int) -> None:
        if adapter_id not in self.registered:
            raise InvalidCase(f"remove_adapter {adapter_id}: no such adapter is registered.")
        if adapter_id in self.lora_index_to_id:
            self._deactivate(self.lora_index_to_id.index(adapter_id))
        del self.registered[adapter_id]

    def activate(self, ids) -> None:
        """Give every id in ``ids`` a slot, evicting least-recently-used ones not in ``ids``."""
        needed = [i for i in dict.fromkeys(ids) if i > 0]
        if len(needed) > self.config.max_loras:
            raise InvalidCase(f"a batch uses {len(needed)} adapters but max_loras={self.config.max_loras}.")
        for i in needed:
            if i not in self.registered:
                raise InvalidCase(f"adapter {i} is used by a request but was never added.")
            if i not in self.lora_index_to_id:
                self._activate(i, needed)
            self._lru.move_to_end(i)

    def _activate(self, adapter_id: int, keep) -> None:
        if None not in self.lora_index_to_id:
            victim = next(i for i in self._lru if i not in keep)
            self._deactivate(self.lora_index_to_id.index(victim))
        slot = self.lora_index_to_id.index(None)
        self.lora_index_to_id[slot] = adapter_id
        self._lru[adapter_id] = None
        self.slots_changed += 1
        self._on_activate(slot, self.registered[adapter_id])

    def _deactivate(self, slot: int) -> None:
        adapter_id = self.lora_index_to_id[slot]
        self.lora_index_to_id[slot] = None
        self._lru.pop(adapter_id, None)
        self.slots_changed += 1
        self._on_deactivate(slot)
