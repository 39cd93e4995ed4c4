"""The calls a model runner makes so that oracles can watch it; no-ops when nothing watches.

A runner (ours, or a user's) says which of its buffers matter and how:

    track(token_lora_mapping, "token_lora_mapping", per_step=True, initialized=False)

``per_step`` buffers must be rewritten in every op that reads them (a read of last
step's contents is *stale*); ``initialized=False`` says the memory was never
written (``torch.empty``). ``carry_over`` declares that a per-step buffer's old
contents are deliberately still valid this step (vLLM skips re-programming a
mapping equal to the last one). ``kernel_launch`` announces a kernel launch with its
metadata just before it happens: the invariants oracle checks LoRA metadata there, and
a crash finding names the last kernel launched.

Oracles subscribe with ``watch``. This module sits at the bottom of the layering:
the runner imports it, and it imports nothing of the package.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .text import safe_str


class Watcher:
    """What oracles and the worker hear; every method is optional (a no-op here)."""

    def on_track(self, tensor: Any, name: str, per_step: bool, initialized: bool) -> None:
        pass

    def on_carry_over(self, tensor: Any) -> None:
        pass

    def on_kernel_launch(self, kernel: str, meta: dict) -> None:
        pass

    def quiet_begin(self) -> Any:
        """This thread enters its outermost ``quiet`` block; what is returned goes to ``quiet_end``."""
        return None

    def quiet_end(self, token: Any) -> None:
        pass

    def region_begin(self, name: str) -> Any:
        """The runner enters ``region(name)``; what is returned goes to ``region_end``."""
        return None

    def region_end(self, token: Any) -> None:
        pass


_watchers: list[Watcher] = []


def track(tensor: Any, name: str, *, per_step: bool = False, initialized: bool = True) -> Any:
    """Register the bytes the view ``tensor`` spans under ``name``; returns the tensor for chaining.

    Views of one storage each keep their own record. Tracking a region again is harmless
    (its name and byte states stay; ``per_step`` is OR-ed), so a runner may call this every
    step; and it never marks a byte known never-written as written, whatever ``initialized``
    says (``initialized`` only describes bytes nothing knew about)."""
    name = name if isinstance(name, str) else safe_str(name, 200)  # quoted in every report of the buffer
    for w in _watchers:
        w.on_track(tensor, name, per_step, initialized)
    return tensor


def carry_over(*tensors: Any) -> None:
    """The written bytes of exactly these views (not their whole storages) are valid this step."""
    for w in _watchers:
        for t in tensors:
            w.on_carry_over(t)


def kernel_launch(kernel: str, **meta: Any) -> None:
    """Announce that ``kernel`` is about to launch. For LoRA kernels pass vLLM's metadata
    (``M``, ``grid_z``, ``max_loras``, ``token_lora_mapping``, ``token_indices_sorted_by_lora_ids``,
    ``num_tokens_per_lora``, ``lora_token_start_loc``, ``active_lora_ids``, ``meta_name``) and the
    invariants oracle checks it; any other metadata is only recorded."""
    if not _watchers:
        return
    kernel = kernel if isinstance(kernel, str) else safe_str(kernel, 200)
    caller = sys._getframe(1)
    meta.setdefault("where", f"{caller.f_code.co_filename}:{caller.f_lineno}")
    for w in _watchers:
        w.on_kernel_launch(kernel, meta)


def watching() -> bool:
    return bool(_watchers)


_quiet = threading.local()  # per thread: a worker thread's accesses are the case's own


@contextmanager
def quiet() -> Iterator[None]:
    """Torch ops made inside, on this thread, are the harness's own (poison fills, invariant reads, a
    reference model's computation): unseen. Kernels launched inside are still the code's own, and checked.
    Watchers hear the outermost block begin and end (the GPU shadow steps its dispatch mode aside there)."""
    depth = getattr(_quiet, "depth", 0)
    _quiet.depth = depth + 1
    tokens: list = []
    try:
        if not depth:
            for w in list(_watchers):
                tokens.append((w, w.quiet_begin()))
        yield
    finally:
        try:
            _end(tokens)
        finally:
            _quiet.depth -= 1  # whatever a watcher raised: this thread is not left quiet


def _end(tokens: list, end: str = "quiet_end") -> None:
    """Every watcher hears the block end, in reverse order, even after one of them raised (raised again)."""
    if tokens:
        (w, token), rest = tokens[-1], tokens[:-1]
        try:
            getattr(w, end)(token)
        finally:
            _end(rest, end)


@contextmanager
def region(name: str) -> Iterator[None]:
    """The code under test's work inside is the runner's ``name`` (one call of a path that shares its kernels with
    others, e.g. the logits of the prompt-logprobs rows against those of the sampled rows): an oracle that reports
    an access made inside says so (the shadow oracle's ``details["region"]``, the innermost region), so triage can
    tell the calls apart by what ran, not by what else the case held."""
    name = name if isinstance(name, str) else safe_str(name, 200)
    tokens = [(w, w.region_begin(name)) for w in list(_watchers)]
    try:
        yield
    finally:
        _end(tokens, "region_end")


def is_quiet() -> bool:
    return getattr(_quiet, "depth", 0) > 0


@contextmanager
def watch(watcher: Watcher) -> Iterator[Watcher]:
    _watchers.append(watcher)
    try:
        yield watcher
    finally:
        _watchers.remove(watcher)
