"""Issue 47 item 2: a target's ``run`` (or ``cases``, ``features``) that is a generator function or
``async def`` ran nothing of a case, and the campaign passed with "0 findings". It is the target's
error: at load where the function's kind shows it, else when its value comes back (callbacks.py).
The campaign end to end: tests/integration/test_api_hardening.py.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.coverage import features_of
from fuzzrunner.errors import TargetError
from fuzzrunner.execute import run_case
from fuzzrunner.target import load_target

TARGETS = Path(__file__).resolve().parents[1] / "integration" / "api_targets.py"


def spec(name: str) -> str:
    return f"{TARGETS}:{name}"


def _case(target) -> Case:
    return Case(target.name, {}, ({"op": "x", "n": 1},), ())


@pytest.mark.parametrize("name, role, kind", [
    ("GENERATOR", "run", "a generator function"), ("ASYNC", "run", "an async def"),
    ("ASYNC_CALL", "run", "an async def"), ("ASYNC_CASES", "cases", "an async def"),
    ("ASYNC_FEATURES", "features", "an async def")])
def test_an_async_or_generator_callback_is_refused_when_the_target_loads(name, role, kind):
    with pytest.raises(TargetError) as e:
        load_target(spec(name))
    message = str(e.value)
    assert f"its {role} is {kind}" in message and "\n" not in message
    assert message.startswith("target '") and f"Make {role} a plain function" in message


@pytest.mark.parametrize("name, kind", [("RETURNS_COROUTINE", "a coroutine"),
                                        ("CALL_RETURNS_COROUTINE", "a coroutine"),
                                        ("RETURNS_GENERATOR", "a generator")])
def test_a_run_returning_a_coroutine_or_generator_is_a_target_error_not_a_pass(name, kind):
    target = load_target(spec(name))  # plain functions: only the value they return shows it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the coroutine is closed: no "was never awaited" warning after the error
        with pytest.raises(TargetError) as e:
            run_case(_case(target), target, device="cpu")
    assert f"its run returned {kind}, so no line of the case would run" in str(e.value)


def test_the_oracles_are_finished_when_run_returned_a_coroutine():
    """The shadow oracle's hooks are undone: the next case of the process runs unhooked as usual."""
    from fuzzrunner import tracking
    target = load_target(spec("RETURNS_COROUTINE"))
    watchers = list(tracking._watchers)
    with pytest.raises(TargetError):
        run_case(_case(target), target, device="cpu")
    assert tracking._watchers == watchers
    ok = load_target(spec("GENERATOR_FEATURES"))
    assert run_case(_case(ok), ok, device="cpu") == []


def test_a_strategy_drawing_coroutines_stops_at_the_first_draw_with_the_targets_error():
    from hypothesis import find

    from fuzzrunner.target import DrawError, draw_error
    target = load_target(spec("DRAWS_COROUTINES"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DrawError) as e:
            find(target.strategy((), 4, device="cpu"), lambda c: True)
    assert str(draw_error(target.name, e.value)) == (
        "target 'draws_coroutines': its strategy drew a coroutine (coroutine), not a Case: build cases with "
        "plain functions (an async function given to st.builds or .map makes coroutines).")


def test_features_returning_a_coroutine_is_the_targets_error_and_a_generator_of_strings_is_fine():
    bad = load_target(spec("FEATURES_RETURN_COROUTINE"))
    with pytest.raises(TargetError, match="its features returned a coroutine"):
        features_of(bad.features, _case(bad), bad.name)
    good = load_target(spec("GENERATOR_FEATURES"))
    assert features_of(good.features, _case(good), good.name) == ("n=1",)


def test_an_async_target_factory_is_refused_without_calling_it():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TargetError, match=r"target factory '.*:ASYNC_FACTORY' is an async def: a factory must be "
                                              r"a plain function"):
            load_target(spec("ASYNC_FACTORY"))


def test_an_async_on_event_is_refused_and_one_returning_a_coroutine_is_said_once(monkeypatch):
    import fuzzrunner
    from fuzzrunner import api
    from fuzzrunner.engine.events import Listener, ProgressEvent
    from fuzzrunner.errors import InvalidArgument
    monkeypatch.setattr(api, "run_campaign", lambda *a, **k: None)

    async def on_event(event):
        pass
    with pytest.raises(InvalidArgument, match=r"fuzz\(on_event\) is an async def: it would see no event"):
        fuzzrunner.fuzz("reference_runner", on_event=on_event)
    listener, warnings_said = Listener(lambda e: on_event(e)), []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        listener(ProgressEvent(1, 1, 0, 0.1, 0))
        listener(ProgressEvent(2, 2, 0, 0.2, 0))
    listener.report(warnings_said)
    assert warnings_said == ["on_event returned a coroutine (on a 'progress' event): it is called, never awaited; "
                             "2 events it failed on in all; the campaign went on without them (fix the callback)"]
