"""The environment as the front ends' defaults: ``FUZZRUNNER_SHADOW`` and ``FUZZRUNNER_DEVICE``.

The CLI, the pytest plugin and the API (``fuzzrunner.fuzz``, ``fuzzrunner.replay``) read the shadow mode when
they build ``Settings`` (``apply``): a setting they were given explicitly wins. A device left open is this
process's (``Context.resolve``: ``FUZZRUNNER_DEVICE`` as ``_env`` set the process up at import, else a GPU
if one is visible); ``use_device`` makes a front end's device flag this process's default (``_env`` then
sets Triton's mode for it before Triton loads, and ``fuzzrunner.replay`` in the same process runs there).
Nothing below the front ends reads the variables; the run's ``Context`` carries what was decided
(``fuzzrunner.context``). Standard library only: the pytest plugin imports this in every session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from . import _env
from .context import SHADOW_MODES, Context
from .errors import InvalidArgument

DEVICE_ENV = "FUZZRUNNER_DEVICE"
SHADOW_ENV = "FUZZRUNNER_SHADOW"


def shadow() -> str | None:
    """``FUZZRUNNER_SHADOW``: "device" or "cpu" forces the shadow oracle's mode, unset (or empty) lets the
    device pick. Any other value is refused, by name, never silently ignored."""
    value = os.environ.get(SHADOW_ENV, "").strip()
    if value and value not in SHADOW_MODES:
        raise InvalidArgument(f"{SHADOW_ENV}={value!r}: expected one of {', '.join(SHADOW_MODES)}, or unset to "
                              f"let the shadow oracle pick (the device mode with compiled Triton on a GPU).")
    return value or None


def apply(settings: Any) -> Any:
    """``settings`` with the environment's shadow mode if they leave theirs open; ``InvalidArgument`` for a
    bad value (checked even when the settings name their own: a typo is said, never ignored)."""
    mode = shadow()
    return replace(settings, shadow=mode) if mode is not None and settings.shadow is None else settings


def resolved(settings: Any, *, on_cluster: bool = False, asked_as: str | None = None) -> tuple[Any, Context]:
    """``settings`` with the environment's defaults (``apply``) and the run's context they give, resolved once
    (``Context.resolve``): a device or sanitizer that cannot be had here is a ``DeviceUnavailable`` or
    ``SanitizerNotFound`` now, before anything starts (``asked_as``: how the user asked, e.g. ``--device cuda``);
    on a Ray cluster (``on_cluster``) those are the nodes' business. The settings come back on the context's
    device. A front end passes both on (``fuzz(settings=, context=)``, ``Replayer(settings, context=)``), so the
    library does not resolve the context again."""
    settings = apply(settings)
    context = Context.resolve(settings, on_cluster=on_cluster, asked_as=asked_as)
    return replace(settings, device=context.device), context


def use_device(device: str | None) -> str | None:
    """Make ``device`` this process's default (None leaves it as it is); the previous value, for
    ``restore_device``."""
    old = os.environ.get(DEVICE_ENV)
    if device:
        os.environ[DEVICE_ENV] = device
    return old


def restore_device(old: str | None) -> None:
    """Undo ``use_device``."""
    if old is None:
        os.environ.pop(DEVICE_ENV, None)
    else:
        os.environ[DEVICE_ENV] = old


@contextmanager
def device_of_call(device: str | None) -> Iterator[None]:
    """A front end's device flag as this process's default for one call (``use_device``, then ``_env.configure``:
    Triton's mode before Triton loads), and the process's own ``FUZZRUNNER_DEVICE`` and ``TRITON_INTERPRET`` back
    after it. A CLI process exits anyway; ``cli.main`` called in a test session (or a user's script) left
    ``--device cpu`` behind, and on a GPU machine every later test drew the CPU with compiled Triton (the GPU run
    of 2026-12-07: 176 unit tests failed "Pointer argument cannot be accessed from Triton (cpu tensor?)")."""
    saved = {name: os.environ.get(name) for name in (DEVICE_ENV, "TRITON_INTERPRET")}
    use_device(device)
    try:
        _env.configure()
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
