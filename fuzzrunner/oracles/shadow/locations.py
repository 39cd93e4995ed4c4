"""Which line of the user's code made an access: the innermost frame outside torch, numpy,
Triton and the oracles, with generated code mapped back to the code it was generated from.

* ``torch.fx`` code (``<eval_with_key>.N``, a ``GraphModule``'s ``forward``): the generated line
  is mapped to its graph node (``GraphModule._lineno_map``); a node with a recorded stack trace
  (Dynamo's graphs, ``make_fx``, a tracer with ``record_stack_traces``) gives the user's line
  that made it. A node without one gives nothing: the frame that called the ``GraphModule``
  is blamed instead, never the generated file.
* A worker thread running a builtin (``pool.submit(buf.sum)``) has no frame of its own: the line
  that submitted it (or started the thread) is blamed.
* Any other generated frame (a file name in angle brackets: ``<string>``, a ``functools`` or
  Dynamo wrapper) is skipped the same way.
"""

from __future__ import annotations

import re
import sys
import threading
from types import FrameType

# Frames skipped when blaming a torch op on its caller: torch, Triton, and our own hooks.
NOT_CALLERS = ("/torch/", "/triton/", "/numpy/", "/fuzzrunner/oracles/", "/fuzzrunner/tracking.py", "/contextlib.py",
               "/typing_extensions.py", "/concurrent/futures/", "/threading.py")
ORIGIN = threading.local()  # per worker thread: where its work was handed over (threads.py)
_TRACE_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _fx_source(frame) -> tuple[str, int] | None:
    """The user's line behind a line of a ``GraphModule``'s generated code, if its node recorded one."""
    gm = frame.f_locals.get("self")
    lines = getattr(gm, "_lineno_map", None)
    graph = getattr(gm, "graph", None)
    if not lines or graph is None:
        return None
    idx = lines.get(frame.f_lineno - frame.f_code.co_firstlineno)
    if idx is None:
        return None
    nodes = list(graph.nodes)
    trace = nodes[idx].meta.get("stack_trace") if idx < len(nodes) else None
    for m in reversed(list(_TRACE_LINE.finditer(trace or ""))):
        path = m["file"].replace("\\", "/")
        if not any(s in path for s in NOT_CALLERS) and not path.startswith("<"):
            return m["file"], int(m["line"])
    return None


# Per code file name: its path with forward slashes, and what a frame there is: 0 a caller, 1 skipped
# (torch, the oracles, ...), 2 generated code (angle brackets), 3 fx code (``<eval_with_key>``). Every
# torch op under a shadow oracle asks ``caller_line``: a dict lookup per frame, not a scan of NOT_CALLERS.
_KINDS: dict[str, tuple[str, int]] = {}


def _kind(filename: str) -> tuple[str, int]:
    known = _KINDS.get(filename)
    if known is None:
        path = filename.replace("\\", "/")
        kind = (3 if path.startswith("<eval_with_key>") else 2) if path.startswith("<") else \
            1 if any(s in path for s in NOT_CALLERS) else 0
        if len(_KINDS) > 20000:  # generated files (one per fx graph) come and go: keep the table small
            _KINDS.clear()
        known = _KINDS[filename] = (path, kind)
    return known


def caller_line(depth: int = 2) -> tuple[str, int]:
    """The innermost frame outside torch and the oracles: the code that called the torch op."""
    f: FrameType | None = sys._getframe(depth)
    while f is not None:
        path, kind = _kind(f.f_code.co_filename)
        if kind == 0:
            return path, f.f_lineno
        if kind == 3:
            found = _fx_source(f)
            if found is not None:
                return found
        f = f.f_back
    return getattr(ORIGIN, "site", None) or ("?", 0)  # a builtin handed to a pool: its submit line
