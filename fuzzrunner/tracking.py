"""The calls a model runner makes so that oracles can watch it; no-ops when nothing watches.

A runner (ours, or a user's) says which of its buffers matter and how:

    track(token_lora_mapping, "token_lora_mapping", per_step=True, initialized=False)

``per_step`` buffers must be rewritten in every op that reads them (a read of last
step's contents is *stale*); ``initialized=False`` says the memory was never
written (``torch.empty``). ``carry_over`` declares that a per-step buffer's old
contents are deliberately still valid this step (vLLM skips re-programming a
mapping equal to the last one). ``lora_launch`` hands kernel metadata to the
invariant checks just before a LoRA launch.

Oracles subscribe with ``watch``. This module sits at the bottom of the layering:
the runner imports it, and it imports nothing of the package.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Protocol


class Watcher(Protocol):
    def on_track(self, tensor: Any, name: str, per_step: bool, initialized: bool) -> None: ...
    def on_carry_over(self, tensor: Any) -> None: ...
    def on_lora_launch(self, kernel: str, meta: dict) -> None: ...


_watchers: list[Watcher] = []


def track(tensor: Any, name: str, *, per_step: bool = False, initialized: bool = True) -> Any:
    """Register the bytes the view ``tensor`` spans under ``name``; returns the tensor for chaining.

    Views of one storage each keep their own record. Tracking a region again is harmless
    (its name and byte states stay; ``per_step`` is OR-ed), so a runner may call this every
    step; and it never marks a byte known never-written as written, whatever ``initialized``
    says (``initialized`` only describes bytes nothing knew about)."""
    for w in _watchers:
        w.on_track(tensor, name, per_step, initialized)
    return tensor


def carry_over(*tensors: Any) -> None:
    """The written bytes of exactly these views (not their whole storages) are valid this step."""
    for w in _watchers:
        for t in tensors:
            w.on_carry_over(t)


def lora_launch(kernel: str, **meta: Any) -> None:
    for w in _watchers:
        w.on_lora_launch(kernel, meta)


def watching() -> bool:
    return bool(_watchers)


_quiet = 0


@contextmanager
def quiet() -> Iterator[None]:
    """Accesses made inside are the harness's own (poison fills, invariant reads): unseen."""
    global _quiet
    _quiet += 1
    try:
        yield
    finally:
        _quiet -= 1


def is_quiet() -> bool:
    return _quiet > 0


@contextmanager
def watch(watcher: Watcher) -> Iterator[Watcher]:
    _watchers.append(watcher)
    try:
        yield watcher
    finally:
        _watchers.remove(watcher)
