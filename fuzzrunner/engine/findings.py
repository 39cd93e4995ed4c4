"""The finding book: one ``Finding`` per signature, saved the moment it appears or shrinks."""

from __future__ import annotations

import json
from pathlib import Path

from ..case import Case
from ..corpus import Corpus, Finding
from ..violation import Violation, primary


class FindingBook:
    def __init__(self, corpus: Corpus | None, target: str):
        self.corpus, self.target = corpus, target
        self.by_id: dict[str, Finding] = {}
        self.paths: dict[str, Path] = {}
        self._last: dict[str, tuple] = {}  # signature id -> (case, violations) of the latest failing call

    def record(self, violations: list[Violation], case: Case, examples: int, elapsed: float) -> tuple[Finding, bool]:
        """File ``case`` under its primary violation's signature; returns (finding, is_new)."""
        main = primary(violations)
        sig = main.signature
        others = [v for v in violations if v is not main]
        self._last[sig.id] = (case, main, others)
        known = self.by_id.get(sig.id)
        if known is None:
            finding = Finding(sig, case, main, others, examples, elapsed)
            self.by_id[sig.id] = finding
            self._save(finding)
            return finding, True
        if case.size() < known.case.size():
            known.case, known.violation, known.others, known.signature = case, main, others, sig
            self._save(known)
        return known, False

    def mark_minimized(self, sig_id: str) -> None:
        """Hypothesis ends a search by replaying each bug's minimal example: that last call's case wins."""
        f = self.by_id.get(sig_id)
        if f is None or f.minimized:
            return
        f.case, f.violation, f.others = self._last.get(sig_id, (f.case, f.violation, f.others))
        f.signature = f.violation.signature  # the kind the minimal case shows (same id)
        f.minimized = True
        self._save(f, prefer_own=True)

    def adopt(self, finding: Finding) -> None:
        """A finding from the corpus that still reproduces: known, already minimized."""
        self.by_id.setdefault(finding.signature.id, finding)

    def _save(self, finding: Finding, prefer_own: bool = False) -> None:
        if self.corpus is None:
            return
        path = self.corpus.finding_path(self.target, finding.signature)
        if path.exists() and not prefer_own:  # another shard (or run) may hold a smaller case of the same bug
            try:
                other = Finding.from_dict(json.loads(path.read_text()))
                if other.case.size() < finding.case.size():
                    finding.case, finding.minimized = other.case, other.minimized or finding.minimized
                finding.first_found_after_examples = min(finding.first_found_after_examples,
                                                         other.first_found_after_examples) \
                    if other.first_found_after_examples else finding.first_found_after_examples
            except Exception:
                pass  # an unreadable old file is simply replaced
        self.paths[finding.signature.id] = self.corpus.save_finding(self.target, finding)
