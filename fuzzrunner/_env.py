"""Decide, before Triton is imported, whether kernels run compiled or in the interpreter.

``FUZZRUNNER_DEVICE=cpu|cuda`` forces a choice (workers get it from their start-up environment,
``engine.protocol.WorkerEnv``; a front end's ``--device`` sets it through ``env_defaults.use_device``);
otherwise a process with no CUDA device runs Triton's interpreter on CPU tensors.
Triton reads ``TRITON_INTERPRET`` when a kernel is decorated, so this must run
before any ``fuzzrunner.kernels`` import: ``fuzzrunner/__init__.py`` calls it first.
This is the process's own set-up; a run's decisions travel in its ``Context`` (``context.py``).
"""

from __future__ import annotations

import os


def cuda_present() -> bool:
    """Whether a CUDA device is visible, counted through NVML: no CUDA context is created here,
    so a later fork, a worker process or a compute-sanitizer run is unaffected."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    try:
        import torch
    except ImportError:
        return False
    if torch.cuda.is_initialized():
        return torch.cuda.device_count() > 0
    old = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        return bool(torch.cuda.is_available())
    finally:
        if old is None:
            del os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"]
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = old


def configure() -> str:
    """Set ``TRITON_INTERPRET`` as the device requires and return the device type."""
    device = os.environ.get("FUZZRUNNER_DEVICE") or ("cuda" if cuda_present() else "cpu")
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ["FUZZRUNNER_DEVICE"] = device
    return device


def decided() -> bool:
    """Whether this process's device is already named (a worker's, a front end's flag): then ``configure``
    costs no GPU probe and no torch import."""
    return bool(os.environ.get("FUZZRUNNER_DEVICE"))


def device_type() -> str:
    return os.environ.get("FUZZRUNNER_DEVICE") or configure()


def interpreted() -> bool:
    device_type()  # decide first if nobody has yet
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
