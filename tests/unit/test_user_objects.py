"""Issue 47 item 4: a user's object whose text cannot be had (``__str__`` raising, returning a non-string,
recursing, or megabytes long) ended the campaign: "worker failed outside the target" (exit 2, no report),
or "internal error" from ``cases()``. Every message that quotes a user's object goes through
``fuzzrunner.text``; here each place a target's objects reach is fed each hostile kind.
The campaign end to end (worker, report): tests/integration/test_api_hardening.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.coverage import features_of
from fuzzrunner.errors import HarnessError, InvalidArgument, TargetError
from fuzzrunner.execute import run_case
from fuzzrunner.target import Target, load_target
from fuzzrunner.text import describe, plural, safe_repr, safe_str, traceback_text, type_name

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import api_targets  # noqa: E402

TARGETS = Path(api_targets.__file__)
HOSTILE = sorted(api_targets.HOSTILE.items())


def spec(name: str) -> str:
    return f"{TARGETS}:{name}"


@pytest.mark.parametrize("kind, exc_class", HOSTILE)
def test_the_text_of_a_hostile_exception_never_raises_and_is_bounded(kind, exc_class):
    e = exc_class()
    for text in (safe_str(e), safe_repr(e), describe(e), traceback_text(e)):
        assert isinstance(text, str) and type(text) is str and len(text) < 5000
    assert describe(e).startswith(exc_class.__name__)
    if kind != "huge":
        assert describe(e) == f"{exc_class.__name__}: <{exc_class.__name__} object: its str() failed " \
                              f"({'TypeError' if kind == 'not-a-string' else type_name(_failure(e))})>"


def _failure(e) -> BaseException:
    try:
        str(e)
    except Exception as failure:  # noqa: BLE001
        return failure
    raise AssertionError("str() did not fail")


def test_a_str_subclass_returned_by_str_is_made_a_plain_str():
    class Sly(str):
        def __format__(self, spec):
            raise RuntimeError("formatting raised")

    class Holder:
        def __str__(self):
            return Sly("text")
    assert type(safe_str(Holder())) is str and f"{safe_str(Holder())}" == "text"


@pytest.mark.parametrize("kind, exc_class", HOSTILE)
def test_a_run_raising_a_hostile_exception_is_a_crash_finding_in_process(kind, exc_class):
    target = Target(kind, "", api_targets.cases_of(kind), api_targets.run_raising(exc_class))
    [v] = run_case(Case(kind, {}, ({"op": "x", "n": 1},), ()), target, oracles=(), device="cpu")
    assert (v.tool, v.kind, v.kernel) == ("python", "crash", exc_class.__name__)
    assert v.message.startswith(f"op 0: {exc_class.__name__}") and len(v.message) < 400
    assert exc_class.__name__ in v.details["traceback"] and len(v.details["traceback"]) <= 4000


def test_cases_raising_a_hostile_exception_is_the_targets_error_in_one_line():
    target = load_target(spec("CASES_RAISE"))
    with pytest.raises(TargetError) as e:
        target.strategy((), 4, device="cpu")
    assert str(e.value) == ("target 'cases_raise': its cases(faults, max_ops=4) raised StrRaises: <StrRaises "
                            "object: its str() failed (RuntimeError)>")


def test_features_raising_a_hostile_exception_or_giving_an_unprintable_feature_is_one_line():
    target = load_target(spec("FEATURES_RAISE"))
    case = Case(target.name, {}, ({"op": "x"},), ())
    with pytest.raises(HarnessError, match=r"features\(case\) failed: StrRecurses: <StrRecurses object: its str\(\) "
                                           r"failed \(RecursionError\)>"):
        features_of(target.features, case, target.name)
    target = load_target(spec("UNPRINTABLE_FEATURES"))
    with pytest.raises(HarnessError, match=r"got <Unprintable object: its repr\(\) failed \(RuntimeError\)>"):
        features_of(target.features, case, target.name)


def test_a_strategy_drawing_a_case_that_is_not_json_stops_before_hypothesis_formats_it():
    from hypothesis import find

    from fuzzrunner.target import DrawError, draw_error
    target = load_target(spec("UNPRINTABLE_VALUES"))
    with pytest.raises(DrawError) as e:
        find(target.strategy((), 4, device="cpu"), lambda c: True)
    assert "its strategy drew a case that is not plain JSON data (TypeError: Object of type Unprintable is not " \
           "JSON serializable)" in str(draw_error(target.name, e.value))


@pytest.mark.parametrize("name", ["MISUSES_OP", "SWALLOWS_OP_MISUSE"])
def test_ctx_op_given_no_op_dict_is_the_targets_error_even_where_run_catches_it(name):
    target = load_target(spec(name))
    with pytest.raises(TargetError, match=r"its run called ctx\.op\(.*\): ctx\.op takes the op's index"):
        run_case(Case(target.name, {}, ({"op": "x"},), ()), target, oracles=(), device="cpu")


def test_names_labels_problems_and_details_a_target_hands_over_are_made_plain_text_and_json():
    """A buffer's or kernel's name, a result's label, a state problem and its details: each quoted in
    violations that travel from the worker as JSON and end in reports."""
    import json
    target = load_target(spec("REPORTS_UNPRINTABLES"))
    violations = run_case(Case(target.name, {}, ({"op": "x"},), ()), target, device="cpu")
    state = [v for v in violations if v.kind == "state-violation"]
    unprintable, one = state  # one violation per label (the log keeps a signature's first)
    assert unprintable.message.endswith(": <StrRaises object: its str() failed (RuntimeError)>")
    assert one.message.endswith("one problem: broken")
    assert state[0].tensor == "<Unprintable object: its str() failed (RuntimeError)>"
    assert state[0].details["x"] == "<Unprintable object: its repr() failed (RuntimeError)>"
    json.dumps([v.to_dict() for v in violations])  # what the worker sends and the reports write
    assert all(v.kind in ("state-violation",) for v in violations), [v.message for v in violations]


def test_a_violation_of_a_plug_in_with_objects_for_names_and_details_still_travels_as_json():
    import json

    from fuzzrunner.violation import Violation
    v = Violation("state", "state-violation", api_targets.Unprintable(), 7, "t", "m",
                  {"ok": [1, "a"], 2: {"deep": api_targets.Unprintable()}})
    assert v.kernel == "<Unprintable object: its str() failed (RuntimeError)>" and v.location == "7"
    assert json.loads(json.dumps(v.to_dict()))["details"]["2"] == {
        "deep": "<Unprintable object: its repr() failed (RuntimeError)>"}
    plain = {"ok": [1, "a"]}
    assert Violation("state", "state-violation", "k", "", "t", "m", plain).details is plain  # no copy when plain


@pytest.mark.parametrize("fields, says", [
    ({"name": api_targets.Unprintable()}, "Target(name=<Unprintable object: its repr() failed (RuntimeError)>): "
                                          "the name must be a non-empty string."),
    ({"name": ""}, "Target(name=''): the name must be a non-empty string."),
    ({"description": 3}, "Target(description=3): the description must be a string."),
    ({"faults": ("ok", api_targets.Unprintable())}, "Target 't': faults: item 1 is Unprintable (<Unprintable "
                                                    "object: its repr() failed (RuntimeError)>); each must be a name "
                                                    "(a string)."),
    ({"run": 3}, "Target 't': run must be a function, not int.")])
def test_a_targets_names_are_strings_checked_when_it_is_made(fields, says):
    values = {"name": "t", "description": "", "cases": api_targets.cases_of("t"), "run": api_targets.run_ok,
              **fields}
    with pytest.raises(InvalidArgument) as e:
        Target(**values)
    assert str(e.value) == says


def test_an_unknown_fault_that_cannot_be_printed_is_named_safely():
    target = load_target(spec("GENERATOR_FEATURES"))
    with pytest.raises(InvalidArgument, match=r"faults: item 0 is Unprintable"):
        target.check_faults([api_targets.Unprintable()])


# -- counts ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, noun, text", [(0, "case", "0 cases"), (1, "case", "1 case"), (2, "case", "2 cases"),
                                           (1, "finding", "1 finding"), (3, "worker recycle", "3 worker recycles")])
def test_plural(n, noun, text):
    assert plural(n, noun) == text
