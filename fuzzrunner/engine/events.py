"""What a campaign says while it runs, and what its shards send to the process that merges them:
one vocabulary, each event a frozen dataclass of one ``kind``.

Campaign events reach ``on_event`` (the CLI's progress line, the pytest plugin, a library user):
``ProgressEvent``, ``WarningEvent``, ``FindingEvent``, ``RegressionEvent``. A shard elsewhere (a shard
process, a Ray actor) also sends its end (``ShardDone`` with its result, or ``ShardError``) and, on Ray,
its corpus writes (``CorpusSave``, ``CorpusSetAside``, ``CorpusQuarantine``: corpus_stream.py). An event
crosses processes as plain data: ``event.to_dict()`` there, ``from_dict`` here (a finding and a result as
their own dicts). Receivers dispatch through a table of handlers by class (``dispatch``), never an if/elif
chain.

For one release more an event also reads as the dict it used to be (``e["type"]``, ``e["kind"]``,
``e.get("message")``, ``e.keys()``), with one ``DeprecationWarning`` per process: read its attributes
(``e.kind``, ``e.message``) instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from ..callbacks import value_kind
from ..finding import Finding
from ..text import describe, plural
from .result import CampaignResult

PROGRESS, WARNING, FINDING, REGRESSION = "progress", "warning", "finding", "regression"
DONE, ERROR = "done", "error"
SAVE, SET_ASIDE, QUARANTINE = "corpus-save", "corpus-set-aside", "corpus-quarantine"
CORPUS_WRITES = (SAVE, SET_ASIDE, QUARANTINE)

_DICT_READ = ("reading a campaign event as a dict (e[...], e.get, e.keys) is deprecated and goes in the next "
              "release: read its attributes (e.kind, e.message, e.finding, ...; fuzzrunner.engine.events)")
_warned = False


def _said_deprecated() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(_DICT_READ, DeprecationWarning, stacklevel=3)


@dataclass(frozen=True)
class Event:
    """One event; ``kind`` names it (``"progress"``, ``"finding"``, ...) as its dict's ``type`` does."""

    kind: ClassVar[str] = ""

    def to_dict(self) -> dict:
        """The event as plain data (``{"type": kind, field: value, ...}``), fit to travel between processes."""
        return {"type": self.kind, **{f.name: _plain(getattr(self, f.name)) for f in fields(self)}}

    @staticmethod
    def from_dict(d: Mapping) -> Event:
        """The event ``to_dict`` made (a ``ValueError`` for a kind nobody declared)."""
        cls = KINDS.get(d.get("type", ""))
        if cls is None:
            raise ValueError(f"unexpected event {d.get('type')!r} (declared: {', '.join(KINDS)})")
        return cls._read(d)

    @classmethod
    def _read(cls, d: Mapping) -> Event:
        """The fields of ``d``, a finding or a result read back from its own dict (by the field's annotation)."""
        return cls(**{f.name: _READ.get(str(f.type), _same)(d[f.name]) for f in fields(cls) if f.name in d})

    # The dict these events were until they were typed: read for one release more, with a warning.
    def _old(self) -> dict:
        return {"type": self.kind, **{f.name: getattr(self, f.name) for f in fields(self)
                                      if not (f.name == "shard" and getattr(self, f.name) is None)}}

    def __getitem__(self, key: str) -> Any:
        _said_deprecated()
        return self.kind if key == "kind" else self._old()[key]

    def get(self, key: str, default: Any = None) -> Any:
        _said_deprecated()
        return self.kind if key == "kind" else self._old().get(key, default)

    def keys(self):
        _said_deprecated()
        return self._old().keys()

    def __contains__(self, key: object) -> bool:
        _said_deprecated()
        return key in self._old()

    def __iter__(self) -> Iterator[str]:
        _said_deprecated()
        return iter(self._old())


def _plain(value):
    return value.to_dict() if hasattr(value, "to_dict") else value


def _same(value):
    return value


_READ: dict[str, Callable[[Any], Any]] = {"Finding": Finding.from_dict, "CampaignResult": CampaignResult.from_dict}


@dataclass(frozen=True)
class ProgressEvent(Event):
    """Where a shard (or, merged, the campaign) stands: cases run (shrinking included), generated, findings."""
    kind: ClassVar[str] = PROGRESS
    examples: int
    generated: int
    findings: int
    elapsed: float
    shard: int


@dataclass(frozen=True)
class WarningEvent(Event):
    """Something a person should know; ``shard`` None when it is the campaign's, not one shard's."""
    kind: ClassVar[str] = WARNING
    message: str
    shard: int | None = None


@dataclass(frozen=True)
class FindingEvent(Event):
    """A new bug, found by this campaign."""
    kind: ClassVar[str] = FINDING
    finding: Finding
    shard: int


@dataclass(frozen=True)
class RegressionEvent(Event):
    """A finding of the corpus (at ``path``) that still fails."""
    kind: ClassVar[str] = REGRESSION
    finding: Finding
    path: str


@dataclass(frozen=True)
class ShardDone(Event):
    """A shard's end, with its result."""
    kind: ClassVar[str] = DONE
    result: CampaignResult


@dataclass(frozen=True)
class ShardError(Event):
    """A shard that failed outside its search."""
    kind: ClassVar[str] = ERROR
    message: str


@dataclass(frozen=True)
class CorpusSave(Event):
    """A Ray shard's finding, for the driver to save in the corpus under ``target``."""
    kind: ClassVar[str] = SAVE
    target: str
    finding: Finding


@dataclass(frozen=True)
class CorpusSetAside(Event):
    """A Ray shard's flaky finding, for the driver to set aside."""
    kind: ClassVar[str] = SET_ASIDE
    target: str
    finding: Finding


@dataclass(frozen=True)
class CorpusQuarantine(Event):
    """A corpus file a Ray shard could not read, for the driver to quarantine."""
    kind: ClassVar[str] = QUARANTINE
    path: str


KINDS: dict[str, type[Event]] = {cls.kind: cls for cls in (
    ProgressEvent, WarningEvent, FindingEvent, RegressionEvent, ShardDone, ShardError, CorpusSave, CorpusSetAside,
    CorpusQuarantine)}
CAMPAIGN_EVENTS = (ProgressEvent, WarningEvent, FindingEvent, RegressionEvent)  # what ``on_event`` gets


class Listener:
    """A user's ``on_event``, called so that it cannot end the campaign: an exception it raises is
    counted and said once, in the result's warnings (``report``); the campaign and later events go on.
    (A raising progress callback used to abort the campaign with its findings' report unwritten.)
    A ``BaseException`` (Ctrl-C in the callback) still stops the campaign, as anywhere else."""

    def __init__(self, on_event: Callable[[Event], object] | None):
        self.on_event, self.failures, self.first = on_event, 0, ""

    def __call__(self, event: Event) -> None:
        if self.on_event is None:
            return
        try:
            kind = value_kind(self.on_event(event))  # a coroutine returned: closed, and it saw nothing
        except Exception as e:  # noqa: BLE001 - the user's callback: said once, never the campaign's end
            self.failed(f"raised {describe(e)} (on a {event.kind!r} event)")
            return
        if kind is not None:
            self.failed(f"returned {kind} (on a {event.kind!r} event): it is called, never awaited")

    def failed(self, what: str) -> None:
        self.failures += 1
        self.first = self.first or what

    def report(self, warnings: list) -> None:
        """Add the one warning about the callback's failures, if it failed."""
        if self.failures:
            warnings.append(f"on_event {self.first}; {plural(self.failures, 'event')} it failed on "
                            f"in all; the campaign went on without them (fix the callback)")


def dispatch(handlers: Mapping[type, Any], event: Event, default=None):
    """Hand ``event`` to the handler of its class (``default`` for the others, if given; else a
    ``ValueError``: an event nobody declared)."""
    handler = handlers.get(type(event), default)
    if handler is None:
        handled = ", ".join(getattr(c, "kind", c.__name__) for c in handlers)
        raise ValueError(f"unexpected event {event.kind!r} (handled: {handled})")
    return handler(event)
