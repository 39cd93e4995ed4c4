"""The device mode's own small kernels (``device_checks.check_epochs``, ``index_bounds``), launched on a GPU
past Triton's binder once compiled.

``kernel[grid](...)`` goes through ``JITFunction.run``: it binds the arguments, works out their
specialization and the cache key, then launches. On an H200's host that costs about 90 us per launch,
more than the check itself, and the device mode launches one per torch-side read check and per index
tensor. Here the compiled kernel a first launch returned is kept per (kernel, device, each argument's
specialization, the constexpr values) and later launches call its launcher directly, as
``JITFunction.run`` does at its end. The specialization is worked out as Triton's is: a tensor by its
dtype and whether its address is 16-byte aligned; an integer by whether it fits 32 bits, is 1 and is
a multiple of 16; so a kernel is never reused for arguments it was not compiled for. Anything
unexpected (a launch hook registered, as profilers do; another Triton's compiled-kernel API) goes through
``kernel[grid](...)`` as before. On the CPU (the interpreter) every launch does.
"""

from __future__ import annotations

import torch

from .regions import _raw_stream

_COMPILED: dict = {}  # (kernel id, device, specs, constexprs) -> compiled kernel (the kernels live for the process)
_STATE = {"direct": True}


def _hook_reader():
    """A function giving Triton's (launch enter hook, launch exit hook) now, where this Triton keeps them."""
    try:
        from triton import knobs
        runtime = knobs.runtime
        runtime.launch_enter_hook, runtime.launch_exit_hook  # noqa: B018  (both there)
        return lambda: (runtime.launch_enter_hook, runtime.launch_exit_hook)
    except (ImportError, AttributeError):
        from triton.compiler.compiler import CompiledKernel
        return lambda: (getattr(CompiledKernel, "launch_enter_hook", None),
                        getattr(CompiledKernel, "launch_exit_hook", None))


_hooks = _hook_reader()


def _spec(v) -> tuple:
    if isinstance(v, torch.Tensor):
        return (v.dtype, v.data_ptr() % 16 == 0)
    if isinstance(v, bool):
        return (bool, v)
    if isinstance(v, int):
        return (-(1 << 31) <= v < (1 << 31), v == 1, v % 16 == 0)
    return (type(v), v)


def launch(kernel, device: torch.device, args: tuple, consts: tuple) -> None:
    """``kernel[(1,)](*args, *consts)`` on ``device`` (``consts``: the trailing constexpr parameters, in order)."""
    if device.type != "cuda" or not _STATE["direct"]:
        kernel[(1,)](*args, *consts)
        return
    key = (id(kernel), device.index, consts, *[_spec(a) for a in args])
    compiled = _COMPILED.get(key)
    enter, leave = _hooks()
    # Triton >= 3.4: an empty HookChain, or one holding only the device shadow's own watch (returned_kernel.py)
    hooked = enter is not None and any(not getattr(c, "fuzzrunner_watch", False)
                                       for c in getattr(enter, "calls", [enter]))
    if compiled is None or hooked:
        compiled = kernel[(1,)](*args, *consts)
        if not hooked and compiled is not None and hasattr(compiled, "packed_metadata"):
            _COMPILED[key] = compiled
        return
    try:
        compiled.run(1, 1, 1, _raw_stream(device), compiled.function, compiled.packed_metadata, None, enter, leave,
                     *args, *consts)
    except (AttributeError, TypeError):  # not the launcher this module knows: Triton's own path from now on
        _STATE["direct"] = False
        kernel[(1,)](*args, *consts)
