"""The resource watch on workers: one whose memory keeps growing is recycled before the OOM killer
ends it.

A target that leaks (a cache that never evicts, tensors kept across cases) grew a worker to 2.2 GB
in 100 cases with no word (issue 23): a nightly of 10,000 cases would meet the OOM killer, and
that death would read as a crash finding of whichever case was running. After each case the hub
reads the worker's resident memory from /proc (the worker and its descendants: under
compute-sanitizer the Python process is the wrapper's child; psutil is not a dependency). The
processes a case started are ended before its result is sent (processes.py), so a forked child's
pages, shared with the worker and counted in both, are never the worker's growth. Past
the limit the worker is closed between two cases and a fresh one takes the next case: a recycle
is neither a crash nor a finding, it is counted (``worker_recycles``) and warned about once.

The limit: ``max_rss_mb`` if given, else ``GROWTH_FACTOR`` times the worker's size after its
first case (imports done, the first case's buffers made), and at least ``MIN_GROWTH`` above it.
A worker is only recycled if it grew since that first case: a fresh one would be as large.
"""

from __future__ import annotations

import os

from .processes import children

GROWTH_FACTOR = 3
MIN_GROWTH = 1 << 30   # 1 GiB: a small worker may double its size legitimately (a larger batch)
_MB = 1 << 20


def _rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def tree_rss(pid: int) -> int | None:
    """The resident bytes of ``pid`` and its descendants; None if ``pid`` cannot be read (no /proc)."""
    total, seen, todo = 0, set(), [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        rss = _rss(p)
        if rss is None:
            if p == pid:
                return None
            continue
        total += rss
        todo += children(p)
    return total


class RssWatch:
    """One worker's memory over its life: ``check`` after each case says whether to recycle it."""

    def __init__(self, max_rss_mb: float | None = None):
        self.max_bytes = None if max_rss_mb is None else int(max_rss_mb * _MB)
        self.baseline: int | None = None
        self.cases = 0

    def limit(self) -> int:
        assert self.baseline is not None
        if self.max_bytes is not None:
            return self.max_bytes
        return max(GROWTH_FACTOR * self.baseline, self.baseline + MIN_GROWTH)

    def check(self, pid: int) -> str:
        """"" to keep the worker; else why to recycle it (its growth per case, in MB)."""
        rss = tree_rss(pid)
        if rss is None:
            return ""
        if self.baseline is None:
            self.baseline = rss
            return ""
        self.cases += 1
        if rss <= self.limit() or rss <= self.baseline:
            return ""
        per_case = (rss - self.baseline) / self.cases / _MB
        how = "--max-worker-rss" if self.max_bytes is not None else \
            f"{GROWTH_FACTOR}x its size after its first case" if GROWTH_FACTOR * self.baseline >= self.limit() else \
            f"{MIN_GROWTH / _MB:.0f} MB over its size after its first case"
        return (f"worker memory grew from {self.baseline / _MB:.0f} MB to {rss / _MB:.0f} MB over {self.cases} "
                f"case(s) ({per_case:.1f} MB per case), past the limit of {self.limit() / _MB:.0f} MB ({how})")
