"""What a hooked launch hands back to its caller, and the launches that bypass the hook.

``JITFunction.run`` returns the compiled kernel it launched, and engines keep it: SGLang's
``cached_triton_kernel`` (``sglang/srt/utils/common.py``, class ``CachedKernel``, on CUDA) keeps what
``fn[grid](*args, **kwargs)`` returned on a key's first launch and launches it directly from then on
(``cached_kernel[grid](*all_args)``: every parameter, by position), and vLLM's ``CPTritonContext``
(``vllm/v1/attention/ops/dcp.py``) does the same with the non-constexpr ones. A launch the shadow
replaced by its instrumented twin returned the *twin's* compiled kernel, whose launcher takes five more
arguments: the second launch died with "function takes exactly 32 arguments (27 given)".

So a hooked launch returns a ``ReturnedKernel``: launched directly (``[grid](*args)``, or its raw
``run``), it launches the original kernel again through ``JITFunction.run``, where the shadow checks it
(a twin) or counts it (unchecked) as any launch. It behaves as the uninstrumented compiled kernel of a
plain launch does: the constexprs and launch options (``num_warps``...) are the first launch's (a
compiled kernel ignores what a direct launch passes for its constexprs), the grid and stream the
caller's. Other attributes (``metadata``, ``asm``, ``n_regs``...) are the launched kernel's (the twin's
where it was checked). One difference, on purpose: Triton specializes the relaunch for its own
arguments (a compiled kernel launched on tensors of another dtype would read their bytes as the
compiled dtype; the relaunch does not).

A compiled kernel that a caller kept before the shadow started (a case without it in the same worker,
an engine's warm-up) is launched past ``JITFunction.run`` and past the twin: Triton's launch-enter hook
(``knobs.runtime.launch_enter_hook``, which every compiled launch calls) sees it, and it is named as a
kernel that ran unchecked (``DirectLaunches``), never silently.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

_TLS = threading.local()  # depth of hooked ``JITFunction.run`` calls on this thread: their launches are seen


class InRun:
    """A hooked ``run`` in progress on this thread: launches inside it went through the hook."""

    def __enter__(self):
        _TLS.depth = getattr(_TLS, "depth", 0) + 1

    def __exit__(self, *exc):
        _TLS.depth -= 1


IN_RUN = InRun()


class ReturnedKernel:
    """Stands for the compiled kernel a hooked launch of ``kernel`` returned (see the module's docstring)."""

    def __init__(self, kernel, compiled, args: tuple, kwargs: dict):
        self._kernel, self._compiled = kernel, compiled
        names, consts = _parameters(kernel)
        bound = dict(zip(names, args))
        bound.update({k: v for k, v in kwargs.items() if k in names})
        self._names = names
        self._consts = {k: bound[k] for k in consts if k in bound}  # fixed at compile time, as in a compiled kernel
        self._options = {k: v for k, v in kwargs.items()  # num_warps, num_stages, ... (not run's own)
                         if k not in names and k not in ("grid", "warmup")}

    def __getitem__(self, grid):
        grid = tuple(grid) + (1,) * (3 - len(tuple(grid)))

        def runner(*args, stream=None):
            self._launch(grid, stream, args)
        return runner

    @property
    def run(self):
        """The raw launcher's form: ``(gx, gy, gz, stream, function, packed_metadata, launch_metadata, enter_hook,
        exit_hook, *args)``, as ``JITFunction.run`` and SGLang's diffusion ``fast_launch`` call it."""
        def launcher(gx, gy, gz, stream, _function, _packed, _metadata, _enter, _exit, *args):
            self._launch((gx, gy, gz), stream, args)
        return launcher

    def _launch(self, grid: tuple, stream, args: tuple) -> None:
        args = tuple(self._consts.get(n, a) for n, a in zip(self._names, args)) + args[len(self._names):]
        given = set(self._names[:len(args)])
        kwargs = {k: v for k, v in self._consts.items() if k not in given}  # (a caller that passes regular args only)
        with _on_stream(stream):
            self._kernel.run(*args, grid=grid, warmup=False, **kwargs, **self._options)

    def __getattr__(self, name):
        return getattr(self._compiled, name)

    def __repr__(self) -> str:
        return f"ReturnedKernel({self._compiled!r})"


def _parameters(kernel) -> tuple[tuple, tuple]:
    """(every parameter name in order, the constexpr ones) of a jit kernel."""
    params = getattr(kernel, "params", None)
    if params and all(hasattr(p, "is_constexpr") for p in params):
        return tuple(p.name for p in params), tuple(p.name for p in params if p.is_constexpr)
    import inspect

    from .instrument import python_function
    sig = inspect.signature(python_function(kernel)).parameters.values()
    return tuple(p.name for p in sig), tuple(p.name for p in sig if "constexpr" in str(p.annotation))


class _on_stream:
    """The caller's stream (a raw handle, as a compiled kernel takes it) current for the relaunch."""

    def __init__(self, stream):
        self.stream = stream
        self.ctx = None

    def __enter__(self):
        if self.stream is not None and torch.cuda.is_available():
            current = torch.cuda.current_stream().cuda_stream
            if self.stream != current:
                self.ctx = torch.cuda.stream(torch.cuda.ExternalStream(self.stream))
                self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def wrap(kernel, out, args: tuple, kwargs: dict):
    """What a hooked launch returns: ``out`` itself where it is no compiled kernel (the interpreter's None)."""
    return out if out is None else ReturnedKernel(kernel, out, args, kwargs)


class DirectLaunches:
    """Triton's launch-enter hook for as long as the shadow is installed: a compiled launch outside a hooked
    ``JITFunction.run`` (a kept compiled kernel launched directly) is told to ``on_direct(name)``. Launches
    with no metadata (the oracle's own, ``internal_launch``) are not; nor any where this Triton has no hook
    chain (before 3.4: the floor is 3.6)."""

    fuzzrunner_watch = True  # internal_launch: this hook alone keeps its direct path

    def __init__(self, on_direct: Callable[[str], None]):
        self.on_direct = on_direct
        self._chain = None

    def __call__(self, metadata) -> None:
        if metadata is None or getattr(_TLS, "depth", 0) > 0:
            return
        data = getattr(metadata, "data", metadata)  # a LazyDict's own fields (its extras are the kernel's to compute)
        name = data.get("name") if isinstance(data, dict) else None
        if name:
            self.on_direct(str(name))

    def install(self) -> None:
        chain = launch_enter_chain()
        if chain is not None:
            chain.add(self)
            self._chain = chain

    def uninstall(self) -> None:
        if self._chain is not None:
            self._chain.remove(self)
            self._chain = None


def launch_enter_chain():
    """``triton.knobs.runtime.launch_enter_hook`` where it is a hook chain (Triton 3.4+), else None."""
    try:
        from triton import knobs
        chain = knobs.runtime.launch_enter_hook
    except (ImportError, AttributeError):
        return None
    return chain if hasattr(chain, "add") and hasattr(chain, "calls") else None
