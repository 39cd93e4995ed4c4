"""The batch record SGLang's LoRA code reads (its ``ForwardBatch`` fields), made by the target.

SGLang's ``ForwardBatch`` is a 60-field dataclass built by the scheduler from a ``ScheduleBatch``;
the LoRA backends read a handful of its fields. This record holds those, filled as SGLang's
``ForwardBatch.init_new`` and ``CudaGraphRunner`` fill them for decode, extend and idle batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ForwardBatch:
    forward_mode: Any
    batch_size: int
    lora_ids: list = field(default_factory=list)
    extend_seq_lens: Any = None       # device int32 [bs] (extend)
    extend_seq_lens_cpu: list | None = None
    extend_num_tokens: int | None = None
    seq_lens: Any = None
    seq_lens_cpu: Any = None
    input_ids: Any = None
    spec_info: Any = None
    global_num_tokens_cpu: Any = None
    global_num_tokens_for_logprob_cpu: Any = None
    extend_prefix_lens_cpu: list | None = None
    extend_logprob_start_lens_cpu: list | None = None
    return_logprob: bool = False
    is_extend_in_batch: bool = False
    can_run_dp_cuda_graph: bool = False
    positions: Any = None

    def __getattr__(self, name: str):
        # a field SGLang's LoRA code reads that this record does not hold: say which, never invent it
        raise AttributeError(f"ForwardBatch.{name}: not filled by the target (targets/sglang_lora/batch.py)")
