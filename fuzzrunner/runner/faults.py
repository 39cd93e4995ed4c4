"""Named switches that put back known real bugs; every oracle is shown to catch them.

All are off by default. Each description names the bug it mirrors.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..errors import InvalidArgument, did_you_mean


def _fault(description: str):
    return field(default=False, metadata={"description": " ".join(description.split())})


@dataclass(frozen=True)
class Faults:
    dummy_run_skips_mapping: bool = _fault(
        """The dummy path launches the LoRA kernels without programming any mapping: vLLM's V2
        model runner before PR #43139 (`# FIXME(woosuk): Fix warmup for LoRA.`). The kernels read
        `torch.empty` metadata; garbage slots index the weights out of bounds.""")
    padding_not_mapped: bool = _fault(
        """The mapping and metadata cover `num_tokens` only, while the LoRA ops run over
        `num_tokens_after_padding` (CUDA-graph padding): the padded tokens' slots and embedding
        indices are whatever an earlier step, or nobody, wrote.""")
    stale_after_all_no_lora: bool = _fault(
        """After an all-no-adapter step, `prepare()` returns before copying the mapping and a consumer
        that ignores the no-LoRA flag reads the previous step's mapping: vLLM's fused-MoE LoRA path
        (`add_lora_fused_moe`) before `test_add_lora_fused_moe_early_exit`.""")
    graph_freezes_active_loras: bool = _fault(
        """Capture freezes the active-LoRA grid width at 1, as #43139 forced `num_active_loras_cpu[0] = 1`;
        a replay with more distinct slots silently skips some adapters: wrong output, no crash.""")
    mapping_cache_ignores_slot_changes: bool = _fault(
        """The same-mapping shortcut of `set_mapping` compares only the adapter ids per token, not
        whether slots were reassigned since (vLLM keeps `_last_mapping` across slot changes): an
        adapter removed and re-added between two identical mappings lands in another slot, and the
        kernels read the old one. A deep state: add two adapters, map both, map one, remove the
        other, re-add the one, map it again.""")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def describe(cls) -> dict[str, str]:
        return {f.name: f.metadata["description"] for f in fields(cls)}

    @classmethod
    def from_names(cls, names) -> Faults:
        names = list(names or [])
        for n in names:
            if n not in cls.names():
                hint = did_you_mean(n, cls.names())
                raise InvalidArgument(f"unknown fault {n!r}.{hint} Known faults: {', '.join(cls.names())}.")
        return cls(**{n: True for n in names})

    def enabled(self) -> list[str]:
        return [n for n in self.names() if getattr(self, n)]
