"""Zygotes started ahead of their hub: a shard's imports and its zygote's run at the same time.

The first hub made in this process for a spec takes the zygote started for it (``zygote_for``); one that
no hub takes is closed at ``drop_prestarted``.
"""

from __future__ import annotations

import os

from .forking import Zygote
from .worker_spec import STARTUP_TIMEOUT_S, WorkerSpec, hub_dir, worker_environment

_EARLY: list[tuple[WorkerSpec, Zygote]] = []  # zygotes started ahead of their hub (``prestart_zygote``), not taken


def prestart_zygote(spec: WorkerSpec) -> None:
    """Start now, without waiting for it, the zygote that a hub made later in this process for ``spec``
    forks its workers from: its imports (seconds: torch, Triton, the target) run while this process
    does its own (a shard process: the target, Hypothesis, the corpus). The first hub for ``spec`` takes
    it; one that no hub takes is closed at ``drop_prestarted``. Nothing is started where the hub would
    start no zygote. The environment it was started with lacks what this process's own imports set
    later (a target that sets variables when imported, ``_env.configure``): the zygote's imports, the
    same ones, set those in its own (and its workers'), as they would in a zygote started later."""
    if spec.wrapper or not hasattr(os, "pidfd_open"):
        return
    try:  # (wait=False: nothing to hand-shake yet; a Zygote that cannot start removes its folder)
        _EARLY.append((spec, _start(spec)))
    except OSError:
        pass  # the hub starts its own when it needs one


def zygote_for(spec: WorkerSpec) -> Zygote:
    """The zygote a hub forks ``spec``'s workers from: the one started ahead for it, else one started now."""
    return _take_prestarted(spec) or _start(spec)


def _start(spec: WorkerSpec) -> Zygote:
    return Zygote(worker_environment(spec, ""), hub_dir(), STARTUP_TIMEOUT_S, wait=False)


def _take_prestarted(spec: WorkerSpec) -> Zygote | None:
    """The zygote started ahead for ``spec``, also one that has ended: its hand-shake (at the first fork)
    says why it cannot serve, and the hub starts its workers directly, not another zygote that would
    end the same way (a target that cannot be imported in a worker)."""
    for i, (s, z) in enumerate(_EARLY):
        if s == spec:
            del _EARLY[i]
            return z
    return None


def drop_prestarted() -> None:
    """Close the zygotes started ahead that no hub took."""
    while _EARLY:
        _EARLY.pop()[1].close()
