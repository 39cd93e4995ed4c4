"""A worker's log (its stdout and stderr in one file): its tail for messages, its size capped.

A chatty target cannot fill the disk: past ``LOG_CAP`` the log is emptied, its tail kept (crash messages
quote it). The worker's own marker lines (``@@fuzzrunner-...@@``, worker.py) are left out of what a
message shows.
"""

from __future__ import annotations

import os
import re

LOG_CAP = 8 << 20          # a worker's own log past this is cut (its tail is kept for crash messages)

_MARKER_LINE = re.compile(r"@@fuzzrunner-[a-z-]+ [^@]*@@")  # the worker's case and tensor markers (worker.py)


class WorkerLog:
    """The log methods of a worker (``Worker`` derives from it): the file is at ``log_path``."""

    log_path: str

    def tail(self, n: int = 600) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - n))
                return f.read().decode(errors="replace").strip().replace("\n", " | ")
        except OSError:
            return ""

    def shown_tail(self, n: int = 600) -> str:
        """The log's tail for a message: the worker's own marker lines (``@@fuzzrunner-...@@``) left out."""
        raw = self.tail(n + 2000).replace(" | ", "\n")
        text = " | ".join(line for line in raw.splitlines() if not _MARKER_LINE.fullmatch(line.strip()))
        return text[-n:]

    def log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log_text(self, start: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")

    def log_has(self, marker: bytes, start: int) -> bool:
        """Whether ``marker`` was written to the log after ``start``."""
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return marker in f.read()

    def cut_log(self, limit: int = 0) -> None:
        """Empty the log once it is past ``limit`` bytes, keeping its tail (the worker appends)."""
        if self.log_size() <= limit:
            return
        keep = self.tail(4000).replace(" | ", "\n")
        with open(self.log_path, "r+b") as f:
            f.truncate(0)
        with open(self.log_path, "ab") as f:
            f.write(f"[fuzzrunner: log cut at {limit} bytes]\n{keep}\n".encode())
