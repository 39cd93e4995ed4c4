"""The LoRA backends (``--lora-backend``) a release ships that run without compiled code, found from the release
itself, and what each needs to run on the CPU.

Drawn where the release has them (``drivable``: the names its backend registry serves, or before the registry
0.5.5.post3, its ``get_backend_from_name``), each selected as the server selects it: ``ServerArgs.lora_backend`` and
``LoRAManager(lora_backend=...)``, which asks the release's own registry for the class:

* ``triton``, ``csgmv``: every release (Triton kernels);
* ``torch_native`` (0.5.6.post1+): plain torch ops (``lora/torch_ops``), no kernel;
* ``triton_v2`` (0.5.23+): the dense runner (``lora/dense/runner.py``) over the shared routing and Triton kernels of
  ``kernels/ops/lora/common``; it skips inactive batches (``skip_inactive_dense_lora``), so the decode graph runner
  records a "lora" and a "nolora" graph per size (graphs.py).

Not drawn (``NOT_DRIVABLE``, with why): ``ascend`` (an NPU's ``torch_npu`` kernels), ``uno_cublas`` (the UNO
speculative draft's backend: cuBLAS on an auxiliary CUDA stream, no request-selectable adapters), ``flashinfer``
(0.5.5 - 0.5.20: compiled kernels; the registry's entry raises in later releases).

CPU adaptation (where memory lives, not what SGLang does; ``cpu_adapt``): the expand kernels of the common ops
keep each layer's slice offsets in a table on the device, built once per shape and cached (``lora_b.
slice_geometry``); SGLang refuses a non-CUDA device there ("the expand kernels read their offset tables from a CUDA
device"). On the CPU the same cache lookup and SGLang's own ``_build_geometry`` run, with ``torch.cuda.device`` a
no-op and no stream capturing. Everything else of ``triton_v2`` takes its own non-CUDA branches
(``_compute_token_lora_mapping``'s torch path, ``LoraWorkspace.run_parallel`` serially).
"""

from __future__ import annotations

import contextlib
import sys
import types

import torch

DRIVABLE = ("triton", "csgmv", "torch_native", "triton_v2")
NOT_DRIVABLE = {
    "ascend": "an NPU backend (torch_npu kernels)",
    "uno_cublas": "the UNO speculative draft's backend: cuBLAS on an auxiliary CUDA stream, no user adapters",
    "flashinfer": "compiled FlashInfer kernels (its registry entry raises from 0.5.x: deprecated)",
}
LORA_B = "sglang.kernels.ops.lora.common.lora_b"
GEOMETRY_USERS = ("sglang.srt.lora.dense.runner", "sglang.srt.lora.dense.mla_correction")


def shipped() -> tuple:
    """Every ``--lora-backend`` name the release's registry serves (0.5.5.post3 on), else ``base_backend``'s two."""
    try:
        from sglang.srt.lora.backend.lora_registry import LORA_SUPPORTED_BACKENDS
    except ImportError:
        return ("triton", "csgmv")
    return tuple(LORA_SUPPORTED_BACKENDS)


def drivable() -> tuple:
    """The backends of the release that this target draws, in ``DRIVABLE``'s order."""
    have = set(shipped())
    return tuple(b for b in DRIVABLE if b in have)


def describe() -> str:
    have = shipped()
    skipped = [f"{b} ({NOT_DRIVABLE.get(b, 'not drivable here')})" for b in have if b not in DRIVABLE]
    return f"LoRA backends drawn: {', '.join(drivable())}" + (f"; not drawn: {'; '.join(skipped)}" if skipped else "")


def _no_cuda_torch() -> types.ModuleType:
    proxy = types.ModuleType("torch")
    proxy.__dict__.update({k: v for k, v in vars(torch).items() if not k.startswith("__")})
    proxy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        device=lambda d: contextlib.nullcontext(), is_current_stream_capturing=lambda: False,
        current_device=lambda: 0)
    return proxy


def cpu_adapt() -> None:
    """``slice_geometry`` on the CPU (module doc); once, after the release's LoRA modules are imported."""
    m = sys.modules.get(LORA_B)
    if m is None or getattr(m.slice_geometry, "cpu_adapted", False):
        return
    original = m.slice_geometry
    m.torch = _no_cuda_torch()

    def slice_geometry(offsets, block_size_n, device, out_offsets=None):
        if torch.device(device).type != "cpu":
            return original(offsets, block_size_n, device, out_offsets)
        rows, columns = m._geometry_inputs(offsets, block_size_n, out_offsets)
        key = (rows, columns, block_size_n, torch.device(device))
        if key not in m._GEOMETRY:
            m._GEOMETRY[key] = m._build_geometry(rows, block_size_n, torch.device(device), columns)
        return m._GEOMETRY[key]
    slice_geometry.cpu_adapted = True  # type: ignore[attr-defined]
    m.slice_geometry = slice_geometry
    for name in GEOMETRY_USERS:
        user = sys.modules.get(name)
        if user is not None and getattr(user, "slice_geometry", None) is original:
            user.slice_geometry = slice_geometry


__all__ = ["DRIVABLE", "NOT_DRIVABLE", "cpu_adapt", "describe", "drivable", "shipped"]
