"""Persistent LoRA kernel metadata, as vLLM's ``LoRAKernelMeta`` (lora_kernel_metadata.py).

Worked example, max_loras=2, slots per token [1, -1, 1, 0]:
  token_lora_mapping               [1, -1, 1, 0]
  token_indices_sorted_by_lora_ids [1, 3, 0, 2]   (stable sort by slot)
  active_lora_ids                  [-1, 0, 1]     (-1 sorts first)
  num_tokens_per_lora              [1, 1, 2]
  lora_token_start_loc             [0, 1, 2, 4]
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch

from .. import tracking


def captured_lora_counts(max_loras: int, specialize: bool) -> list[int]:
    """vLLM's ``get_captured_lora_counts``: the grid widths a graph may be captured with."""
    if not specialize:
        return [max_loras + 1]
    counts = [1 << i for i in range(max_loras.bit_length()) if (1 << i) <= max_loras]
    return sorted(set(counts + [max_loras + 1]))


@dataclass
class LoRAKernelMeta:
    name: str
    max_loras: int
    max_num_tokens: int
    token_lora_mapping: torch.Tensor
    token_indices_sorted_by_lora_ids: torch.Tensor
    active_lora_ids: torch.Tensor
    num_tokens_per_lora: torch.Tensor
    lora_token_start_loc: torch.Tensor
    no_lora_flag_cpu: torch.Tensor
    num_active_loras_cpu: torch.Tensor
    default_num_active_loras_cpu: torch.Tensor
    captured_lora_counts: list[int]

    @classmethod
    def make(cls, name: str, max_loras: int, max_num_tokens: int, device: torch.device,
             specialize: bool = False) -> LoRAKernelMeta:
        def empty(n: int, field: str) -> torch.Tensor:
            t = torch.empty(n, dtype=torch.int32, device=device)
            return tracking.track(t, f"{name}.{field}", per_step=True, initialized=False)

        def zeros(n: int, field: str) -> torch.Tensor:
            t = torch.zeros(n, dtype=torch.int32, device=device)
            return tracking.track(t, f"{name}.{field}", per_step=True)

        return cls(
            name, max_loras, max_num_tokens,
            token_lora_mapping=empty(max_num_tokens, "token_lora_mapping"),
            token_indices_sorted_by_lora_ids=empty(max_num_tokens, "token_indices_sorted_by_lora_ids"),
            active_lora_ids=empty(max_loras + 1, "active_lora_ids"),
            num_tokens_per_lora=zeros(max_loras + 1, "num_tokens_per_lora"),
            lora_token_start_loc=zeros(max_loras + 2, "lora_token_start_loc"),
            no_lora_flag_cpu=torch.tensor([False]),
            num_active_loras_cpu=torch.tensor([0], dtype=torch.int32),
            default_num_active_loras_cpu=torch.tensor([max_loras + 1], dtype=torch.int32),
            captured_lora_counts=captured_lora_counts(max_loras, specialize),
        )

    def _reset(self) -> None:
        self.active_lora_ids.fill_(-1)
        self.num_tokens_per_lora.zero_()
        self.lora_token_start_loc.zero_()
        self.no_lora_flag_cpu[0] = False
        self.num_active_loras_cpu[0] = 0

    def prepare(self, slots: torch.Tensor, *, copy_before_early_return: bool = True) -> None:
        """Program the metadata for ``slots`` (one int32 slot per token, -1 = none).

        vLLM returns early on an all-(-1) mapping *before* copying it, leaving
        ``token_lora_mapping`` as the previous step wrote it; a consumer that ignores
        ``no_lora_flag_cpu`` then reads a stale mapping. We copy first by default;
        ``copy_before_early_return=False`` is vLLM's order (fault ``stale_after_all_no_lora``).
        """
        n = slots.numel()
        assert n <= self.max_num_tokens, (n, self.max_num_tokens)
        self._reset()
        no_lora = bool(torch.all(slots == -1))
        self.no_lora_flag_cpu[0] = no_lora
        if copy_before_early_return:
            self.token_lora_mapping[:n].copy_(slots)
        if no_lora:
            return
        if not copy_before_early_return:
            self.token_lora_mapping[:n].copy_(slots)
        order = torch.sort(slots, stable=True).indices
        self.token_indices_sorted_by_lora_ids[:n].copy_(order)
        ids, counts = torch.unique(slots, sorted=True, return_counts=True)
        k = ids.numel()
        self.active_lora_ids[:k].copy_(ids)
        self.num_tokens_per_lora[:k].copy_(counts)
        self.lora_token_start_loc[1:1 + k].copy_(torch.cumsum(counts, dim=0))
        i = bisect.bisect_left(self.captured_lora_counts, k)
        self.num_active_loras_cpu[0] = self.captured_lora_counts[min(i, len(self.captured_lora_counts) - 1)]

    def carry_over(self) -> None:
        """The mapping equals the last one: declare the old contents current."""
        tracking.carry_over(self.token_lora_mapping, self.token_indices_sorted_by_lora_ids,
                            self.active_lora_ids, self.num_tokens_per_lora, self.lora_token_start_loc)

    def meta_args(self, token_nums: int) -> tuple:
        """The five device tensors and the no-LoRA flag, in the kernels' argument order."""
        return (self.token_lora_mapping[:token_nums], self.token_indices_sorted_by_lora_ids[:token_nums],
                self.num_tokens_per_lora, self.lora_token_start_loc, self.active_lora_ids,
                self.no_lora_flag_cpu)

    def grid_width(self, specialize: bool) -> int:
        return int((self.num_active_loras_cpu if specialize else self.default_num_active_loras_cpu).item())
