"""Violations: what an oracle saw in one case (kind, kernel or op, location, tensor, message)."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import names, source
from .signature import Signature


@dataclass(frozen=True)
class Violation:
    tool: str
    kind: str
    kernel: str
    location: str            # file:line (reported, not matched)
    tensor: str
    message: str
    details: dict = field(default_factory=dict, hash=False, compare=False)
    site: str = ""           # file::function holding the location (matched); derived if empty

    def __post_init__(self):
        if self.kind not in names.KINDS:
            raise ValueError(f"violation kind {self.kind!r} must be one of {tuple(names.KINDS)}")
        if not self.site and self.location:
            object.__setattr__(self, "site", source.site(self.location))

    @property
    def signature(self) -> Signature:
        return Signature(self.tool, self.kind, self.kernel, self.location, self.tensor, self.site)

    def to_dict(self) -> dict:
        return {"tool": self.tool, "kind": self.kind, "kernel": self.kernel, "location": self.location,
                "tensor": self.tensor, "site": self.site, "message": self.message, "details": dict(self.details)}

    @classmethod
    def from_dict(cls, d: dict) -> Violation:
        return cls(d["tool"], d["kind"], d.get("kernel", ""), d.get("location", ""), d.get("tensor", ""),
                   d.get("message", ""), dict(d.get("details", {})), d.get("site", ""))
