"""The punica wrapper: per-step LoRA metadata and the launches of the LoRA ops.

It owns the token and prompt ``LoRAKernelMeta``s and the per-token embedding-offset
buffer (vLLM's ``_embeddings_indices``, ``torch.empty``), and makes each launch's
host-side decisions: whether to launch (``no_lora_flag_cpu``) and the grid width.
A CUDA graph freezes those decisions at capture; ``HostDecisions`` lets the CPU
emulation of graphs (graphs.py) record and replay them the same way.
"""

from __future__ import annotations

import torch

from .. import tracking
from ..kernels import KernelConfig, lora_bgmv, lora_expand, lora_shrink
from .config import RunnerConfig
from .kernel_meta import LoRAKernelMeta


class HostDecisions:
    """Live decisions, optionally recorded; or a recorded list replayed in order."""

    def __init__(self):
        self.recording: list | None = None
        self.frozen: list | None = None
        self._pos = 0

    def decide(self, live: tuple) -> tuple:
        if self.frozen is not None:
            out = self.frozen[self._pos]
            self._pos += 1
            return out
        if self.recording is not None:
            self.recording.append(live)
        return live

    def record(self) -> None:
        self.recording, self.frozen = [], None

    def stop_recording(self) -> list:
        rec, self.recording = self.recording, None
        return rec  # type: ignore[return-value]

    def replay(self, frozen: list | None) -> None:
        self.frozen, self._pos = frozen, 0


class PunicaWrapper:
    def __init__(self, config: RunnerConfig, device: torch.device, kernel_config: KernelConfig,
                 *, respect_no_lora_flag_in_bgmv: bool = True):
        self.config = config
        self.kernel_config = kernel_config
        self.specialize = config.specialize_active_lora
        self.token_meta = LoRAKernelMeta.make("token_meta", config.max_loras, config.max_num_tokens,
                                              device, config.specialize_active_lora)
        self.prompt_meta = LoRAKernelMeta.make("prompt_meta", config.max_loras, config.max_num_reqs,
                                               device, config.specialize_active_lora)
        self.embeddings_indices = tracking.track(
            torch.empty(config.max_num_tokens, dtype=torch.int64, device=device),
            "embeddings_indices", per_step=True, initialized=False)
        self.respect_no_lora_flag_in_bgmv = respect_no_lora_flag_in_bgmv
        self.decisions = HostDecisions()
        self.forced_grid: int | None = None  # set while capturing, as the dummy-run fix forces it

    # -- host decisions ---------------------------------------------------------------
    def _launch_decision(self, meta: LoRAKernelMeta) -> tuple[bool, int]:
        grid = self.forced_grid if self.forced_grid is not None else meta.grid_width(self.specialize)
        return self.decisions.decide((bool(meta.no_lora_flag_cpu.item()), grid))

    def _announce(self, kernel: str, meta: LoRAKernelMeta, M: int, grid: int) -> None:
        if tracking.watching():
            tracking.kernel_launch(kernel, meta_name=meta.name, M=M, grid_z=grid,
                                 max_loras=self.config.max_loras,
                                 token_lora_mapping=meta.token_lora_mapping,
                                 token_indices_sorted_by_lora_ids=meta.token_indices_sorted_by_lora_ids,
                                 num_tokens_per_lora=meta.num_tokens_per_lora,
                                 lora_token_start_loc=meta.lora_token_start_loc,
                                 active_lora_ids=meta.active_lora_ids)

    # -- ops ----------------------------------------------------------------------------
    def add_shrink_expand(self, meta: LoRAKernelMeta, y: torch.Tensor, x: torch.Tensor,
                          lora_a: torch.Tensor, lora_b: torch.Tensor, slice_n: torch.Tensor,
                          slice_offsets: torch.Tensor, scale: float) -> None:
        """y[:, slices] += (scale * x @ A^T) @ B^T per token slot (vLLM's add_lora_linear)."""
        M = x.size(0)
        no_lora, grid = self._launch_decision(meta)
        flag = torch.tensor([no_lora])
        S, R = lora_a.size(0), lora_a.size(2)
        if not no_lora:
            self._announce("lora_shrink", meta, M, grid)
        buffer = torch.empty((S, M, R), dtype=torch.float32, device=x.device)
        lora_shrink(x, lora_a, buffer, *meta.meta_args(M)[:5], flag, grid, scale, self.kernel_config)  # type: ignore[call-arg]
        if not no_lora:
            self._announce("lora_expand", meta, M, grid)
        lora_expand(buffer, lora_b, y, *meta.meta_args(M)[:5], flag, grid, slice_n, slice_offsets,  # type: ignore[call-arg,misc]
                    self.kernel_config, add_inputs=True)

    def add_lora_embedding(self, y: torch.Tensor, input_ids: torch.Tensor, lora_a_2d: torch.Tensor,
                           lora_b: torch.Tensor, slice_n: torch.Tensor, slice_offsets: torch.Tensor) -> None:
        """vLLM's VocabParallelEmbeddingWithLoRA: F.embedding through the raw offset buffer."""
        M = input_ids.size(0)
        offsets = self.embeddings_indices[:M]
        a = torch.nn.functional.embedding(input_ids + offsets, lora_a_2d)  # [M, R]
        no_lora, grid = self._launch_decision(self.token_meta)
        if not no_lora:
            self._announce("lora_expand", self.token_meta, M, grid)
        lora_expand(a.unsqueeze(0).contiguous(), lora_b, y, *self.token_meta.meta_args(M)[:5],  # type: ignore[call-arg]
                    torch.tensor([no_lora]), grid, slice_n, slice_offsets, self.kernel_config)

    def add_lora_bgmv(self, y: torch.Tensor, x: torch.Tensor, lora_a: torch.Tensor,
                      lora_b: torch.Tensor, scale: float) -> None:
        M = x.size(0)
        no_lora, grid = self._launch_decision(self.token_meta)
        if no_lora and self.respect_no_lora_flag_in_bgmv:
            return
        self._announce("lora_bgmv", self.token_meta, M, grid)
        lora_bgmv(x, lora_a, lora_b, y, self.token_meta.token_lora_mapping[:M], scale, self.kernel_config)
