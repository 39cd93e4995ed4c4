"""What the device shadow's hooked launch returns to its caller (fuzzrunner/oracles/shadow/gpu/returned_kernel.py).

On the GPU, ``JITFunction.run`` returns the compiled kernel it launched and SGLang's ``cached_triton_kernel``
keeps it and launches it directly from then on: under the device shadow that was the instrumented twin's, and
the second launch died ("TypeError: function takes exactly 32 arguments (27 given)", sglang_engine on an H100).
The interpreter returns no compiled kernel, so here ``InterpretedFunction.run`` is made to return a stand-in
with a compiled kernel's launch behaviour: every parameter by position (its launcher's argument count checked
as the C launcher checks it), the constexprs of the launch that compiled it, Triton's launch-enter hook called.
"""

import pytest
import torch
import triton
import triton.language as tl

from fuzzrunner import _env, track, triton_compat
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle

pytestmark = pytest.mark.skipif(not _env.interpreted(), reason="the CPU half: Triton's interpreter")
triton_compat.apply()


@triton.jit
def _rows(src, dst, idx, n, W: tl.constexpr, B: tl.constexpr):
    i = tl.arange(0, B)
    s = tl.load(idx + i, mask=i < n, other=0)
    w = tl.arange(0, W)
    v = tl.load(src + s[:, None] * W + w[None, :], mask=(i < n)[:, None] & (w[None, :] < W))
    tl.store(dst + i[:, None] * W + w[None, :], v, mask=(i < n)[:, None])


_LAUNCHER_FIXED = 9  # grid x, y, z, stream, function, packed metadata, launch metadata, enter hook, exit hook


class _Compiled:
    """A compiled kernel's launch behaviour (triton/compiler/compiler.py ``CompiledKernel.__getitem__`` and the
    CUDA launcher of Triton 3.6): all parameters by position, constexprs as compiled, the enter hook called."""

    def __init__(self, kernel, real_run, consts: dict):
        from fuzzrunner.oracles.shadow.gpu.returned_kernel import _parameters
        self.kernel, self.real_run, self.consts = kernel, real_run, consts
        self.names = _parameters(kernel)[0]
        self.name, self.function = kernel.fn.__name__, 0

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            from triton import knobs
            from triton.compiler.compiler import LazyDict
            if len(args) != len(self.names):
                raise TypeError(f"function takes exactly {_LAUNCHER_FIXED + len(self.names)} arguments "
                                f"({_LAUNCHER_FIXED + len(args)} given)")
            knobs.runtime.launch_enter_hook(LazyDict({"name": self.name, "function": 0, "stream": stream}))
            args = [self.consts.get(n, a) for n, a in zip(self.names, args)]  # the compiled constexprs win
            self.real_run(self.kernel, *args, grid=grid, warmup=False)
        return runner


@pytest.fixture
def compiled(monkeypatch):
    """``InterpretedFunction.run`` returns a ``_Compiled`` of the kernel it ran, as ``JITFunction.run`` does."""
    from triton.runtime.interpreter import InterpretedFunction

    from fuzzrunner.oracles.shadow.gpu.returned_kernel import _parameters
    real = InterpretedFunction.run

    def run(kernel, *args, grid, warmup, **kwargs):
        real(kernel, *args, grid=grid, warmup=warmup, **kwargs)
        names, consts = _parameters(kernel)
        bound = {**dict(zip(names, args)), **kwargs}
        return _Compiled(kernel, real, {k: bound[k] for k in consts})
    monkeypatch.setattr(InterpretedFunction, "run", run)
    return real


class _SGLangCachedKernel:
    """SGLang's ``CachedKernel`` launcher (sglang/srt/utils/common.py:4896-4910 in 0.5.23): the first launch of a
    key keeps what ``fn[grid](*args, **kwargs)`` returned; later ones launch it with every parameter by position."""

    def __init__(self, fn, key_fn):
        from fuzzrunner.oracles.shadow.gpu.returned_kernel import _parameters
        self.fn, self.key_fn, self.names = fn, key_fn, _parameters(fn)[0]
        self.kernel_cache: dict = {}

    def __getitem__(self, grid):
        def launcher(*args, **kwargs):
            key = self.key_fn(args, kwargs)
            cached = self.kernel_cache.get(key)
            if cached is None:
                self.kernel_cache[key] = cached = self.fn[grid](*args, **kwargs)
                return cached
            cached[grid](*list(args) + [kwargs[n] for n in self.names[len(args):]])
            return cached
        return launcher


def _launch(cache, src, dst, idx, n, w=8):
    cache[(1,)](src=src, dst=dst, idx=idx, n=n, W=w, B=8)


def test_a_kept_returned_kernel_launches_again_as_the_plain_one_and_is_checked(compiled):
    """Without ReturnedKernel the second launch raised the H100's TypeError (the twin's launcher takes five more
    arguments); with it, both launches compute what plain ones compute, and the second one's stale read of the
    last op's index is reported as it would be through ``kernel[grid]``."""
    src = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    plain = _SGLangCachedKernel(_rows, lambda _, kw: kw["W"])
    want = [torch.zeros(8, 8), torch.zeros(8, 8)]
    idx0 = torch.tensor([7, 6, 5, 4, 3, 2, 1, 0], dtype=torch.int32)
    _launch(plain, src, want[0], idx0, 8)
    _launch(plain, src, want[1], idx0, 5)
    cache = _SGLangCachedKernel(_rows, lambda _, kw: kw["W"])
    got = [torch.zeros(8, 8), torch.zeros(8, 8)]
    o = GpuShadowOracle("cpu")
    o.start()
    try:
        idx = track(torch.empty(8, dtype=torch.int32), "idx", per_step=True, initialized=False)
        o.begin_op(0, {"op": "step"})
        idx.copy_(idx0)
        _launch(cache, src, got[0], idx, 8)
        o.begin_op(1, {"op": "step"})
        _launch(cache, src, got[1], idx, 5)  # idx was written in op 0 only: stale here
    finally:
        vs = o.finish()
    assert [torch.equal(a, b) for a, b in zip(want, got)] == [True, True]
    assert {(v.kind, v.tensor, v.kernel, v.details.get("op_index")) for v in vs} == {("stale-read", "idx", "_rows", 1)}
    assert len(cache.kernel_cache) == 1


def test_the_relaunch_keeps_the_compiled_constexprs_and_takes_the_callers_grid(compiled):
    """A compiled kernel ignores the constexpr values a direct launch passes: so does the relaunch (SGLang's csgmv
    shrink is keyed without N). Same outputs as the plain compiled kernel's, with the shadow on and off."""
    src = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    idx = torch.arange(8, dtype=torch.int32)
    outs = []
    for shadow in (False, True):
        cache = _SGLangCachedKernel(_rows, lambda _, kw: 0)  # one key for every W: the first launch's W=8 stays
        out = [torch.zeros(8, 8), torch.zeros(8, 8)]
        o = GpuShadowOracle("cpu")
        if shadow:
            o.start()
            o.begin_op(0, {"op": "step"})
        try:
            _launch(cache, src, out[0], idx, 8, w=8)
            _launch(cache, src, out[1], idx, 8, w=4)  # W=4 passed, W=8 compiled: all 8 columns copied
        finally:
            if shadow:
                assert o.finish() == []
        outs.append(out)
    assert torch.equal(outs[0][1], src) and all(torch.equal(a, b) for a, b in zip(*outs))


def test_the_raw_launcher_form_of_a_returned_kernel_relaunches_through_the_hook(compiled):
    src = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    idx = torch.arange(8, dtype=torch.int32).flip(0)
    o = GpuShadowOracle("cpu")
    o.start()
    try:
        o.begin_op(0, {"op": "step"})
        first, again = torch.zeros(8, 8), torch.zeros(8, 8)
        kept = _rows[(1,)](src, first, idx, 8, W=8, B=8)
        kept.run(1, 1, 1, None, kept.function, None, None, None, None, src, again, idx, 8, 8, 8)
    finally:
        assert o.finish() == []
    assert torch.equal(again, src.flip(0)) and torch.equal(first, again)


def test_a_compiled_kernel_kept_before_the_shadow_started_is_named_unchecked_when_launched_directly(compiled):
    """Kept from a launch without the shadow (an earlier case of the worker), then launched past ``run``: its
    accesses cannot be checked, so it is named as a tool limitation (it was silent before)."""
    src = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    idx = torch.arange(8, dtype=torch.int32)
    cache = _SGLangCachedKernel(_rows, lambda _, kw: kw["W"])
    _launch(cache, src, torch.zeros(8, 8), idx, 8)  # no shadow: a plain compiled kernel is kept
    o = GpuShadowOracle("cpu")
    o.start()
    try:
        o.begin_op(0, {"op": "step"})
        out = torch.zeros(8, 8)
        _launch(cache, src, out, idx, 8)
    finally:
        vs = o.finish()
    assert torch.equal(out, src)
    assert [(v.kind, v.kernel) for v in vs] == [("tool-limitation", "_rows")]
    assert "kept from a launch before the device shadow started" in vs[0].message
    from triton import knobs
    assert not any(getattr(c, "fuzzrunner_watch", False) for c in knobs.runtime.launch_enter_hook.calls)
