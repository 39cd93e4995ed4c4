"""One corpus, one writer: shards elsewhere send their corpus writes to the campaign's driver.

A shard on another machine cannot write the driver's corpus directory. It gets a
``StreamedCorpus``: the corpus entries the driver read before the campaign (for the replay),
and writes that become events (``CorpusSave``, ``CorpusSetAside``, ``CorpusQuarantine``, sent as
plain data). The driver's ``CorpusWriter`` applies them to the real corpus, folding every save
into what it wrote before (the smaller case wins, as when local shards meet in one directory),
and keeps each finding's latest state: a shard that dies has lost nothing it sent.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

from ..corpus import Corpus
from ..finding import Finding, merge
from . import events
from .finding_book import stored_finding, write_finding


class StreamedCorpus(Corpus):
    """The driver's corpus as a shard elsewhere sees it: a snapshot to read, writes sent away."""

    def __init__(self, root: str, faults: tuple, entries: list, send: Callable[[events.Event], None] | None = None):
        super().__init__(root, faults=faults)
        self._entries, self.send = entries, send or (lambda message: None)

    def entries(self, target: str | None = None, *, on_bad=None) -> list:
        return [(p, c, f) for p, c, f in self._entries if target is None or c.target == target]

    def load_finding(self, target: str, finding_id: str) -> Finding | None:
        return None  # the driver folds each save into what it holds

    def hypothesis_home(self) -> Path | None:
        return None  # the driver's folder is not on this machine

    def save_finding(self, target: str, finding: Finding) -> Path:
        self.send(events.CorpusSave(target, finding))
        return self.finding_path(target, finding.id)

    def set_aside(self, target: str, finding: Finding) -> Path:
        self.send(events.CorpusSetAside(target, finding))
        return self.root / "flaky" / target / self.finding_path(target, finding.id).name

    def quarantine(self, path: Path) -> Path | None:
        self.send(events.CorpusQuarantine(str(path)))
        return None


def snapshot(corpus_dir, faults: tuple, target: str, on_bad) -> list:
    """The entries a ``StreamedCorpus`` carries: read (and unreadable files quarantined) by the driver."""
    return Corpus(corpus_dir, faults=faults).entries(target, on_bad=on_bad) if corpus_dir else []


class CorpusWriter:
    """The driver's side: applies the shards' corpus messages; ``findings`` is every finding's latest state."""

    def __init__(self, corpus: Corpus | None, target_spec: str):
        self.corpus, self.target_spec = corpus, target_spec
        self.findings: dict[str, Finding] = {}
        self.errors: list[str] = []

    def handlers(self) -> dict:
        """The corpus writes, by event class."""
        return {events.CorpusSave: self.save, events.CorpusSetAside: self.set_aside,
                events.CorpusQuarantine: self.quarantine}

    def apply(self, message: events.Event) -> None:
        events.dispatch(self.handlers(), message)

    def quarantine(self, message: events.CorpusQuarantine) -> None:
        if self.corpus is not None:
            self.corpus.quarantine(Path(message.path))

    def _finding(self, message: events.CorpusSave | events.CorpusSetAside) -> Finding:
        finding = copy.deepcopy(message.finding)  # the event stays as it came
        finding.target_spec = self.target_spec  # a shard may load the target under another name
        return finding

    def set_aside(self, message: events.CorpusSetAside) -> None:
        finding = self._finding(message)
        self.findings.pop(finding.id, None)
        self._write(message.target, finding, "set_aside")

    def save(self, message: events.CorpusSave) -> None:
        finding = self._finding(message)
        known = self.findings.get(finding.id)
        if known is None and self.corpus is not None:
            known = stored_finding(self.corpus, message.target, finding.id)
        if known is not None:
            merge(finding, known)
        self.findings[finding.id] = finding
        self._write(message.target, finding, "save_finding")

    def _write(self, target: str, finding: Finding, how: str) -> None:
        if self.corpus is None:
            return
        error = write_finding(self.corpus, target, finding, getattr(self.corpus, how))
        if error:
            self.errors.append(error)
