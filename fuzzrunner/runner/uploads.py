"""Host values onto the runner's device as an engine uploads them: without making the host wait.

A copy from pageable host memory to a GPU makes the host wait for the stream to drain (torch
synchronises after it). vLLM stages its inputs and mapping in pinned buffers and copies them with
``non_blocking=True``; the reference runner does the same here. The copies stay ordered on the current
stream, so every later op on it sees the values; the pinned block is not reused before its copy ran
(torch's host allocator records the copy). On an H200 these uploads were 34 of a reference_runner case's
49 waits, and with several processes on one GPU each wait costs a switch between their contexts
(``scripts/gpu/contention.py``). On other devices ``values.to(device)`` and ``dst.copy_(values)``.
"""

from __future__ import annotations

import torch


def upload(values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``values`` (a host tensor) on ``device``, the host not waiting for the copy (on the CPU, ``values``
    itself)."""
    if device.type != "cuda":
        return values.to(device)
    return values.pin_memory().to(device, non_blocking=True)


def write(dst: torch.Tensor, values: torch.Tensor) -> None:
    """``dst.copy_(values)`` from a host tensor, the host not waiting for the copy."""
    if dst.device.type != "cuda":
        dst.copy_(values)
        return
    dst.copy_(values.pin_memory(), non_blocking=True)
