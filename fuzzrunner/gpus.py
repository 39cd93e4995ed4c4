"""Which GPUs this process may use, without touching CUDA: one rule for shards and the plugin.

``CUDA_VISIBLE_DEVICES`` wins when set (CUDA stops at the first empty or negative entry, so
``-1`` means none); otherwise ``nvidia-smi -L`` lists the machine's GPUs, MIG instances by UUID.
Standard library only: the pytest plugin imports this in every session.
"""

from __future__ import annotations

import os
import shutil
import subprocess


def nvidia_smi_gpus(run=subprocess.run) -> list[str]:
    """The machine's GPUs (MIG instances by UUID) from ``nvidia-smi -L``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = run([exe, "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus: list[list[str]] = []  # per GPU: [its index, then its MIG UUIDs]
    for line in out.splitlines():
        if line.startswith("GPU "):
            gpus.append([line.split(":", 1)[0][4:].strip()])
        elif line.strip().startswith("MIG ") and "UUID: " in line and gpus:
            gpus[-1].append(line.split("UUID: ", 1)[1].rstrip(")").strip())
    return [d for g in gpus for d in (g[1:] or g[:1])]


def visible_gpus(environ=os.environ, list_gpus=nvidia_smi_gpus) -> list[str]:
    """The devices this process may use: ``CUDA_VISIBLE_DEVICES`` when it is set, else ``list_gpus()``."""
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return list_gpus()
    out = []
    for d in (d.strip() for d in listed.split(",")):
        if not d or d.startswith("-"):
            break  # CUDA ignores a -1 or empty entry and everything after it
        out.append(d)
    return out


def gpu_for_index(index: int, gpus: list[str]) -> str | None:
    """The ``index``-th worker's GPU, round robin; None when no GPU is listed (inherit the environment)."""
    return gpus[index % len(gpus)] if gpus else None
