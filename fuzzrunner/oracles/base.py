"""The oracle protocol: start a case, hear about each op and its outputs, finish with violations.

Oracles know nothing about the reference runner. They learn about buffers through
``fuzzrunner.tracking`` (the calls any runner makes) and about results through
``observe`` (what a target reports for each op).
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Protocol

from ..violation import Violation

_SEQ = itertools.count()
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Oracle(Protocol):
    name: str

    def start(self) -> None: ...
    def begin_op(self, index: int, op: dict) -> None: ...
    def observe(self, index: int, op: dict, result: Any) -> None: ...
    def finish(self) -> list[Violation]: ...


def source_location(path: str, line: int) -> str:
    """``file:line`` relative to the checkout (stable across machines), else the bare path."""
    path = os.path.abspath(path) if path and path != "?" else "?"
    if path.startswith(_ROOT + os.sep):
        path = os.path.relpath(path, _ROOT)
    elif "site-packages" + os.sep in path:
        path = path.split("site-packages" + os.sep, 1)[1]
    elif path.startswith(os.getcwd() + os.sep):  # a user's project: relative to where it is run
        path = os.path.relpath(path, os.getcwd())
    return f"{path}:{line}"


class ViolationLog:
    """One violation per (tool, kind, kernel, location, tensor) per case, with a count."""

    def __init__(self):
        self._by_sig: dict = {}

    def add(self, v: Violation, count: int = 1) -> None:
        key = v.signature
        if key in self._by_sig:
            self._by_sig[key].details["count"] += count
        else:
            v.details.setdefault("count", count)
            v.details.setdefault("seq", next(_SEQ))  # order of first sight, across oracles
            self._by_sig[key] = v

    def violations(self) -> list[Violation]:
        return list(self._by_sig.values())

    def __len__(self) -> int:
        return len(self._by_sig)
