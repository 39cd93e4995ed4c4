"""The finding book: one ``Finding`` per bug, saved the moment it appears or shrinks.

A write that fails (read-only or full disk) never loses the finding: it stays in memory,
``write_errors`` says what failed, and the campaign stops and reports it.
"""

from __future__ import annotations

from ..case import Case
from ..context import Context
from ..corpus import Corpus
from ..errors import InvalidCase
from ..finding import Finding, group, merge
from ..violation import Violation


class FindingBook:
    def __init__(self, corpus: Corpus | None, target: str, target_spec: str = "", case_timeout_s: float | None = None,
                 context: Context | None = None, code_under_test: dict | None = None):
        self.corpus, self.target, self.target_spec = corpus, target, target_spec
        self.case_timeout_s = case_timeout_s  # recorded in each finding: a replay waits as long as the search did
        self.context = context  # the workers' context, recorded in each finding (a replay knows the shadow mode)
        self.code = dict(code_under_test or {})  # the engine release the workers loaded: each finding records it
        self.by_id: dict[str, Finding] = {}
        self._last: dict[str, Finding] = {}  # id -> the latest failing call's sighting
        self._best_here: dict[str, tuple] = {}  # id -> the size of the smallest case this run's calls showed
        self.settled: set[str] = set()       # ids Hypothesis is done with (shrunk, or not to be shrunk)
        self.write_errors: list[str] = []

    def record(self, violations: list[Violation], case: Case, examples: int, elapsed: float,
               preceding: tuple = ((), 0), found_by: dict | None = None) -> list[tuple[Finding, bool]]:
        """File ``case`` under each root cause its violations show; (finding, is_new) for each. ``preceding``:
        (the cases its worker ran before it, how many before those were not kept): kept in a new finding.
        ``found_by``: how the case came ({"seed": path}, {"corpus": path}, {"search": generated so far}:
        ``Finding.found_by``)."""
        out = []
        earlier, dropped = preceding
        kept = {"of": case.to_dict(), "cases": [c.to_dict() for c in earlier], "dropped": dropped} \
            if earlier or dropped else None
        for head, others in group(violations):
            seen = Finding.of(head, others, case, first_found_after_examples=examples, found_after_s=elapsed,
                              target_spec=self.target_spec, case_timeout_s=self.case_timeout_s, context=self.context,
                              code_under_test=dict(self.code), preceding=kept, found_by=dict(found_by or {}))
            self._last[seen.id] = seen
            size = case.size()
            self._best_here[seen.id] = min(size, self._best_here.get(seen.id, size))
            known = self.by_id.get(seen.id)
            if known is None:
                self.by_id[seen.id] = seen
                self._save(seen)
                out.append((seen, True))
            else:
                if merge(known, seen):
                    self._save(known)
                out.append((known, False))
        return out

    def mark_minimized(self, finding_id: str, shrunk: bool = True) -> None:
        """Hypothesis ends a search by replaying each bug's minimal example: that last call's case wins,
        unless the finding holds a smaller one (``Case.size``): a case is never replaced by a larger one.
        The kept case is called minimized only if this completed shrink reached it; one that only an
        earlier, interrupted shrink reached stays not minimized (and is not resumed again: this
        shrink was the resumption). Without shrinking (``shrunk=False``) the bug is settled as first
        found, and not called minimized."""
        self.settled.add(finding_id)
        f = self.by_id.get(finding_id)
        if f is None or f.minimized or not shrunk:
            return
        last = self._last.get(finding_id)
        if last is not None and last.case.size() <= f.case.size():
            f.case, f.violation, f.others, f.signature = last.case, last.violation, last.others, last.signature
        best_here = self._best_here.get(finding_id)
        f.minimized = best_here is not None and f.case.size() >= best_here
        f.shrink_interrupted = False
        self._save(f)

    def mark_interrupted(self, finding_id: str) -> None:
        f = self.by_id.get(finding_id)
        if f is not None and not f.minimized:
            f.shrink_interrupted = True
            self._save(f)

    def supersede(self, old: Finding, new: Finding) -> None:
        """``new`` is ``old``'s bug at a new site (``corpus_replay._refile``): it keeps ``old``'s id as an
        alias, its discovery and, for the same case, its shrink state; ``old``'s file is removed."""
        new.aliases = [a for a in dict.fromkeys([*new.aliases, old.id, *old.aliases]) if a != new.id]
        if new.case.size() >= old.case.size():
            new.minimized, new.shrink_interrupted = old.minimized, old.shrink_interrupted
        new.first_found_after_examples = old.first_found_after_examples or new.first_found_after_examples
        new.found_at = min(new.found_at, old.found_at or new.found_at)
        self._save(new)
        if self.corpus is not None:
            try:
                self.corpus.finding_path(self.target, old.id).unlink(missing_ok=True)
            except OSError as e:
                self.write_errors.append(f"cannot remove the renamed finding {old.id} "
                                         f"({self.corpus.finding_path(self.target, old.id)}): {e.strerror or e}")

    def adopt(self, finding: Finding) -> None:
        """A finding from the corpus that still reproduces: known, in the state it was saved."""
        self.by_id.setdefault(finding.id, finding)

    def drop(self, finding_id: str) -> Finding | None:
        """Take a finding out of the book and out of the corpus's regression set (a crash that did not
        reproduce: its file moves to ``flaky/``)."""
        self._last.pop(finding_id, None)
        f = self.by_id.pop(finding_id, None)
        if f is not None and self.corpus is not None:
            try:
                self.corpus.set_aside(self.target, f)
            except OSError as e:
                self.write_errors.append(f"cannot move flaky finding {f.id} out of the corpus's findings "
                                         f"({self.corpus.finding_path(self.target, f.id)}): {e.strerror or e}")
        return f

    def _save(self, finding: Finding) -> None:
        if self.corpus is None:
            return
        other = stored_finding(self.corpus, self.target, finding.id)  # another shard or run's case may be smaller
        if other is not None:
            merge(finding, other)
        error = write_finding(self.corpus, self.target, finding, self.corpus.save_finding)
        if error:
            self.write_errors.append(error)


def stored_finding(corpus: Corpus, target: str, finding_id: str) -> Finding | None:
    """The corpus' finding of that id, if any; an unreadable old file counts as none (it is replaced)."""
    try:
        return corpus.load_finding(target, finding_id)
    except InvalidCase:
        return None


def write_finding(corpus: Corpus, target: str, finding: Finding, write) -> str | None:
    """``write(target, finding)`` (save or set aside); the one-line error when the disk refuses."""
    try:
        write(target, finding)
    except OSError as e:
        return (f"cannot write finding {finding.id} to the corpus ({corpus.finding_path(target, finding.id)}): "
                f"{e.strerror or e}")
    return None
