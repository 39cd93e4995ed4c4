"""Metadata invariants, checked just before each LoRA launch (vLLM's kernel interface).

For the launch's M rows and grid width z (per-token kernels: each row's slot is -1 or in
[0, max_loras)): every active slot id is -1 or in
[0, max_loras); counts are non-negative and sum to at most M; start_loc is their
exclusive prefix sum; the sorted indices they cover are row numbers < M; and every
slot with tokens sits inside the grid (a graph captured narrower skips adapters).
Values are read quietly: the shadow oracle does not count these reads.
"""

from __future__ import annotations

import torch

from .. import tracking
from ..violation import Violation
from .base import Oracle, ViolationLog

_LORA_META = {"M", "grid_z", "max_loras", "token_lora_mapping"}
# kernels that read the slot of each row from token_lora_mapping (vLLM's fused_moe_lora with naive block assignment)
PER_TOKEN = ("lora_bgmv", "fused_moe_lora")


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def check_launch(kernel: str, meta: dict) -> list[tuple[str, str]]:
    """(tensor, message) for each broken invariant of one launch."""
    M, z, L = meta["M"], meta["grid_z"], meta["max_loras"]
    out = []
    if kernel in PER_TOKEN:
        slots = meta["token_lora_mapping"][:M].cpu()
        bad = (slots != -1) & ((slots < 0) | (slots >= L))
        if bad.any():
            out.append(("token_lora_mapping", f"slot {int(slots[bad][0])} of token {int(bad.nonzero()[0])} "
                                              f"is neither -1 nor in [0, {L})"))
        return out
    ids = meta["active_lora_ids"].cpu()
    counts = meta["num_tokens_per_lora"].cpu().long()
    start = meta["lora_token_start_loc"].cpu().long()
    for i in range(min(z, ids.numel())):
        s = int(ids[i])
        if s != -1 and not 0 <= s < L:
            out.append(("active_lora_ids", f"active_lora_ids[{i}] = {s} is neither -1 nor in [0, {L})"))
    if (counts < 0).any():
        out.append(("num_tokens_per_lora", f"negative count {int(counts[counts < 0][0])}"))
        return out
    total = int(counts.sum())
    if total > M:
        out.append(("num_tokens_per_lora", f"counts sum to {total} but the launch has M={M} rows"))
    k = int((counts > 0).sum())  # prepare() writes start_loc[1:1+k] only; the rest stays 0
    if not torch.equal(start[1:1 + k], torch.cumsum(counts[:k], 0)) or int(start[0]) != 0:
        out.append(("lora_token_start_loc", f"{start[:k + 1].tolist()} is not the prefix sum of the active "
                                            f"counts {counts[:k].tolist()}"))
    if 0 < total <= meta["token_indices_sorted_by_lora_ids"].numel():
        rows = meta["token_indices_sorted_by_lora_ids"][:total].cpu()
        if ((rows < 0) | (rows >= M)).any():
            out.append(("token_indices_sorted_by_lora_ids", f"row {int(rows[(rows < 0) | (rows >= M)][0])} "
                                                            f"is outside [0, M={M})"))
    skipped = [(i, int(ids[i]), int(counts[i])) for i in range(z, ids.numel()) if int(ids[i]) != -1 and counts[i] > 0]
    if skipped:
        i, s, n = skipped[0]
        out.append(("active_lora_ids", f"grid z={z} is too narrow: active_lora_ids[{i}] (slot {s}, {n} tokens) "
                                       f"is never launched"))
    return out


class InvariantOracle(Oracle, tracking.Watcher):
    name = "invariants"

    def __init__(self):
        self.log = ViolationLog()
        self._watch = None
        self.op_index, self.op_name = -1, ""

    def start(self) -> None:
        self._watch = tracking.watch(self)
        self._watch.__enter__()

    def begin_op(self, index: int, op: dict) -> None:
        self.op_index, self.op_name = index, op.get("op", "")

    def finish(self) -> list[Violation]:
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self._watch = None
        return self.log.violations()

    # tracking.Watcher
    def on_kernel_launch(self, kernel: str, meta: dict) -> None:
        if not _LORA_META.issubset(meta):
            return  # not a LoRA launch: nothing to check
        if _capturing():
            return  # no host reads inside CUDA-graph capture; replays are checked numerically
        with tracking.quiet():
            broken = check_launch(kernel, meta)
        for tensor, msg in broken:
            name = f"{meta.get('meta_name', '')}.{tensor}".lstrip(".")
            self.log.add(Violation("invariants", "invariant-violation", kernel, meta.get("meta_name", ""), name,
                                   f"before {kernel} in op {self.op_index} ({self.op_name}): {msg}",
                                   {"op_index": self.op_index, "op": self.op_name, "M": meta["M"],
                                    "grid_z": meta["grid_z"]}))
