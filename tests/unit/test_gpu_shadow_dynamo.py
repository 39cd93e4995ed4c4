"""The device mode keeps Dynamo out of its dispatch itself (``oracles/dynamo_free.py``): torch does not
wrap its ``__torch_dispatch__``; an op reached while a Dynamo callback is set (code a compiled region
calls through a non-recursive ``torch.compiler.disable``) goes through torch's disabling wrapper, and is
checked as any other."""

import inspect

import pytest
import torch

from fuzzrunner import tracking
from fuzzrunner.oracles import dynamo_free
from fuzzrunner.oracles.shadow.gpu import torch_mode as tm
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle

pytestmark = pytest.mark.skipif(dynamo_free.HOOKS is None, reason="this torch lacks Dynamo's C hooks: torch wraps the mode")


def test_torch_does_not_wrap_the_device_modes_dispatch():
    fn = tm.DeviceTorchMode.__dict__["__torch_dispatch__"]
    assert inspect.isfunction(fn) and fn.__code__.co_filename == tm.__file__  # the mode's own, unwrapped


@pytest.mark.interpreter
@pytest.mark.parametrize("written", [False, True])
def test_an_op_under_a_dynamo_callback_goes_through_torchs_wrapper_and_is_checked(monkeypatch, written):
    through: list = []
    real = torch._disable_dynamo

    def spy(fn=None, recursive=True):
        wrapped = real(fn, recursive=recursive)
        if fn is not tm.DeviceTorchMode._dispatch:  # torch's own uses
            return wrapped

        def call(*args, **kwargs):
            through.append(str(args[1]))
            return wrapped(*args, **kwargs)
        return call
    monkeypatch.setattr(torch, "_disable_dynamo", spy)
    monkeypatch.setattr(dynamo_free, "_DISABLED", {})

    @torch.compiler.disable(recursive=False)
    def helper(t):
        return t.sum()  # this frame runs as it is, and Dynamo's callback stays set for what it calls

    @torch.compile(backend="eager")
    def step(t):
        return helper(t) + 1

    o = GpuShadowOracle("cpu")
    o.start()
    try:
        o.begin_op(0, {"op": "step"})
        x = tracking.track(torch.empty(4), "x", initialized=False)
        if written:
            x.fill_(1.0)
        step(x)
        o.end_op()
    finally:
        found = o.finish()
        torch._dynamo.reset()
    assert any("sum" in f for f in through), through
    bad = [v for v in found if v.kind == "uninitialized-read" and v.tensor == "x"]
    assert bool(bad) == (not written), found
