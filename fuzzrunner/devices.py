"""The one owner of the device a run uses: decided from what was asked and what is here.

The library decides it where a run is planned (``engine.campaign.plan_campaign``, the
``Replayer``) and passes the answer down explicitly (``CampaignPlan.device``, ``WorkerSpec.device``,
``WorkerEnv.device``); no layer below decides again. A front end may ask first, to refuse a flag
before anything starts (the CLI's settings; the plugin's skip): asking again for a device already
decided only re-checks it. A device that cannot be had here is a ``DeviceUnavailable``: the CLI
prints it and exits 2, the pytest plugin skips with it. ``use`` sets this process's
``FUZZRUNNER_DEVICE`` for a front end's flag (a target's strategy reads it); ``_env.configure``,
the device set-up before Triton loads, records the device it found the same way.
"""

from __future__ import annotations

import os

from . import _env
from .errors import DeviceUnavailable

ENV = "FUZZRUNNER_DEVICE"


def resolve(requested: str | None, *, sanitizer: str = "none", on_cluster: bool = False,
            asked_as: str | None = None) -> str:
    """``requested`` (``cpu``, ``cuda`` or None: this process's device, ``FUZZRUNNER_DEVICE`` if set,
    else a GPU if one is visible) as the device to run on.

    A sanitizer means ``cuda``. On a Ray cluster the GPUs (and compute-sanitizer) are the nodes'
    business: nothing is checked here. Elsewhere ``cuda`` needs a visible GPU, and a sanitizer its
    executable (``SanitizerNotFound``). ``asked_as``: how the caller's user asked for it (a flag such
    as ``--device cuda``), for the error."""
    wants_gpu = requested == "cuda" or sanitizer != "none"
    if on_cluster and (requested is not None or wants_gpu):
        return requested or "cuda"
    if not wants_gpu:
        return requested or _env.device_type()
    if not _env.cuda_present():
        need = asked_as or (f"compute-sanitizer --tool {sanitizer}" if sanitizer != "none" else "device 'cuda'")
        reads = sanitizer in ("none", "initcheck", "memcheck")
        instead = ("the shadow oracle checks the same reads in Triton's interpreter" if reads
                   else "nothing on the CPU checks what it checks (races and barriers inside a launch)")
        raise DeviceUnavailable(f"{need} needs a CUDA GPU and none is visible here; on the CPU drop it: {instead}.")
    if sanitizer != "none":
        from .sanitizer.locate import find_sanitizer
        find_sanitizer()
    return "cuda"


def use(device: str | None) -> str | None:
    """Make ``device`` this process's (``FUZZRUNNER_DEVICE``; None leaves it as it is); the previous
    value, for ``restore``."""
    old = os.environ.get(ENV)
    if device:
        os.environ[ENV] = device
    return old


def restore(old: str | None) -> None:
    """Undo ``use``: ``FUZZRUNNER_DEVICE`` as it was."""
    if old is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = old


def current() -> str | None:
    """The device this process was told to use, if any (the report records it)."""
    return os.environ.get(ENV)
