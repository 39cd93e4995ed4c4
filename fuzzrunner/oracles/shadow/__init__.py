"""The shadow-memory oracle and its parts: uninitialized, stale and out-of-bounds accesses.

One core (``core/``: the span record, the words and the reporter of a report, the stack of installed
hooks, the protocol) and two back ends: the CPU mode, ``oracle.py`` with its shadow ``memory.py``, and the
device mode, ``gpu/``. The hooks that feed the CPU mode are ``triton_hook.py`` (Triton's interpreter),
``torch_hook.py`` with ``torch_effects.py`` and ``torch_fallback.py`` (aten ops, custom ops),
``host_views.py`` (numpy views and lists); both modes use ``storage_hook.py``, ``threads.py`` (other Python
threads), ``compiled.py`` (``torch.compile``) and ``locations.py`` (the user's line); bounds of views and
sub-buffers are ``launch_views.py`` and ``sub_buffers.py``.
"""

from .oracle import ShadowOracle

__all__ = ["ShadowOracle", "prepare_device_mode", "shadow_oracle"]


def prepare_device_mode(context) -> str | None:
    """Before workers under ``context`` start the shadow oracle: where they run the device mode, its dispatch
    filter is built (or loaded) here, once (a worker building it spends its budget or its case's timeout on
    it, about 30 s). The reason it is off, if it is (the workers' mode then sees every op: slower, the same
    reports); else None."""
    if context.shadow != "device":
        return None
    from .gpu import dispatch_filter
    return None if dispatch_filter.get() is not None else dispatch_filter.status()


def shadow_oracle(context):
    """The shadow oracle of a run under ``context`` (``context.shadow``): the device mode (``gpu/``), which
    checks the memory of ``context.device`` (it runs on the CPU too, through the interpreter: its tests do),
    or the CPU oracle, which checks Triton kernels where they run in the interpreter."""
    if context.shadow == "device":
        from .gpu.oracle import GpuShadowOracle
        return GpuShadowOracle(context.device)
    return ShadowOracle(check_triton=context.interpreted)
