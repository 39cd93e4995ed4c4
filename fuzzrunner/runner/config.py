"""The reference runner's configuration: immutable, validated field by field, JSON-plain."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ..errors import InvalidArgument

DTYPES = ("float32", "float16", "bfloat16")


def _validate_positive(name, value, hi=None):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgument(f"{name}={value!r} must be a positive integer.")
    if hi is not None and value > hi:
        raise InvalidArgument(f"{name}={value!r} must be at most {hi}.")


@dataclass(frozen=True)
class RunnerConfig:
    max_loras: int = 2
    max_lora_rank: int = 8
    max_num_tokens: int = 32
    max_num_reqs: int = 8
    capture_sizes: tuple = (1, 2, 4, 8)
    vocab_size: int = 64
    hidden_size: int = 32
    dtype: str = "float32"
    specialize_active_lora: bool = False
    lora_scaling: float = 0.5
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "capture_sizes", tuple(sorted(set(self.capture_sizes))))
        _validate_positive("max_loras", self.max_loras, hi=64)
        _validate_positive("max_lora_rank", self.max_lora_rank, hi=256)
        _validate_positive("max_num_tokens", self.max_num_tokens, hi=1 << 16)
        _validate_positive("max_num_reqs", self.max_num_reqs, hi=self.max_num_tokens)
        _validate_positive("vocab_size", self.vocab_size)
        _validate_positive("hidden_size", self.hidden_size)
        if self.hidden_size % 4:
            raise InvalidArgument(f"hidden_size={self.hidden_size} must be a multiple of 4 (qkv slices H, H/2, H/2).")
        for s in self.capture_sizes:
            _validate_positive("capture size", s, hi=self.max_num_tokens)
        if self.dtype not in DTYPES:
            raise InvalidArgument(f"dtype={self.dtype!r} must be one of {', '.join(DTYPES)}.")

    @property
    def qkv_slices(self) -> tuple[int, int, int]:
        """Unequal slice widths, as a GQA qkv projection has."""
        h = self.hidden_size
        return (h, h // 2, h // 2)

    def padded_size(self, num_tokens: int) -> int:
        """``num_tokens_after_padding``: the smallest capture size >= num_tokens, else num_tokens."""
        return next((s for s in self.capture_sizes if s >= num_tokens), num_tokens)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["capture_sizes"] = list(self.capture_sizes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunnerConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise InvalidArgument(f"unknown runner config field(s) {sorted(unknown)}; known: {sorted(known)}.")
        return cls(**d)
