"""The one way fuzzrunner turns a user's object into text: it never raises, and it is bounded.

A target's exception may have a ``__str__`` that raises, returns a non-string, recurses or returns
megabytes; so may a fault name, a feature, a value in a case or a plug-in oracle's error. Every
message that quotes one goes through here: formatting a user's object must never end a campaign
(before this, such an exception was "worker failed outside the target": exit 2, no report).
Also the one spelling of a count with its noun (``plural``: "1 case", "2 cases").

Standard library only: every layer may use it.
"""

from __future__ import annotations

import traceback

LIMIT = 2000           # characters of one object's text kept (a huge __str__ is cut, not echoed)
TRACEBACK_LIMIT = 4000  # characters of a traceback kept (its end: the line that raised)


def type_name(obj) -> str:
    """The name of ``obj``'s class (a metaclass may make ``__name__`` anything)."""
    try:
        name = type(obj).__name__
        return _plain(name) if isinstance(name, str) else "?"
    except Exception:  # noqa: BLE001 - a hostile metaclass
        return "?"


def safe_str(obj, limit: int = LIMIT) -> str:
    """``str(obj)``, or a note saying why it failed; cut to ``limit`` characters."""
    return _guarded(str, obj, "str", limit)


def safe_repr(obj, limit: int = LIMIT) -> str:
    """``repr(obj)``, or a note saying why it failed; cut to ``limit`` characters."""
    return _guarded(repr, obj, "repr", limit)


def describe(exc: BaseException, limit: int = 300) -> str:
    """``"TypeName: first line of its text"`` (``"TypeName"`` when the text is empty), at most
    ``limit`` characters of text: what one-line messages say of an exception."""
    text = safe_str(exc, max(limit, 1) * 4).strip()
    first = text.splitlines()[0][:limit] if text else ""
    return f"{type_name(exc)}: {first}" if first else type_name(exc)


def traceback_text(exc: BaseException, limit: int = TRACEBACK_LIMIT) -> str:
    """``exc``'s traceback (its chain included), its last ``limit`` characters; never raises."""
    try:  # each piece cut on its own: a megabyte message must not push the frames out of the kept tail
        text = "".join(_cut(part, limit // 4) for part in traceback.TracebackException.from_exception(exc).format())
    except Exception as e:  # noqa: BLE001 - a hostile __notes__, __cause__ or traceback
        text = f"{describe(exc)}\n(the traceback could not be formatted: {type_name(e)})\n"
    return text[-limit:]


def json_safe(value, depth: int = 32):
    """``value`` if it is plain JSON data (what a violation's details and a report hold), else a copy in
    which every other object is its ``safe_repr`` and every key a string: a target's or plug-in's
    object in a violation's details could not travel from the worker, nor be written in a report."""
    if _plain_json(value, depth):
        return value
    if depth <= 0:
        return safe_repr(value, 200)
    if isinstance(value, dict):
        return {k if isinstance(k, str) else safe_str(k, 200): json_safe(v, depth - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, depth - 1) for v in value]
    return safe_repr(value, 200)


def _plain_json(value, depth: int) -> bool:
    if value is None or type(value) in (str, int, float, bool):
        return True
    if depth <= 0:
        return False
    if type(value) is dict:
        return all(type(k) is str and _plain_json(v, depth - 1) for k, v in value.items())
    if type(value) in (list, tuple):
        return all(_plain_json(v, depth - 1) for v in value)
    return False


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``"1 case"``, ``"2 cases"``, ``"0 findings"``: a count with its noun, in the right number."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def aligned(rows, gap: int = 2) -> list[str]:
    """``(name, text)`` rows as lines whose texts start in one column: after the longest name and ``gap`` spaces (a
    fixed width let a longer name push its text out of line: ``fuzzrunner faults`` past 28 characters)."""
    rows = list(rows)
    width = max((len(name) for name, _ in rows), default=0) + gap
    return [f"{name:{width}}{text}".rstrip() for name, text in rows]


def _guarded(convert, obj, what: str, limit: int) -> str:
    try:
        text = convert(obj)
    except Exception as e:  # noqa: BLE001 - __str__/__repr__ raising, returning a non-string, recursing
        return f"<{type_name(obj)} object: its {what}() failed ({type_name(e)})>"
    return _cut(_plain(text), limit, end="")


def _cut(text: str, limit: int, end: str = "\n") -> str:
    return text if len(text) <= limit else f"{text[:limit]}...[{len(text) - limit} more characters]{end}"


def _plain(text: str) -> str:
    """An exact ``str``: a subclass returned by ``__str__`` may override formatting itself."""
    return text if type(text) is str else "".join(("", text))
