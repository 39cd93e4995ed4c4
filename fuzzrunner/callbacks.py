"""A target's callbacks (``run``, ``cases``, ``features``) are plain functions: the one check of that.

A ``run`` written as a generator function or ``async def`` returns a generator or coroutine without
running a line of its body: every case "passed" and a campaign reported 0 findings of code it never
ran (issue 47). fuzzrunner does not drive event loops or iterate a ``run``: such a callback is the
target's error, said at load where the function's kind shows it (``refuse_async``), and otherwise
when its value comes back (``refuse_awaitable``: a callable object whose ``__call__`` is ``async``,
a function that returns a coroutine).

Standard library only (coverage.py, which checks ``features``, is).
"""

from __future__ import annotations

import inspect

from .errors import TargetError
from .text import type_name

# what each callback must do, and what one that only returns a generator or coroutine does instead
RULES = {"run": ("run(case, ctx) must run the case and return None", "no line of the case would run"),
         "cases": ("cases(faults, *, max_ops) must return a Hypothesis strategy", "it would make no strategy"),
         "features": ("features(case) must return an iterable of strings", "it would name no feature")}


_FUNCTION_KINDS = ((inspect.isasyncgenfunction, "an async generator function"),
                   (inspect.iscoroutinefunction, "an async def"), (inspect.isgeneratorfunction, "a generator function"))
_VALUE_KINDS = ((inspect.isgenerator, "a generator"), (inspect.iscoroutine, "a coroutine"),
                (inspect.isasyncgen, "an async generator"), (inspect.isawaitable, "an awaitable"))


def function_kind(fn) -> str | None:
    """'a generator function', 'an async def', 'an async generator function' (looked up on a callable
    object's ``__call__`` too), or None for a plain callable."""
    call = None if inspect.isroutine(fn) else inspect.getattr_static(type(fn), "__call__", None)
    return next((kind for f in (fn, call) if f is not None for test, kind in _FUNCTION_KINDS if test(f)), None)


def value_kind(value) -> str | None:
    """'a generator', 'a coroutine', 'an async generator', 'an awaitable': what a plain function must not
    return in place of doing its work; None for anything else. One that can be closed is closed: no
    "coroutine ... was never awaited" warning follows the error that names it."""
    kind = next((kind for test, kind in _VALUE_KINDS if test(value)), None)
    if kind in ("a generator", "a coroutine"):
        value.close()
    return kind


def refuse_async(target_name: str, role: str, fn, *, generators: bool = True) -> None:
    """``TargetError`` if callback ``role`` of the target is a generator function or ``async def``
    (``generators=False``: a generator function is allowed, as ``features`` may yield its strings)."""
    kind = function_kind(fn)
    if kind is None or (not generators and kind == "a generator function"):
        return
    fix = ("a plain function that runs its loop itself instead of yielding" if kind == "a generator function"
           else "a plain function that runs what it awaits to its end itself (asyncio.run(...))")
    raise TargetError(_message(target_name, role, f"is {kind}", f"Make {role} {fix}."))


def refuse_awaitable(target_name: str, role: str, value, *, generators: bool = True) -> None:
    """``TargetError`` if callback ``role`` returned a generator, coroutine or other awaitable (closed)."""
    if not generators and inspect.isgenerator(value):
        return
    kind = value_kind(value)
    if kind is None:
        return
    what = f"returned {kind}" + (f" ({type_name(value)})" if kind == "an awaitable" else "")
    fix = ("run its loop to the end instead of returning a generator" if kind == "a generator"
           else "run what it awaits to its end inside it (asyncio.run(...)) instead of returning it")
    raise TargetError(_message(target_name, role, what, f"Let {role} {fix}."))


def _message(target_name: str, role: str, what: str, fix: str) -> str:
    rule, consequence = RULES[role]
    return f"target {target_name!r}: its {role} {what}, so {consequence}: {rule}. {fix}"
