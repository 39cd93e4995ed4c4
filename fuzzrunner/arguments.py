"""The public API's arguments, checked where they enter: one line naming the value, the rule, the fix.

A parameter that takes several names (``faults=``, ``oracles=``, a ``Target``'s ``faults``,
``feature_space``, ``details``, ``own_code``) takes one name as one item: ``faults="x"`` is
``("x",)``. Python would iterate a string per character (``unknown fault 'd'`` for
``faults="dummy_run_skips_mapping"``; ``own_code="adapter.py"`` silently named nothing), and no
one means that.
"""

from __future__ import annotations

import os

from .errors import InvalidArgument
from .text import safe_repr, type_name


def several(value, what: str, *, paths: bool = False) -> tuple:
    """``value`` as a tuple of strings (``paths``: of strings or ``os.PathLike``, made strings): one
    string (or path) is one item, None is none. Anything else is an ``InvalidArgument``."""
    if value is None:
        return ()
    if isinstance(value, str) or (paths and isinstance(value, os.PathLike)):
        value = (value,)
    items = None if isinstance(value, (bytes, dict)) else _items(value)
    if items is None:
        raise InvalidArgument(f"{what}={safe_repr(value, 100)} must be a {'path' if paths else 'name'} or a list of "
                              f"them (strings), not {type_name(value)}.")
    for i, item in enumerate(items):
        if not (isinstance(item, str) or (paths and isinstance(item, os.PathLike))):
            raise InvalidArgument(f"{what}: item {i} is {type_name(item)} ({safe_repr(item, 100)}); each must be a "
                                  f"{'path' if paths else 'name'} (a string).")
    return tuple(os.fspath(i) for i in items) if paths else items


def _items(value) -> tuple | None:
    try:
        return tuple(value)
    except Exception:  # noqa: BLE001 - not iterable, or its iterator raised: not a list of names
        return None


def kind_of(value, allowed: tuple, what: str, rule: str) -> None:
    """``InvalidArgument`` unless ``value`` is an instance of one of ``allowed``."""
    if not isinstance(value, allowed):
        raise InvalidArgument(f"{what}={safe_repr(value, 100)} is {type_name(value)}: {rule}.")
