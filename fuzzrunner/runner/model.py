"""A tiny LoRA model: embedding (with the LoRA embedding path), a 3-slice qkv layer, a
per-token (bgmv) gate layer, and logits with per-request LoRA.

Base weights come from the seed; LoRA weights live in slot-stacked, zero-initialized
buffers (as vLLM's ``lora_a_stacked``) written on activation and zeroed on eviction.
``body`` is the part a CUDA graph captures; ``compute_logits`` runs eagerly after it.
"""

from __future__ import annotations

import torch

from .. import tracking
from .adapters import AdapterWeights
from .config import RunnerConfig
from .punica import PunicaWrapper
from .uploads import upload


def base_weights(config: RunnerConfig) -> dict[str, torch.Tensor]:
    """float64 base weights, shared with the reference model."""
    g = torch.Generator().manual_seed(config.seed)
    H, V = config.hidden_size, config.vocab_size

    def w(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) / shape[-1] ** 0.5

    return {"embed": w(V, H), "qkv": w(2 * H, H), "gate": w(H, H), "lm_head": w(V, H)}


def activation(qkv: torch.Tensor, x: torch.Tensor, H: int) -> torch.Tensor:
    q, kv = qkv[:, :H], qkv[:, H:]
    return x + torch.nn.functional.silu(q) * torch.tanh(kv)


class TinyLoRAModel:
    def __init__(self, config: RunnerConfig, device: torch.device, punica: PunicaWrapper):
        self.config, self.device, self.punica = config, device, punica
        self.dtype = getattr(torch, config.dtype)
        H, V, L, R = config.hidden_size, config.vocab_size, config.max_loras, config.max_lora_rank
        self.base = {k: upload(v.to(self.dtype), device) for k, v in base_weights(config).items()}

        def zeros(name, *shape):
            return tracking.track(torch.zeros(*shape, dtype=self.dtype, device=device), name)

        def ints(name, values):
            return tracking.track(upload(torch.tensor(values, dtype=torch.int32), device), name)

        self.emb_a = zeros("lora.embed.a", (L + 1) * V, R)  # +1: the all-zero "no adapter" table
        self.emb_b = zeros("lora.embed.b", 1, L, H, R)
        self.qkv_a = zeros("lora.qkv.a", 3, L, R, H)
        self.qkv_b = zeros("lora.qkv.b", 3, L, H, R)
        self.gate_a = zeros("lora.gate.a", L, R, H)
        self.gate_b = zeros("lora.gate.b", L, H, R)
        self.lm_a = zeros("lora.lm_head.a", 1, L, R, H)
        self.lm_b = zeros("lora.lm_head.b", 1, L, V, R)
        n = config.qkv_slices
        self.qkv_n = ints("lora.qkv.slice_n", list(n))
        self.qkv_off = ints("lora.qkv.slice_offsets", [0, n[0], n[0] + n[1]])
        self.h_n, self.v_n, self.zero_off = ints("lora.H", [H]), ints("lora.V", [V]), ints("lora.off0", [0])

    def set_slot(self, slot: int, a: AdapterWeights) -> None:
        V, r = self.config.vocab_size, a.rank
        with torch.no_grad():
            self.reset_slot(slot)
            cast = lambda t: upload(t.to(self.dtype), self.device)  # noqa: E731
            self.emb_a[slot * V:(slot + 1) * V, :r] = cast(a.emb_a)
            self.emb_b[0, slot, :, :r] = cast(a.emb_b)
            for s, n in enumerate(self.config.qkv_slices):
                self.qkv_a[s, slot, :r] = cast(a.qkv_a[s])
                self.qkv_b[s, slot, :n, :r] = cast(a.qkv_b[s])
            self.gate_a[slot, :r] = cast(a.gate_a)
            self.gate_b[slot, :, :r] = cast(a.gate_b)
            self.lm_a[0, slot, :r] = cast(a.lm_a)
            self.lm_b[0, slot, :, :r] = cast(a.lm_b)

    def reset_slot(self, slot: int) -> None:
        V = self.config.vocab_size
        self.emb_a[slot * V:(slot + 1) * V].zero_()
        for t in (self.emb_b, self.qkv_a, self.qkv_b, self.lm_a, self.lm_b):
            t[:, slot].zero_()
        self.gate_a[slot].zero_()
        self.gate_b[slot].zero_()

    def body(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[M] token ids -> [M, H] hidden states (the CUDA-graph-captured part)."""
        p, H, scale = self.punica, self.config.hidden_size, self.config.lora_scaling
        x = self.base["embed"][input_ids]
        p.add_lora_embedding(x, input_ids, self.emb_a, self.emb_b, self.h_n, self.zero_off)
        qkv = x @ self.base["qkv"].T
        p.add_shrink_expand(p.token_meta, qkv, x, self.qkv_a, self.qkv_b, self.qkv_n, self.qkv_off, scale)
        h = activation(qkv, x, H)
        z = (h @ self.base["gate"].T).contiguous()
        p.add_lora_bgmv(z, h, self.gate_a, self.gate_b, scale)
        return h + torch.tanh(z)

    def compute_logits(self, hidden: torch.Tensor, logits_indices: torch.Tensor) -> torch.Tensor:
        """[num_reqs, V] logits of each request's last token, LoRA by the prompt mapping."""
        p = self.punica
        rows = hidden[logits_indices].contiguous()
        logits = (rows @ self.base["lm_head"].T).contiguous()
        p.add_shrink_expand(p.prompt_meta, logits, rows, self.lm_a, self.lm_b, self.v_n, self.zero_off,
                            self.config.lora_scaling)
        return logits
