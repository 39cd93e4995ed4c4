"""The shadow oracle's reporter: a bad access (kind, span, element, epochs, op) becomes a ``Violation``.

Both modes hand it what they found, the CPU mode as it checks each access, the device mode at each op's
read-back; it holds the op being run (its number and name, and the name of every earlier op, for "last
written in op 1 (step)"), words the report (``words.py``) and keeps it in the log (one per bad read per
op, with a count). The CPU mode names the thread that made the access; the device mode cannot (its
checks run on the device, and come back at the end of the op), so it is made without ``threads``.
"""

from __future__ import annotations

import threading

from ....violation import Violation
from ...base import ViolationLog
from ..threads import thread_name
from .span import BadAccess
from .words import describe, indexed_out_of_range


class Reporter:
    def __init__(self, *, threads: bool):
        self.threads = threads  # reports name the thread that made the access
        self.log = ViolationLog()
        self.op_index, self.op_name = -1, ""
        self.op_names: dict[int, str] = {}  # op index -> its name, for "last written in op 1 (step)"
        self.owner = threading.get_ident()  # the thread that runs the case (``threads``: others are named)
        self.reported = 0  # reports made so far (whether an op's inner checks found something)
        self.regions: list[str] = []  # the runner's open ``tracking.region`` blocks, innermost last

    def begin_op(self, index: int, op: dict) -> None:
        self.op_index, self.op_name = index, op.get("op", "")
        self.op_names[index] = self.op_name

    def __len__(self) -> int:
        return len(self.log)

    def violations(self) -> list[Violation]:
        return self.log.violations()

    def op(self) -> dict:
        """The details every report starts with: the op it was made in (and the thread, with ``threads``)."""
        facts: dict = {"op_index": self.op_index, "op": self.op_name}
        if self.regions:
            facts["region"] = self.regions[-1]
        if self.threads:
            facts["thread"] = thread_name()
        return facts

    def at(self, address: int, **extra) -> dict:
        """A bad access's details: its address, the op's facts, then ``extra``."""
        return {"address": hex(address), **self.op(), **extra}

    def bad_access(self, b: BadAccess, kernel: str, location: str, details: dict) -> None:
        """Report ``b``, read or written by ``kernel`` (a Triton kernel or a torch op) at ``location``;
        ``details``: the facts the back end knows (``at``), to which the words add theirs."""
        name = b.allocation.name if b.allocation else "<untracked>"
        msg = describe(b, kernel, name, details, self.op_index)
        if b.kind != "out-of-bounds" and b.allocation is not None and b.allocation.per_step:
            element = f"{name}[{', '.join(map(str, b.allocation.element(b.byte_offset)))}]"
            details["unwritten_by"] = self.unwritten_by(b.kind, b.written_epoch, element)
        self.add(b.kind, kernel, location, name, msg, details, b.count)

    def index_out_of_range(self, func: str, name: str, index: int, rows: int, count: int, location: str) -> None:
        """An indexing op that indexed ``name`` past its ``rows`` (``count`` times; ``index`` the first)."""
        self.add("out-of-bounds", func, location, name, indexed_out_of_range(func, name, index, rows, count),
                 {"index": index, "rows": rows, **self.op()}, count)

    def add(self, kind: str, kernel: str, location: str, tensor: str, message: str, details: dict,
            count: int) -> None:
        self.reported += 1
        self.log.add(Violation("shadow", kind, kernel, location, tensor, message + self._on_thread(), details), count)

    def unwritten_by(self, kind: str, written_epoch: int, element: str) -> str:
        """The op that should have written a per-step buffer's ``element`` and did not (the read's line
        is where the bug shows, this op's path is where it is), and the op that last wrote it."""
        if kind == "stale-read" and written_epoch > 0:
            w = written_epoch - 1
            last = f"last written in op {w} ({self.op_names.get(w) or '?'})"
        else:
            last = "written at set-up only" if kind == "stale-read" else "never written by any op"
        return f"op {self.op_index} ({self.op_name}) never wrote {element}; {last}"

    def _on_thread(self) -> str:
        """The thread of a report made off the thread that runs the case (a worker's op)."""
        if not self.threads or threading.get_ident() == self.owner:
            return ""
        return f" (on thread {thread_name()!r})"
