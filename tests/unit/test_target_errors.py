"""A target's own adapter code raising is a target error (tool "target"), never a finding of the code under test.

``Target.own_code`` names the target's own files or folders; ``execute.crash_violation`` looks at the line
that raised (the innermost frame). The code under test here is ``under_test`` (this file's helper module
stands outside ``own_code`` by being a different file); device errors that surface in own code are not
the target's.
"""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from fuzzrunner.case import Case
from fuzzrunner.execute import run_case
from fuzzrunner.target import Target


@pytest.fixture()
def code_under_test(tmp_path):
    """A module outside the target's own code: what the target drives."""
    (tmp_path / "under_test_mod.py").write_text(textwrap.dedent("""
        def fails():
            raise ValueError("the code under test broke")
        def returns_int():
            return 3
    """))
    sys.path.insert(0, str(tmp_path))
    import under_test_mod
    yield under_test_mod
    sys.path.remove(str(tmp_path))
    sys.modules.pop("under_test_mod", None)


THIS_FILE = (os.path.abspath(__file__),)


def _target(run, own=THIS_FILE) -> Target:
    return Target(name="t", description="", cases=lambda *a, **k: None, run=run, own_code=own)


def _violation(target):
    vs = run_case(Case("t", {}, ({"op": "x"},), ()), target, oracles=(), device="cpu")
    assert len(vs) == 1
    return vs[0]


def _run_calling(fn):
    def run(case, ctx):
        with ctx.op(0, case.ops[0]):
            fn()
    return run


def test_own_line_raising_is_a_target_error(code_under_test):
    def adapter():
        code_under_test.returns_int().item()  # the 0.16.0 crash: the release returns an int, ours calls .item()
    v = _violation(_target(_run_calling(adapter)))
    assert (v.tool, v.kind, v.kernel) == ("target", "crash", "AttributeError")
    assert v.message.startswith("target error: op 0: AttributeError")
    assert v.location.endswith(f"{os.path.basename(__file__)}:{adapter.__code__.co_firstlineno + 1}")


def test_code_under_test_raising_is_a_finding(code_under_test):
    v = _violation(_target(_run_calling(code_under_test.fails)))
    assert (v.tool, v.kernel) == ("python", "ValueError")
    assert not v.message.startswith("target error")


def test_device_error_surfacing_in_own_code_is_a_finding():
    def adapter():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    assert _violation(_target(_run_calling(adapter))).tool == "python"


def test_without_own_code_every_crash_is_a_finding():
    def adapter():
        raise KeyError("x")
    assert _violation(_target(_run_calling(adapter), own=())).tool == "python"


def test_own_code_may_name_a_folder(code_under_test):
    def adapter():
        raise TypeError("wrong arguments")
    v = _violation(_target(_run_calling(adapter), own=(os.path.dirname(os.path.abspath(__file__)),)))
    assert v.tool == "target"
