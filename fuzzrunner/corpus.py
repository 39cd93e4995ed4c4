"""Cases and findings on disk: atomic, deduplicated by signature, shared between runs.

Layout of a corpus directory:
    findings/<target>/<signature id>.json   one file per distinct bug, rewritten as it shrinks
    cases/<target>/<name>.json              cases kept as regression seeds (replayed first)
    hypothesis/<target>/                    Hypothesis' example database (if none is plugged in)
Every write goes to a temporary file in the same directory, then ``os.replace``: a
``kill -9`` at any moment leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .case import Case, parse_json, read_text
from .errors import InvalidCase
from .violation import Signature, Violation

FINDING_SCHEMA = 1


@dataclass
class Finding:
    signature: Signature
    case: Case
    violation: Violation                       # the primary violation
    others: list = field(default_factory=list)  # other violations of the same case
    first_found_after_examples: int = 0
    found_after_s: float = 0.0
    minimized: bool = False
    repro: str | None = None
    found_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        return {"schema": FINDING_SCHEMA, "signature": self.signature.to_dict(), "id": self.signature.id,
                "violation": self.violation.to_dict(), "others": [v.to_dict() for v in self.others],
                "case": self.case.to_dict(), "first_found_after_examples": self.first_found_after_examples,
                "found_after_s": round(self.found_after_s, 3), "minimized": self.minimized,
                "repro": self.repro, "found_at": self.found_at}

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "finding") -> "Finding":
        try:
            if d.get("schema", 0) > FINDING_SCHEMA:
                raise InvalidCase(f"{source}: finding schema {d['schema']} is newer than this fuzzrunner "
                                  f"understands ({FINDING_SCHEMA}); upgrade fuzzrunner.")
            return cls(Signature.from_dict(d["signature"]), Case.from_dict(d["case"], source=source),
                       Violation.from_dict(d["violation"]), [Violation.from_dict(v) for v in d.get("others", [])],
                       d.get("first_found_after_examples", 0), d.get("found_after_s", 0.0),
                       d.get("minimized", False), d.get("repro"), d.get("found_at", 0.0))
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidCase(f"{source}: not a fuzzrunner finding ({type(e).__name__}: {e}).") from None

    @classmethod
    def load(cls, path) -> "Finding":
        data = parse_json(read_text(path), str(path))
        if not isinstance(data, dict):
            raise InvalidCase(f"{path}: a finding must be a JSON object.")
        return cls.from_dict(data, source=str(path))


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_any(path) -> tuple[Case, Finding | None]:
    """A case file or a finding file -> (case, finding or None)."""
    data = parse_json(read_text(path), str(path))
    if isinstance(data, dict) and "signature" in data and "case" in data:
        f = Finding.from_dict(data, source=str(path))
        return f.case, f
    return Case.from_dict(data, source=str(path)), None


class Corpus:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def finding_path(self, target: str, sig: Signature) -> Path:
        return self.root / "findings" / _safe(target) / f"{sig.id}.json"

    def save_finding(self, target: str, finding: Finding) -> Path:
        path = self.finding_path(target, finding.signature)
        atomic_write(path, json.dumps(finding.to_dict(), indent=2))
        return path

    def save_case(self, case: Case, name: str) -> Path:
        path = self.root / "cases" / _safe(case.target) / f"{_safe(name)}.json"
        atomic_write(path, case.to_json(indent=2))
        return path

    def findings(self, target: str | None = None) -> list[tuple[Path, Finding]]:
        base = self.root / "findings"
        dirs = [base / _safe(target)] if target else (sorted(p for p in base.iterdir() if p.is_dir())
                                                        if base.exists() else [])
        out = []
        for d in dirs:
            for p in sorted(d.glob("*.json")):
                out.append((p, Finding.load(p)))
        return out

    def cases(self, target: str | None = None) -> list[tuple[Path, Case]]:
        base = self.root / "cases"
        dirs = [base / _safe(target)] if target else (sorted(p for p in base.iterdir() if p.is_dir())
                                                        if base.exists() else [])
        return [(p, Case.load(p)) for d in dirs for p in sorted(d.glob("*.json"))]

    def database_path(self, target: str) -> Path:
        return self.root / "hypothesis" / _safe(target)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:120]
