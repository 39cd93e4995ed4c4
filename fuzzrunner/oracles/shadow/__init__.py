"""The shadow-memory oracle and its parts: uninitialized, stale and out-of-bounds accesses.

``oracle.py`` is the oracle; ``memory.py`` the shadow (the epoch of each byte's last write) and
``report.py`` its words; the hooks that feed it are ``triton_hook.py`` (Triton's interpreter),
``torch_hook.py`` with ``torch_effects.py`` and ``torch_fallback.py`` (aten ops, custom ops),
``storage_hook.py``, ``host_views.py`` (numpy views and lists), ``threads.py`` (other Python
threads), ``compiled.py`` (``torch.compile``); bounds of views and sub-buffers are
``launch_views.py`` and ``sub_buffers.py``; ``locations.py`` names the user's line.
"""

from .oracle import ShadowOracle

__all__ = ["ShadowOracle", "prepare_device_mode", "shadow_mode", "shadow_oracle", "uses_device_mode",
           "workers_use_device_mode"]

SHADOW_MODES = ("device", "cpu")


def shadow_mode() -> str:
    """``FUZZRUNNER_SHADOW``: "device" or "cpu" forces the shadow oracle's mode, "" picks it (the device
    mode with compiled Triton on a GPU). Any other value is refused, by name, never silently ignored."""
    import os

    from ...errors import InvalidArgument
    value = os.environ.get("FUZZRUNNER_SHADOW", "").strip()
    if value and value not in SHADOW_MODES:
        raise InvalidArgument(f"FUZZRUNNER_SHADOW={value!r}: expected one of {', '.join(SHADOW_MODES)}, or unset to "
                              f"let the shadow oracle pick (the device mode with compiled Triton on a GPU).")
    return value


def uses_device_mode(device_type: str, interpreted: bool | None = None) -> bool:
    """Whether the shadow oracle of a process on ``device_type`` runs the device mode (``shadow_oracle``);
    ``interpreted``: whether that process runs Triton's interpreter (default: this process's)."""
    from ... import _env
    choice = shadow_mode()
    if interpreted is None:
        interpreted = _env.interpreted()
    return choice == "device" or (choice != "cpu" and not interpreted and device_type == "cuda")


def workers_use_device_mode(device_type: str) -> bool:
    """Whether the shadow oracle of a worker on ``device_type`` runs the device mode: a worker on ``cuda`` runs
    compiled Triton whatever this process runs (``engine/hub.worker_environment``), one on ``cpu`` the
    interpreter."""
    return uses_device_mode(device_type, interpreted=device_type != "cuda")


def prepare_device_mode(device_type: str) -> str | None:
    """Before workers on ``device_type`` start the shadow oracle: where they run the device mode, its dispatch
    filter is built (or loaded) here, once (a worker building it spends its budget or its case's timeout on
    it, about 30 s). The reason it is off, if it is (the workers' mode then sees every op: slower, the same
    reports); else None."""
    if not workers_use_device_mode(device_type):
        return None
    from .gpu import dispatch_filter
    return None if dispatch_filter.get() is not None else dispatch_filter.status()


def shadow_oracle():
    """The shadow oracle for this process: with compiled Triton on a GPU, the device mode (``gpu/``);
    with Triton's interpreter, the CPU oracle. ``FUZZRUNNER_SHADOW=device|cpu`` forces one (the
    device mode runs on the CPU too, through the interpreter: its tests do)."""
    from ... import _env
    if uses_device_mode(_env.device_type()):
        from .gpu.oracle import GpuShadowOracle
        return GpuShadowOracle()
    return ShadowOracle()
