"""Violations: what an oracle saw in one case (kind, kernel or op, location, tensor, message)."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import names, source
from .signature import Signature
from .text import json_safe, safe_repr, safe_str


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
        for name in ("tool", "kernel", "location", "tensor", "message", "site"):  # a target's names may be anything
            if not isinstance(getattr(self, name), str):
                object.__setattr__(self, name, safe_str(getattr(self, name), 300))
        object.__setattr__(self, "details", json_safe(self.details) if isinstance(self.details, dict) else
                           {"details": safe_repr(self.details, 300)})  # they travel as JSON
        if self.kind not in names.KINDS:
            raise ValueError(f"violation kind {self.kind!r} must be one of {tuple(names.KINDS)}")
        if not self.site and self.location:
            object.__setattr__(self, "site", source.site(self.location))
        # The sites of locations inside the tensor and kernel names (an automatically tracked
        # ``torch.empty@file.py:15``) travel with the violation, so that every process names the
        # bug as the one that made it (the hub and a report reader cannot read a worker's files).
        known = source.known_sites(f"{self.tensor} {self.kernel}")
        if known:
            self.details["sites"] = {**self.details.get("sites", {}), **known}
        source.learn_sites(self.details.get("sites", {}))

    @property
    def signature(self) -> Signature:
        return Signature(self.tool, self.kind, self.kernel, self.location, self.tensor, self.site)

    def to_dict(self) -> dict:
        return {"tool": self.tool, "kind": self.kind, "kernel": self.kernel, "location": self.location,
                "tensor": self.tensor, "site": self.site, "message": self.message, "details": dict(self.details)}

    @classmethod
    def from_dict(cls, d: dict) -> Violation:
        return cls(d["tool"], d["kind"], d.get("kernel") or "", d.get("location") or "", d.get("tensor") or "",
                   d.get("message") or "", dict(d.get("details") or {}), d.get("site") or "")


def raised_cuda_error(v: Violation) -> bool:
    """A CUDA error raised in the runner's Python code (a crash whose message names CUDA): what the
    launch that broke the context, or a later one, raised."""
    return names.tool(v.tool).raised and v.kind == "crash" and "CUDA" in v.message


def _num(v) -> str:
    return f"{v:.6g}" if isinstance(v, (int, float)) else str(v)


def cause_lines(details: dict, message: str = "") -> list[str]:
    """Where the bug is rather than where it shows: for a per-step buffer read unwritten, the op that
    ran without writing it and the op that last wrote it (``op 2 (dummy_run) never wrote
    token_lora_mapping[3]; last written in op 1 (step)``); else the op that triggered the violation,
    when known and not already in ``message``."""
    if not isinstance(details, dict):
        return []
    if details.get("unwritten_by"):
        return [str(details["unwritten_by"])]
    op, name = details.get("op_index"), details.get("op")
    if op is None or f"op {op}" in message:
        return []
    return [f"triggered in op {op}" + (f" ({name})" if name else "")]


def window_lines(details: dict) -> list[str]:
    """A numeric violation's expected and actual values around its worst element, as three
    aligned lines (the worst one in brackets); none for any other violation."""
    w = details.get("window") if isinstance(details, dict) else None
    if not isinstance(w, dict) or not w.get("expected"):
        return []
    lead = "".join(f"{i}, " for i in w.get("at", []))
    cells = [(_num(x), _num(y)) for x, y in zip(w["expected"], w["actual"])]
    width = max(len(s) for pair in cells for s in pair) + 2
    mark = w.get("worst", 0) - w.get("start", 0)

    def row(values) -> str:
        return " ".join((f"[{v}]" if i == mark else f" {v} ").rjust(width) for i, v in enumerate(values))
    head = f"around the worst element [{lead}{w.get('worst')}] (columns {w.get('start')}..{w.get('stop', 1) - 1}):"
    return [line.rstrip() for line in (head,
            f"  expected: {row([x for x, _ in cells])}", f"  actual:   {row([y for _, y in cells])}")]
