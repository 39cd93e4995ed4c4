"""The float64 pure-torch model: each token gets its *intended* adapter, no slots, no metadata."""

from __future__ import annotations

import torch

from .adapters import AdapterWeights
from .config import RunnerConfig
from .model import activation, base_weights


class ReferenceModel:
    def __init__(self, config: RunnerConfig):
        self.config = config
        self.w = base_weights(config)

    def forward(self, input_ids: list[int], token_adapters: list, logits_rows: list[int],
                row_adapters: list) -> tuple[torch.Tensor, torch.Tensor]:
        """``token_adapters[i]``/``row_adapters[j]``: AdapterWeights or None. Returns (hidden, logits)."""
        H, s = self.config.hidden_size, self.config.lora_scaling
        ids = torch.tensor(input_ids, dtype=torch.long)
        x = self.w["embed"][ids].clone()
        for m, a in enumerate(token_adapters):
            if a is not None:
                x[m] = x[m] + a.emb_b @ a.emb_a[input_ids[m]]
        qkv = x @ self.w["qkv"].T
        for m, a in enumerate(token_adapters):
            if a is not None:
                qkv[m] += torch.cat([b @ (s * (aa @ x[m])) for aa, b in zip(a.qkv_a, a.qkv_b)])
        h = activation(qkv, x, H)
        z = h @ self.w["gate"].T
        for m, a in enumerate(token_adapters):
            if a is not None:
                z[m] += a.gate_b @ (s * (a.gate_a @ h[m]))
        hidden = h + torch.tanh(z)
        rows = hidden[torch.tensor(logits_rows, dtype=torch.long)]
        logits = rows @ self.w["lm_head"].T
        for j, a in enumerate(row_adapters):
            if a is not None:
                logits[j] += a.lm_b @ (s * (a.lm_a @ rows[j]))
        return hidden, logits


def adapter_of(registered: dict[int, AdapterWeights], adapter_id: int) -> AdapterWeights | None:
    return registered[adapter_id] if adapter_id > 0 else None
