"""Violations (what an oracle saw) and their signatures (what makes two of them one bug)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

KINDS = ("uninitialized-read", "stale-read", "out-of-bounds", "numeric-mismatch",
         "poison-divergence", "invariant-violation", "crash", "timeout", "sanitizer-error")


_FAMILY = {"uninitialized-read": "unwritten-read", "stale-read": "unwritten-read"}


@dataclass(frozen=True)
class Signature:
    """tool + kind + kernel (or torch op) + source line + tensor; never Python frames."""
    tool: str
    kind: str
    kernel: str
    location: str
    tensor: str

    @property
    def id(self) -> str:
        """Identity of the bug. An uninitialized and a stale read of one tensor at one line are one
        bug (the code reads what this step did not write); which of the two a case shows depends
        only on whether an earlier op happened to write the bytes. So they share an id, and
        shrinking goes on to the simpler of the two."""
        kind = _FAMILY.get(self.kind, self.kind)
        key = "|".join((self.tool, kind, self.kernel, self.location, self.tensor))
        return hashlib.sha1(key.encode()).hexdigest()[:12]

    def short(self) -> str:
        return f"{self.kind} of {self.tensor or '?'} in {self.kernel or '?'} at {self.location or '?'} [{self.tool}]"

    def to_dict(self) -> dict:
        return {"tool": self.tool, "kind": self.kind, "kernel": self.kernel,
                "location": self.location, "tensor": self.tensor}

    @classmethod
    def from_dict(cls, d: dict) -> "Signature":
        return cls(*(str(d.get(k, "")) for k in ("tool", "kind", "kernel", "location", "tensor")))


@dataclass(frozen=True)
class Violation:
    tool: str
    kind: str
    kernel: str
    location: str
    tensor: str
    message: str
    details: dict = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"violation kind {self.kind!r} must be one of {KINDS}")

    @property
    def signature(self) -> Signature:
        return Signature(self.tool, self.kind, self.kernel, self.location, self.tensor)

    def to_dict(self) -> dict:
        return {**self.signature.to_dict(), "message": self.message, "details": dict(self.details)}

    @classmethod
    def from_dict(cls, d: dict) -> "Violation":
        return cls(d["tool"], d["kind"], d.get("kernel", ""), d.get("location", ""), d.get("tensor", ""),
                   d.get("message", ""), dict(d.get("details", {})))


# Which violation of a case names the finding: what a user sees first and can act on.
_PRIORITY = {"uninitialized-read": 0, "stale-read": 0, "out-of-bounds": 0, "sanitizer-error": 0,
             "numeric-mismatch": 1, "poison-divergence": 2, "crash": 3, "timeout": 3, "invariant-violation": 4}


def primary(violations: list[Violation]) -> Violation:
    """The root-cause violation: memory errors first, then numeric, then the earliest seen."""
    return min(violations, key=lambda v: (_PRIORITY.get(v.kind, 9), v.details.get("seq", 1 << 62)))
