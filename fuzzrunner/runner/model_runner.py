"""The reference model runner: persistent buffers, padding, mapping, dummy runs, graphs.

Faithful to vLLM's V2 runner where its LoRA bugs live (docs/background.md):
persistent ``torch.empty`` metadata sized at the maximum, padding to capture sizes,
the ``_last_mapping`` shortcut, dummy runs that program an all-zero mapping and force
the kernels to launch (PR #43139), and host decisions frozen by graph capture.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import _env, tracking
from ..errors import InvalidCase
from ..kernels import KernelConfig
from .adapters import AdapterManager
from .config import RunnerConfig
from .faults import Faults
from .graphs import GraphPool
from .lora_mapping import LoRAMapping, convert_mapping, embedding_offsets
from .model import TinyLoRAModel
from .punica import PunicaWrapper
from .uploads import upload, write

DUMMY_KINDS = ("warmup", "capture", "dp_idle", "profile")


@dataclass(frozen=True)
class Request:
    adapter_id: int
    token_ids: tuple


@dataclass
class StepOutput:
    hidden: torch.Tensor       # [num_tokens, H] (padding rows dropped)
    logits: torch.Tensor       # [num_reqs, V]
    input_ids: list
    token_adapters: list       # intended adapter id per token
    logits_rows: list
    row_adapters: list
    num_tokens_after_padding: int
    graph_size: int | None = None


class ModelRunner:
    def __init__(self, config: RunnerConfig, *, device: str | torch.device | None = None,
                 faults: Faults | None = None, kernel_config: KernelConfig | None = None):
        faults = faults if faults is not None else Faults()
        self.config, self.faults = config, faults
        self.device = torch.device(device or _env.device_type())
        kernel_config = kernel_config or KernelConfig(interpreted=_env.interpreted())
        self.input_ids = tracking.track(
            torch.zeros(config.max_num_tokens, dtype=torch.long, device=self.device), "input_ids")
        self.punica = PunicaWrapper(config, self.device, kernel_config,
                                    respect_no_lora_flag_in_bgmv=not faults.stale_after_all_no_lora)
        self.model = TinyLoRAModel(config, self.device, self.punica)
        self.adapters = AdapterManager(config, self.model.set_slot, self.model.reset_slot)
        self.graphs = GraphPool(self.device, self.punica.decisions)
        self._last_mapping: LoRAMapping | None = None
        self._last_slots_version = -1

    # -- adapters -------------------------------------------------------------------------
    def add_adapter(self, adapter_id: int, rank: int) -> None:
        self.adapters.add(adapter_id, rank)

    def remove_adapter(self, adapter_id: int) -> None:
        self.adapters.remove(adapter_id)

    # -- mapping --------------------------------------------------------------------------
    def set_mapping(self, token_ids: list[int], prompt_ids: list[int]) -> None:
        """Activate the adapters and program the metadata; skipped if nothing changed."""
        self.adapters.activate(list(token_ids) + list(prompt_ids))
        mapping = LoRAMapping(tuple(token_ids), tuple(prompt_ids), is_prefill=True)
        p = self.punica
        same_slots = self.adapters.slots_changed == self._last_slots_version \
            or self.faults.mapping_cache_ignores_slot_changes
        if mapping == self._last_mapping and same_slots:
            p.token_meta.carry_over()
            p.prompt_meta.carry_over()
            tracking.carry_over(p.embeddings_indices)
            return
        table = self.adapters.lora_index_to_id
        slots = convert_mapping(token_ids, table)
        n = len(slots)
        offsets = embedding_offsets(slots, self.config.vocab_size, self.config.max_loras)
        write(p.embeddings_indices[:n], torch.tensor(offsets, dtype=torch.int64))
        early_copy = not self.faults.stale_after_all_no_lora
        p.token_meta.prepare(upload(torch.tensor(slots, dtype=torch.int32), self.device),
                             copy_before_early_return=early_copy)
        p.prompt_meta.prepare(upload(torch.tensor(convert_mapping(prompt_ids, table), dtype=torch.int32),
                                     self.device), copy_before_early_return=early_copy)
        self._last_mapping, self._last_slots_version = mapping, self.adapters.slots_changed

    def _set_dummy_mapping(self, num_tokens: int, num_reqs: int) -> None:
        """PR #43139: an all-zero mapping, then force the kernels to launch and exit early."""
        if self.faults.dummy_run_skips_mapping:
            return
        self.set_mapping([0] * num_tokens, [0] * num_reqs)
        for meta in (self.punica.token_meta, self.punica.prompt_meta):
            meta.no_lora_flag_cpu[0] = False
            meta.num_active_loras_cpu[0] = 1

    # -- steps ----------------------------------------------------------------------------
    def _layout(self, requests: list[Request]):
        if not requests:
            raise InvalidCase("a step needs at least one request.")
        if len(requests) > self.config.max_num_reqs:
            raise InvalidCase(f"{len(requests)} requests exceed max_num_reqs={self.config.max_num_reqs}.")
        ids = [t for r in requests for t in r.token_ids]
        if any(len(r.token_ids) == 0 for r in requests):
            raise InvalidCase("every request needs at least one token.")
        if len(ids) > self.config.max_num_tokens:
            raise InvalidCase(f"{len(ids)} tokens exceed max_num_tokens={self.config.max_num_tokens}.")
        if any(not 0 <= t < self.config.vocab_size for t in ids):
            raise InvalidCase(f"token ids must be in [0, {self.config.vocab_size}).")
        token_adapters = [r.adapter_id for r in requests for _ in r.token_ids]
        rows, end = [], 0
        for r in requests:
            end += len(r.token_ids)
            rows.append(end - 1)
        return ids, token_adapters, rows, [r.adapter_id for r in requests]

    def _program_inputs(self, requests: list[Request], padded: int):
        ids, token_adapters, rows, row_adapters = self._layout(requests)
        n = len(ids)
        write(self.input_ids[:n], torch.tensor(ids, dtype=torch.long))
        mapped = n if self.faults.padding_not_mapped else padded
        self.set_mapping(token_adapters + [0] * (mapped - n), row_adapters)
        return ids, token_adapters, rows, row_adapters

    def _finish(self, hidden, ids, token_adapters, rows, row_adapters, padded, graph_size=None):
        idx = upload(torch.tensor(rows, dtype=torch.long), self.device)
        logits = self.model.compute_logits(hidden, idx)
        return StepOutput(hidden[:len(ids)], logits, ids, token_adapters, rows, row_adapters,
                          padded, graph_size)

    def execute_model(self, requests: list[Request]) -> StepOutput:
        """A real step, eager, padded to the smallest capture size >= num_tokens."""
        num_tokens = sum(len(r.token_ids) for r in requests)
        padded = min(self.config.padded_size(num_tokens), self.config.max_num_tokens)
        layout = self._program_inputs(requests, padded)
        hidden = self.model.body(self.input_ids[:padded])
        return self._finish(hidden, *layout, padded)  # type: ignore[call-arg]

    def dummy_run(self, num_tokens: int, kind: str = "warmup") -> StepOutput:
        """A step with no scheduler output (profile, warm-up, capture warm-up, DP idle)."""
        if kind not in DUMMY_KINDS:
            raise InvalidCase(f"dummy_run kind {kind!r} must be one of {', '.join(DUMMY_KINDS)}.")
        if kind == "profile":
            num_tokens = self.config.max_num_tokens
        if not 1 <= num_tokens <= self.config.max_num_tokens:
            raise InvalidCase(f"dummy_run num_tokens={num_tokens} must be in 1..{self.config.max_num_tokens}.")
        padded = num_tokens if kind == "profile" else self.config.padded_size(num_tokens)
        num_reqs = min(num_tokens, self.config.max_num_reqs)
        # vLLM's InputBatch.make_dummy: zero input ids, tokens split evenly, rest to the last.
        per = [num_tokens // num_reqs] * num_reqs
        per[-1] += num_tokens - sum(per)
        requests = [Request(0, (0,) * k) for k in per]
        ids, token_adapters, rows, row_adapters = self._layout(requests)
        self.input_ids[:padded].zero_()
        self._set_dummy_mapping(padded, num_reqs)
        hidden = self.model.body(self.input_ids[:padded])
        return self._finish(hidden, ids, token_adapters, rows, row_adapters, padded)

    def capture(self, size: int) -> None:
        """Capture the body at ``size`` tokens, with LoRA kernels in the graph at full width."""
        if size not in self.config.capture_sizes:
            raise InvalidCase(f"capture size {size} is not one of capture_sizes={list(self.config.capture_sizes)}.")
        self.input_ids[:size].zero_()
        self._set_dummy_mapping(size, min(size, self.config.max_num_reqs))
        p = self.punica
        p.token_meta.no_lora_flag_cpu[0] = False  # the graph must contain the LoRA kernels
        p.forced_grid = 1 if self.faults.graph_freezes_active_loras else self.config.max_loras + 1
        try:
            self.graphs.capture(size, lambda: self.model.body(self.input_ids[:size]))
        finally:
            p.forced_grid = None

    def replay(self, requests: list[Request]) -> StepOutput:
        """Run a real step through the smallest captured graph that fits, else eagerly."""
        num_tokens = sum(len(r.token_ids) for r in requests)
        graph = self.graphs.find(num_tokens)
        if graph is None:
            return self.execute_model(requests)
        layout = self._program_inputs(requests, graph.size)
        hidden = self.graphs.replay(graph, lambda: self.model.body(self.input_ids[:graph.size]))
        return self._finish(hidden, *layout, graph.size, graph_size=graph.size)  # type: ignore[call-arg,misc]
