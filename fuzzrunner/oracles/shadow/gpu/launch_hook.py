"""Where Triton launches are intercepted: ``JITFunction.run`` (compiled) and
``InterpretedFunction.run`` (the interpreter). ``kernel[grid](...)``, ``@triton.autotune`` and
``@triton.heuristics`` all end there, so an autotuned kernel's every configuration runs instrumented.
What such a launch returns to its caller is a ``ReturnedKernel`` (returned_kernel.py): launched again
directly, as engines do with a kept compiled kernel, it goes through here too; a kept compiled kernel
that never did (kept before the hook) is heard by Triton's launch-enter hook and named unchecked.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch

from ..triton_hook import _flatten
from .returned_kernel import IN_RUN, DirectLaunches, wrap


def _classes() -> list:
    from triton.runtime.jit import JITFunction
    out = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction
        out.append(InterpretedFunction)
    except ImportError:  # pragma: no cover
        pass
    return out


def tensor_args(kernel, args, kwargs) -> list:
    """(name, tensor) of every tensor argument, inside tuples too; a host TensorDescriptor is
    returned as (name, descriptor) so the caller can refuse it."""
    known = _PARAMS.get(id(kernel))
    if known is None or known[0] is not kernel:
        known = _PARAMS[id(kernel)] = (kernel, _params(kernel))
    names = known[1]
    if names:  # the usual kernel: named parameters only, bound by position and by name
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k in names:
                bound[k] = v
        out = []
        for k, v in bound.items():
            if isinstance(v, torch.Tensor):
                out.append((k, v))
            elif not isinstance(v, (int, float, bool, str)) and v is not None:
                out += _flatten({k: v}, lambda d: _Descriptor())
        return out
    from .instrument import python_function
    sig = _signature(python_function(kernel))
    known = {k: v for k, v in kwargs.items() if k in sig.parameters}
    try:
        bound = sig.bind_partial(*args, **known).arguments
    except TypeError:
        bound = {}
    return list(_flatten(bound, lambda d: _Descriptor()))


# id(kernel) -> (kernel, its parameter names: () if it takes *args), per process (by id: a JITFunction's hash
# takes a lock; the kernel held, so an id is never another kernel's)
_PARAMS: dict = {}


def _params(kernel) -> tuple:
    """A kernel's parameter names in order; () when it takes ``*args`` or ``**kwargs`` (bound the slow way)."""
    from .instrument import python_function
    params = _signature(python_function(kernel)).parameters.values()
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return ()
    return tuple(p.name for p in params)


@functools.lru_cache(maxsize=1024)
def _signature(fn) -> inspect.Signature:
    """A kernel's signature, computed once (it is read at every launch)."""
    return inspect.signature(fn)


class _Descriptor:
    """Stands for a host TensorDescriptor: on no device, so the launch is named as unchecked."""
    device = None


class LaunchHook:
    """``on_launch(kernel, [(name, tensor)]) -> (twin, extra kwargs) | "unchecked" | None`` decides per
    launch (None: not a kernel of the case, run as is); after an unchecked launch ``on_unchecked``
    hears its tensor arguments; ``on_direct(name)`` hears a compiled kernel launched past ``run``."""

    def __init__(self, on_launch: Callable, pause: Callable, on_unchecked: Callable, internal: tuple = (),
                 on_direct: Callable | None = None):
        self.on_launch, self.pause, self.on_unchecked = on_launch, pause, on_unchecked
        self.internal = frozenset(map(id, internal))  # the oracle's own kernels (by id): run as they are
        self._saved: dict = {}
        self._direct = DirectLaunches(on_direct) if on_direct is not None else None

    def install(self) -> None:
        hook = self
        for cls in _classes():
            orig = cls.run
            self._saved[cls] = orig

            def run(kernel, *args, _orig=orig, **kwargs):
                with IN_RUN:
                    if id(kernel) in hook.internal or getattr(kernel, "shadow_of", None) is not None:
                        return _orig(kernel, *args, **kwargs)
                    return wrap(kernel, hook._run(kernel, _orig, args, kwargs), args, kwargs)
            cls.run = run
        if self._direct is not None:
            self._direct.install()

    def _run(self, kernel, orig, args: tuple, kwargs: dict):
        tensors = tensor_args(kernel, args, kwargs)
        plan = self.on_launch(kernel, tensors)
        if plan is None:
            return orig(kernel, *args, **kwargs)
        if plan == "unchecked":  # its arguments count as written by it: a miss, never a false report
            with self.pause():
                out = orig(kernel, *args, **kwargs)
            self.on_unchecked(tensors)
            return out
        twin, extra = plan
        with self.pause():  # the interpreter's copies of the arguments are not the kernel's accesses
            return type(twin).run(twin, *args, **kwargs, **extra)

    def uninstall(self) -> None:
        if self._direct is not None:
            self._direct.uninstall()
        for cls, orig in self._saved.items():
            cls.run = orig
        self._saved = {}
