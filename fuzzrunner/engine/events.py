"""What a campaign says while it runs, and what its shards send to the process that merges them:
one vocabulary, each event a plain dict with a ``type`` made by the constructors below.

Campaign events reach ``on_event`` (the CLI's progress line, the pytest plugin, a library user):
``progress``, ``warning``, ``finding``, ``regression``. A shard elsewhere (a shard process, a Ray
actor) also sends its end (``done`` with its result, or ``error``) and, on Ray, its corpus writes
(``corpus-save``, ``corpus-set-aside``, ``corpus-quarantine``: corpus_stream.py). ``portable``
makes any of them fit to travel between processes (a finding as its dict). Receivers dispatch
through a table of handlers by ``type`` (``dispatch``), never an if/elif chain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..callbacks import value_kind
from ..text import describe, plural

PROGRESS, WARNING, FINDING, REGRESSION = "progress", "warning", "finding", "regression"
DONE, ERROR = "done", "error"
SAVE, SET_ASIDE, QUARANTINE = "corpus-save", "corpus-set-aside", "corpus-quarantine"
CORPUS_WRITES = (SAVE, SET_ASIDE, QUARANTINE)


def progress(examples: int, generated: int, findings: int, elapsed: float, shard: int) -> dict:
    return {"type": PROGRESS, "examples": examples, "generated": generated, "findings": findings,
            "elapsed": elapsed, "shard": shard}


def warning(message: str, shard: int | None = None) -> dict:
    return {"type": WARNING, "message": message, **({"shard": shard} if shard is not None else {})}


def finding(f, shard: int) -> dict:
    """A new bug, found by this campaign (``f``: a ``Finding``)."""
    return {"type": FINDING, "finding": f, "shard": shard}


def regression(f, path: str) -> dict:
    """A finding of the corpus that still fails."""
    return {"type": REGRESSION, "finding": f, "path": path}


def done(result) -> dict:
    """A shard's end, with its (portable) result."""
    return {"type": DONE, "result": result}


def error(message: str) -> dict:
    """A shard that failed outside its search."""
    return {"type": ERROR, "message": message}


def corpus_save(target: str, finding_dict: dict) -> dict:
    return {"type": SAVE, "target": target, "finding": finding_dict}


def corpus_set_aside(target: str, finding_dict: dict) -> dict:
    return {"type": SET_ASIDE, "target": target, "finding": finding_dict}


def corpus_quarantine(path: str) -> dict:
    return {"type": QUARANTINE, "path": path}


def portable(e: dict) -> dict:
    """An event that can travel between processes (a finding as its dict)."""
    e = dict(e)
    if "finding" in e and hasattr(e["finding"], "to_dict"):
        e["finding"] = e["finding"].to_dict()
    return e


class Listener:
    """A user's ``on_event``, called so that it cannot end the campaign: an exception it raises is
    counted and said once, in the result's warnings (``report``); the campaign and later events go on.
    (A raising progress callback used to abort the campaign with its findings' report unwritten.)
    A ``BaseException`` (Ctrl-C in the callback) still stops the campaign, as anywhere else."""

    def __init__(self, on_event: Callable[[dict], object] | None):
        self.on_event, self.failures, self.first = on_event, 0, ""

    def __call__(self, event: dict) -> None:
        if self.on_event is None:
            return
        try:
            kind = value_kind(self.on_event(event))  # a coroutine returned: closed, and it saw nothing
        except Exception as e:  # noqa: BLE001 - the user's callback: said once, never the campaign's end
            self.failed(f"raised {describe(e)} (on a {event.get('type')!r} event)")
            return
        if kind is not None:
            self.failed(f"returned {kind} (on a {event.get('type')!r} event): it is called, never awaited")

    def failed(self, what: str) -> None:
        self.failures += 1
        self.first = self.first or what

    def report(self, warnings: list) -> None:
        """Add the one warning about the callback's failures, if it failed."""
        if self.failures:
            warnings.append(f"on_event {self.first}; {plural(self.failures, 'event')} it failed on "
                            f"in all; the campaign went on without them (fix the callback)")


def dispatch(handlers: Mapping[str, Callable[[dict], object]], event: dict, default=None):
    """Hand ``event`` to the handler of its type (``default`` for the others, if given; else a
    ``ValueError``: an event nobody declared)."""
    handler = handlers.get(event["type"], default)
    if handler is None:
        raise ValueError(f"unexpected event {event['type']!r} (handled: {', '.join(handlers)})")
    return handler(event)
