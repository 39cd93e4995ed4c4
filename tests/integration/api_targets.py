"""Targets for test_api_hardening.py and the unit tests of issue 47's items 2, 4 and 10, each broken in
one way a user's target can be. Loaded as FILE.py:OBJ, as a user's target is.
"""

import asyncio

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.target import Target


def cases_of(name):
    def cases(faults=(), *, max_ops=5):
        return st.integers(0, 9).map(lambda n: Case(name, {}, ({"op": "x", "n": n},), tuple(faults)))
    return cases


def run_ok(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            pass


# -- item 2: a run that runs nothing ----------------------------------------------------------------

def run_generator(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            raise ValueError("the body of a generator function never runs")
    yield


async def run_async(case, ctx):
    raise ValueError("the body of an async def never runs unless awaited")


class AsyncCall:
    async def __call__(self, case, ctx):
        raise ValueError("never awaited")


def run_returns_coroutine(case, ctx):
    return asyncio.sleep(0)  # a plain function: only its value shows it


class ReturnsCoroutine:
    def __call__(self, case, ctx):
        return asyncio.sleep(0)


def run_returns_generator(case, ctx):
    return (op for op in case.ops)


async def async_cases(faults=(), *, max_ops=5):
    return cases_of("async_cases")(faults, max_ops=max_ops)


async def make_case(n):
    return Case("draws_coroutines", {}, ({"op": "x", "n": n},), ())


def cases_drawing_coroutines(faults=(), *, max_ops=5):
    return st.builds(make_case, st.integers(0, 9))


async def async_features(case):
    return ["x"]


def features_returning_coroutine(case):
    return asyncio.sleep(0)


def features_generator(case):  # a generator of strings is a fine iterable of features
    yield f"n={case.ops[0]['n'] % 2}"


async def make_target():
    return Target("from_async_factory", "", cases_of("from_async_factory"), run_ok)


ASYNC_FACTORY = make_target
GENERATOR = Target("generator", "run is a generator function", cases_of("generator"), run_generator)
ASYNC = Target("async", "run is an async def", cases_of("async"), run_async)
ASYNC_CALL = Target("async_call", "run is an object with an async __call__", cases_of("async_call"), AsyncCall())
RETURNS_COROUTINE = Target("returns_coroutine", "run returns a coroutine", cases_of("returns_coroutine"),
                           run_returns_coroutine)
CALL_RETURNS_COROUTINE = Target("call_returns_coroutine", "run's __call__ returns a coroutine",
                                cases_of("call_returns_coroutine"), ReturnsCoroutine())
RETURNS_GENERATOR = Target("returns_generator", "run returns a generator", cases_of("returns_generator"),
                           run_returns_generator)
ASYNC_CASES = Target("async_cases", "cases is an async def", async_cases, run_ok)
DRAWS_COROUTINES = Target("draws_coroutines", "its strategy draws coroutines", cases_drawing_coroutines, run_ok)
ASYNC_FEATURES = Target("async_features", "features is an async def", cases_of("async_features"), run_ok,
                        features=async_features)
FEATURES_RETURN_COROUTINE = Target("features_return_coroutine", "features returns a coroutine",
                                   cases_of("features_return_coroutine"), run_ok,
                                   features=features_returning_coroutine)
GENERATOR_FEATURES = Target("generator_features", "features is a generator of strings (allowed)",
                            cases_of("generator_features"), run_ok, features=features_generator,
                            feature_space=("n=0", "n=1"))


# -- item 4: objects whose text cannot be had --------------------------------------------------------

class StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("__str__ raised")

    def __repr__(self):
        raise RuntimeError("__repr__ raised")


class StrNotAString(Exception):
    def __str__(self):
        return 42  # type: ignore[return-value]


class StrRecurses(Exception):
    def __str__(self):
        return str(self)


class StrHuge(Exception):
    def __str__(self):
        return "x" * 5_000_000


HOSTILE = {"raises": StrRaises, "not-a-string": StrNotAString, "recurses": StrRecurses, "huge": StrHuge}


def run_raising(exc_class):
    def run(case, ctx):
        for i, op in enumerate(case.ops):
            with ctx.op(i, op):
                raise exc_class()
    return run


def cases_raising(faults=(), *, max_ops=5):
    raise StrRaises()


def features_raising(case):
    raise StrRecurses()


class Unprintable:
    def __repr__(self):
        raise RuntimeError("__repr__ raised")

    __str__ = __repr__


def features_unprintable(case):
    return [Unprintable()]


def cases_with_unprintable_values(faults=(), *, max_ops=5):
    return st.integers(0, 9).map(lambda n: Case("unprintable_values", {"x": Unprintable()}, ({"op": "x"},), ()))


def run_misusing_op(case, ctx):
    with ctx.op("first", Unprintable()):
        pass


def run_swallowing_op_misuse(case, ctx):
    try:
        with ctx.op(0, "not a dict"):
            pass
    except Exception:
        pass  # a run that catches everything still cannot hide the misuse


def run_reporting_unprintables(case, ctx):
    """Names, labels, problems and details a target hands fuzzrunner, each an object that cannot be printed."""
    import torch

    import fuzzrunner
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            buf = fuzzrunner.track(torch.zeros(4), Unprintable(), per_step=True)
            fuzzrunner.kernel_launch(Unprintable(), where=Unprintable())
            ctx.output(Unprintable(), buf + 1)
            ctx.check(Unprintable(), [StrRaises(), "a plain problem"], {"x": Unprintable(), 3: (Unprintable(),)})
            ctx.check("one problem", "broken")  # one string is one problem, not six


STR_RAISES = Target("str_raises", "raises an exception whose __str__ raises", cases_of("str_raises"),
                    run_raising(StrRaises))
CASES_RAISE = Target("cases_raise", "cases() raises an exception whose __str__ raises", cases_raising, run_ok)
FEATURES_RAISE = Target("features_raise", "features raises an exception whose __str__ recurses",
                        cases_of("features_raise"), run_ok, features=features_raising)
UNPRINTABLE_FEATURES = Target("unprintable_features", "features gives an object whose repr raises",
                              cases_of("unprintable_features"), run_ok, features=features_unprintable)
REPORTS_UNPRINTABLES = Target("reports_unprintables", "hands fuzzrunner names and details that cannot be printed",
                              cases_of("reports_unprintables"), run_reporting_unprintables)
UNPRINTABLE_VALUES = Target("unprintable_values", "its cases hold an object that is not JSON",
                            cases_with_unprintable_values, run_ok)
MISUSES_OP = Target("misuses_op", "calls ctx.op with a name and a non-dict", cases_of("misuses_op"),
                    run_misusing_op)
SWALLOWS_OP_MISUSE = Target("swallows_op_misuse", "catches what ctx.op raised", cases_of("swallows_op_misuse"),
                            run_swallowing_op_misuse)


# -- item 10: a user's target named like a built-in one -------------------------------------------------

def run_crashes(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            raise RuntimeError("the namesake's own bug")


NAMESAKE = Target("reference_runner", "a user's target that took a built-in name",
                  cases_of("reference_runner"), run_crashes)
