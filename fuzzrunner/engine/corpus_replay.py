"""Before any search: replay the corpus (saved findings, then seed cases) through the shard.

A finding that still reproduces is known again (and keeps its shrink state, so an interrupted
shrink resumes); one that shows something else is recorded as what it shows now. A file that
cannot be read is quarantined and the campaign goes on.
"""

from __future__ import annotations

from ..errors import InvalidCase


def replay_corpus(shard) -> None:
    corpus, result = shard.corpus, shard.result
    if corpus is None or shard.index != 0:
        return

    def bad(path, moved, error) -> None:
        result.quarantined.append((str(path), str(moved) if moved else None, str(error)))
        where = f"moved to {moved}" if moved else "could not be moved"
        shard.emit({"type": "warning", "message": f"unreadable corpus file {path} ({where}): {error}"})

    for path, case, finding in corpus.entries(shard.target.name, on_bad=bad):
        if not set(case.faults) <= set(shard.faults):
            continue  # recorded with planted faults: replays only in campaigns that plant them
        try:
            violations = shard.execute(case)
        except InvalidCase as e:
            bad(path, corpus.quarantine(path), e)
            continue
        still = finding is not None and bool(finding.reproduced_by(violations))
        result.replayed.append((str(path), finding.id if finding else None, still if finding else bool(violations)))
        if still:
            shard.book.adopt(finding)
            shard.emit({"type": "regression", "finding": finding, "path": str(path)})
        elif violations:
            shard.record(violations, case)
