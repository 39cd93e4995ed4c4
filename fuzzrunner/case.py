"""A case: one generated input as plain data (target, config, faults, ops), JSON round trip.

A case replays with no Hypothesis involved. What an op means is the target's business;
this module only guarantees the shape and the schema version.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .errors import InvalidCase, NewerSchema
from .safe_io import read_text

SCHEMA = 1


def parse_json(text: str, source: str):
    """JSON of a case, finding or report file; a one-line error naming the file otherwise."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        what = e.msg.removesuffix(" at")  # json's "Invalid control character at" carries its own "at"
        raise InvalidCase(f"{source}: not valid JSON ({what} at line {e.lineno} column {e.colno}).") from None
    except (ValueError, RecursionError) as e:  # e.g. an integer of thousands of digits, or nesting too deep
        raise InvalidCase(f"{source}: not valid JSON for fuzzrunner ({str(e)[:200]}).") from None


def check_schema(d: dict, current: int, source: str, what: str, *, required: bool = True) -> int:
    """``d``'s 'schema' (1 where it may be missing and is). Only a genuine integer above ``current``
    is ``NewerSchema`` ("upgrade fuzzrunner": the file is left for the teammate who wrote it); any
    other bad value is a malformed file, an ``InvalidCase`` saying what is wrong (it is quarantined:
    a string "2" was told to upgrade, and stayed in the corpus forever)."""
    if "schema" not in d:
        if required:
            raise InvalidCase(f"{source}: missing field 'schema'; is this a fuzzrunner {what} file?")
        return 1
    schema = d["schema"]
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise InvalidCase(f"{source}: 'schema' must be an integer, got {shown(schema)}; is this a fuzzrunner "
                          f"{what} file?")
    if schema < 1:
        raise InvalidCase(f"{source}: 'schema' must be 1 or more, got {schema}.")
    if schema > current:
        raise NewerSchema(f"{source}: {what} schema {schema} is newer than this fuzzrunner understands "
                          f"({current}); upgrade fuzzrunner to read it.")
    return schema


_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
          dict: "an object", type(None): "null"}


def check_types(d: dict, fields: dict, where: str, *, required: bool = False) -> None:
    """Each of ``fields`` ({name: type or tuple of types}) that ``d`` holds has its type (a boolean is
    no integer); with ``required``, each is there. One ``InvalidCase`` line naming the field otherwise:
    a hand-edited file's wrong type read as "not a fuzzrunner finding", or loaded and broke a report."""
    for key, types in fields.items():
        if key not in d:
            if required:
                raise InvalidCase(f"{where}: missing field {key!r}; is this a fuzzrunner file?")
            continue
        value, allowed = d[key], types if isinstance(types, tuple) else (types,)
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            words = " or ".join(dict.fromkeys("a number" if t in (int, float) and float in allowed else
                                              _WORDS.get(t, t.__name__) for t in allowed))
            raise InvalidCase(f"{where}: field {key!r} must be {words}, got {shown(value)}.")


def shown(value) -> str:
    """A wrong value for a message: its type, and the value itself when short."""
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return f"{type(value).__name__} {text}" if len(text) <= 40 else type(value).__name__


@dataclass(frozen=True)
class Case:
    target: str
    config: dict
    ops: tuple
    faults: tuple = ()
    schema: int = SCHEMA

    def __post_init__(self):
        object.__setattr__(self, "ops", tuple(dict(o) for o in self.ops))
        object.__setattr__(self, "faults", tuple(self.faults))

    def to_dict(self) -> dict:
        return {"schema": self.schema, "target": self.target, "faults": list(self.faults),
                "config": dict(self.config), "ops": [dict(o) for o in self.ops]}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, d, *, source: str = "case") -> Case:
        if not isinstance(d, dict):
            raise InvalidCase(f"{source}: a case must be a JSON object, got {type(d).__name__}.")
        schema = check_schema(d, SCHEMA, source, "case")
        missing = [k for k in ("target", "config", "ops") if k not in d]
        if missing:
            raise InvalidCase(f"{source}: missing field(s) {', '.join(missing)}.")
        if not isinstance(d["target"], str) or not isinstance(d["config"], dict):
            raise InvalidCase(f"{source}: 'target' must be a string and 'config' an object.")
        ops = d["ops"]
        if not isinstance(ops, list) or not all(isinstance(o, dict) and isinstance(o.get("op"), str) for o in ops):
            raise InvalidCase(f"{source}: 'ops' must be a list of objects, each with a string 'op'.")
        faults = d.get("faults", [])
        if not isinstance(faults, list) or not all(isinstance(f, str) for f in faults):
            raise InvalidCase(f"{source}: 'faults' must be a list of fault names.")
        return cls(d["target"], d["config"], tuple(ops), tuple(faults), schema)

    @classmethod
    def from_json(cls, text: str, *, source: str = "case") -> Case:
        data = parse_json(text, source)
        if isinstance(data, dict) and ("signature" in data or "violation" in data):  # a finding file holds its case
            if "case" not in data:
                raise InvalidCase(f"{source}: a finding without its 'case'; is this a fuzzrunner finding file?")
            data = data["case"]
        return cls.from_dict(data, source=source)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Case:
        return cls.from_json(read_text(path), source=str(path))

    def size(self) -> tuple:
        """The simplicity order that decides which case a finding keeps: fewer ops, then fewer values
        in them (tokens, requests, ids: each scalar counts one), then a shorter JSON text. A stored
        case is only ever replaced by one no larger in this order (a shrink resumed from another
        start must not undo an earlier one), though Hypothesis' own order (shortlex over its
        choices) may rank two cases the other way round.
        """
        return (len(self.ops), _scalars(list(self.ops)), len(json.dumps(self.to_dict(), sort_keys=True)))


def _scalars(value) -> int:
    """How many scalar values (numbers, strings, booleans, nulls) a JSON value holds."""
    if isinstance(value, dict):
        return sum(_scalars(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_scalars(v) for v in value)
    return 1
