"""An oracle that raises in its ``start`` or ``finish`` (fuzzrunner/execute.py): the tool's failure is named as a
tool limitation, never a finding of the runner; nothing it had installed is left for the next case; and the
other oracles are finished all the same."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from hypothesis import strategies as st

import fuzzrunner  # noqa: F401  (interpreter mode before Triton loads)
from fuzzrunner import names, tracking
from fuzzrunner.case import Case
from fuzzrunner.context import Context
from fuzzrunner.execute import run_case
from fuzzrunner.oracles.base import Oracle
from fuzzrunner.oracles.shadow.threads import ThreadCoverage
from fuzzrunner.target import Target


def run(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if op["op"] != "clean":
                ctx.track(torch.empty(4), op["op"], initialized=False).sum()  # a read of never-written memory
            else:
                torch.ones(4).sum()


TARGET = Target("reads", "reads of never-written buffers named by the op",
                lambda faults=(), *, max_ops=4: st.just(Case("reads", {}, ())), run)
CASE = Case("reads", {}, ({"op": "clean"}, {"op": "bad"}))


def _installed() -> dict:
    """Everything an oracle's start changes in the process, by identity."""
    from torch.utils._python_dispatch import _len_torch_dispatch_stack
    from triton.runtime import interpreter as itp

    from fuzzrunner.oracles.shadow.gpu import dispatch_filter
    from fuzzrunner.oracles.shadow.gpu.launch_hook import _classes
    filt = dispatch_filter.get()
    return {"modes": _len_torch_dispatch_stack(), "watchers": list(tracking._watchers),
            "submit": ThreadPoolExecutor.submit, "thread start": threading.Thread.start,
            "storage new": torch.UntypedStorage.__dict__.get("__new__"),
            "masked load": itp.interpreter_builder.create_masked_load, "grid call": itp.GridExecutor.__call__,
            "launch": [c.run for c in _classes()], "numpy": torch.Tensor.numpy,
            "filter owner": dispatch_filter._OWNER[0], "filter key": filt.included() if filt is not None else None}


def _planted(*args, **kwargs):
    if args[1:2] == (None,):  # ``mirror_to(None)``: the undoing, which works
        return None
    raise RuntimeError("planted: an install step of the oracle's failed")


def _failing_step(shadow: str, step: str):
    """(object, attribute) of the start step planted to fail."""
    from fuzzrunner.oracles.shadow.gpu.regions import DeviceShadow
    from fuzzrunner.oracles.shadow.gpu.torch_mode import DeviceTorchMode
    from fuzzrunner.oracles.shadow.torch_hook import TorchShadowMode
    return {"threads": (ThreadCoverage, "install"),  # the last step of either mode's start
            "mode": (DeviceTorchMode if shadow == "device" else TorchShadowMode, "__enter__"),
            "filter": (DeviceShadow, "mirror_to")}[step]  # (the device mode's filter, once claimed)


@pytest.mark.parametrize("shadow, step", [*(pytest.param("device", step, marks=pytest.mark.interpreter)
                                            for step in ("threads", "mode", "filter")),
                                          ("cpu", "threads"), ("cpu", "mode")])
def test_a_shadow_oracle_whose_start_raises_halfway_is_a_tool_limitation_and_leaves_nothing_installed(
        shadow, step, monkeypatch):
    from fuzzrunner.oracles.shadow.gpu import dispatch_filter
    context = Context.of("cpu", shadow=shadow)
    if step == "filter" and dispatch_filter.get() is None:
        pytest.skip(f"the dispatch filter cannot be built here: {dispatch_filter.status()}")
    before = _installed()
    baseline = run_case(CASE, TARGET, oracles=["shadow"], context=context)
    assert {(v.kind, v.tensor) for v in baseline} == {("uninitialized-read", "bad")}
    with monkeypatch.context() as m:
        m.setattr(*_failing_step(shadow, step), _planted)
        vs = run_case(CASE, TARGET, oracles=["shadow"], context=context)
    assert [(v.tool, v.kind, v.kernel) for v in vs] == [("fuzzrunner", "tool-limitation", "shadow")]
    assert "failed at its start" in vs[0].message and "planted" in vs[0].message
    assert "not a bug of the code under test (the case did not run)" in vs[0].message
    assert _installed() == before  # the mode, the watch, the hooks and the filter: all undone
    assert run_case(CASE, TARGET, oracles=["shadow"], context=context) == baseline  # the next case as before


class _FailsAtFinish(Oracle):
    name = "fails_at_finish"

    def finish(self):
        raise ValueError("planted: this oracle's finish failed")


def test_an_oracle_whose_finish_raises_is_named_and_the_others_are_still_finished(monkeypatch):
    """Started after the shadow oracle, it finishes first: its failure must not keep the shadow oracle's
    hooks installed, nor lose the shadow's report."""
    monkeypatch.setitem(names.ORACLES, "fails_at_finish", names.OracleSpec("fails_at_finish",
                                                                            f"{__name__}:_FailsAtFinish"))
    before = _installed()
    vs = run_case(CASE, TARGET, oracles=["shadow", "fails_at_finish"], device="cpu")
    assert sorted((v.tool, v.kind, v.kernel if v.tool == "fuzzrunner" else v.tensor) for v in vs) == [
        ("fuzzrunner", "tool-limitation", "fails_at_finish"), ("shadow", "uninitialized-read", "bad")]
    limit = next(v for v in vs if v.kind == "tool-limitation")
    assert "failed at its finish" in limit.message and limit.details["op_index"] == 1
    assert _installed() == before


@pytest.mark.interpreter
def test_a_device_shadow_whose_last_read_back_raises_still_uninstalls_everything(monkeypatch):
    """The device mode's ``finish`` reads the ring and the log back first: a failure there (not a kernel's
    device fault: the tool's) is named, and the hooks are undone all the same."""
    import sys

    from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
    real = GpuShadowOracle._collect

    def collect(self):
        if sys._getframe(1).f_code.co_name == "_read_back":  # finish's (core/base.py)
            raise RuntimeError("planted: the last read-back failed")
        return real(self)
    before = _installed()
    monkeypatch.setattr(GpuShadowOracle, "_collect", collect)
    vs = run_case(CASE, TARGET, oracles=["shadow"], context=Context.of("cpu", shadow="device"))
    assert [(v.tool, v.kind, v.kernel if v.tool == "fuzzrunner" else v.tensor) for v in vs] == [
        ("fuzzrunner", "tool-limitation", "shadow"), ("shadow", "uninitialized-read", "bad")]  # op 1's, kept
    assert "failed at its finish" in vs[0].message
    assert _installed() == before


class _FailsAtStart(Oracle):
    name = "fails_at_start"

    def start(self):
        raise RuntimeError("planted: this oracle's start failed")


def test_a_start_failure_in_one_run_of_a_two_run_oracle_is_no_divergence(monkeypatch):
    """The poison oracle compares two runs; the second runs poison (and its guards) alone, so a plug-in
    oracle that fails at its start fails in the first run only: the case did not run there, and nothing is
    compared (a comparison once reported 'only the run under pattern A failed': a finding of the tool's
    failure)."""
    monkeypatch.setitem(names.ORACLES, "fails_at_start", names.OracleSpec("fails_at_start",
                                                                          f"{__name__}:_FailsAtStart"))
    vs = run_case(CASE, TARGET, oracles=["poison", "fails_at_start"], device="cpu")
    assert [(v.tool, v.kind, v.kernel) for v in vs] == [("fuzzrunner", "tool-limitation", "fails_at_start")]


class _InterruptedAtFinish(Oracle):
    name = "interrupted_at_finish"

    def finish(self):
        raise KeyboardInterrupt


def test_a_ctrl_c_in_one_oracles_finish_still_finishes_the_others_then_stops(monkeypatch):
    monkeypatch.setitem(names.ORACLES, "interrupted_at_finish", names.OracleSpec(
        "interrupted_at_finish", f"{__name__}:_InterruptedAtFinish"))
    before = _installed()
    with pytest.raises(KeyboardInterrupt):
        run_case(CASE, TARGET, oracles=["shadow", "interrupted_at_finish"], device="cpu")
    assert _installed() == before  # the shadow oracle, started first, finished after it
