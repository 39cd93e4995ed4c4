"""SGLang's LoRA backends as the target drives them, across releases (API generations).

What is SGLang's code, imported from the release's own files and run unchanged: the backends
``TritonLoRABackend`` (``triton``: ``sgemm_lora_a`` / ``sgemm_lora_b`` segment GEMMs) and
``ChunkedSgmvLoRABackend`` (``csgmv``: ``chunked_sgmv_shrink`` / ``_expand``), their
``init_cuda_graph_batch_info`` (``init_decode_cuda_graph_batch_info`` from 0.5.2x),
``prepare_lora_batch`` and ``run_lora_a_sgemm`` / ``run_lora_b_sgemm``, the Triton kernels behind
them, ``LoRABatchInfo`` and ``ForwardMode``.

Generations, found by what the release has, never by its version string:

* ``g0`` (0.5.5 and before): the LoRA manager allocates the graph batch info and passes it to the backend's
  ``init_cuda_graph_batch_info`` and ``prepare_lora_batch`` (re-stated: ``init_graph``, ``prepare``);
* ``g1`` (0.5.x until the kernels moved): kernels in ``sglang.srt.lora.triton_ops``;
* ``g2``: kernels in ``sglang.kernels.ops.gemm``;
* ``g3`` (0.5.2x): kernels in ``sglang.kernels.ops.lora.dense``, graph batch info made by
  ``init_decode_cuda_graph_batch_info``, the chunked backend's chunk size read from the runtime
  context (answered here: ``make_backend``).

On the CPU (``cpu_torch``): SGLang allocates its graph batch info under ``with torch.device("cuda")``
and pins host tensors (``pin_memory=True``); the backend modules see a ``torch`` whose ``device("cuda")``
is the CPU and whose factories drop ``pin_memory``. Everything else is torch itself. The csgmv kernels'
tuned-config lookup (``lora_tuning_config``) names the device with ``get_device_name()``, None without
CUDA: it is answered ``"cpu"``, for which no JSON exists, so SGLang's default block sizes are used.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

KERNEL_PACKAGES = (("g3", "sglang.kernels.ops.lora.dense"), ("g2", "sglang.kernels.ops.gemm"),
                   ("g1", "sglang.srt.lora.triton_ops"))
BACKENDS = {"triton": ("sglang.srt.lora.backend.triton_backend", "TritonLoRABackend"),
            "csgmv": ("sglang.srt.lora.backend.chunked_backend", "ChunkedSgmvLoRABackend")}
_FACTORIES = ("tensor", "empty", "zeros", "ones", "full", "arange", "empty_like", "zeros_like")


_CPU_TORCH = """
def device(*args, **kwargs):
    if args and isinstance(args[0], str) and args[0].startswith("cuda"):
        return torch.device("cpu")
    return torch.device(*args, **kwargs)

def unpinned(fn):
    def call(*args, **kwargs):
        kwargs.pop("pin_memory", None)
        if isinstance(kwargs.get("device"), str) and kwargs["device"].startswith("cuda"):
            kwargs["device"] = "cpu"
        return fn(*args, **kwargs)
    return call
"""


def cpu_torch() -> types.ModuleType:
    """``torch`` for SGLang's modules on a machine without CUDA: ``device("cuda")`` is the CPU, no pinning.
    Its two functions are compiled under a ``<...>`` file name, which the oracles skip when they name the
    line that allocated a tensor: a ``torch.empty`` is SGLang's line, not this module's."""
    proxy = types.ModuleType("torch")
    proxy.__dict__.update({k: v for k, v in vars(torch).items() if not k.startswith("__")})
    ns: dict = {"torch": torch}
    exec(compile(_CPU_TORCH, "<sglang_lora: torch on the CPU>", "exec"), ns)
    proxy.device = ns["device"]  # type: ignore[attr-defined]
    for name in _FACTORIES:
        setattr(proxy, name, ns["unpinned"](getattr(torch, name)))
    return proxy


@dataclass
class API:
    version: str
    generation: str
    backends: dict = field(default_factory=dict)   # name -> class
    kernels: dict = field(default_factory=dict)    # kernel module name -> module
    forward_mode: Any = None
    batch_info_cls: Any = None
    handles_idle: bool = False  # the release's LoRA path takes DP-attention idle batches (is_idle branches)
    found: list = field(default_factory=list)

    def make_backend(self, name: str, max_loras: int, device: torch.device, chunk: int):
        cls = self.backends[name]
        params = inspect.signature(cls.__init__).parameters
        args: dict = {}
        if "server_args" in params:
            args["server_args"] = types.SimpleNamespace(max_lora_chunk_size=chunk)
        try:
            return cls(max_loras, device, **args)
        except ValueError as e:
            if "not published" not in str(e):
                raise
        # g3 reads max_lora_chunk_size from the runtime context the server publishes: the constructor's
        # one line, re-stated (the base class's __init__ is SGLang's)
        backend = cls.__new__(cls)
        cls.__mro__[1].__init__(backend, max_loras, device)
        backend.max_chunk_size = chunk
        return backend

    def init_graph(self, backend, max_bs: int) -> None:
        if hasattr(backend, "init_decode_cuda_graph_batch_info"):
            backend.init_decode_cuda_graph_batch_info(max_bs, 1)
        elif "cuda_graph_batch_info" in inspect.signature(backend.init_cuda_graph_batch_info).parameters:
            # g0: LoRAManager.init_cuda_graph_batch_info allocates the graph batch info (re-stated: its
            # LoRABatchInfo(...) call, all torch.zeros) and hands it to the backend's, which is SGLang's
            z = functools.partial(torch.zeros, dtype=torch.int32, device=backend.device)
            info = self.batch_info_cls(
                bs=max_bs, use_cuda_graph=True, num_segments=None, seg_lens=z(max_bs), seg_indptr=z(max_bs + 1),
                max_len=1, weight_indices=z(max_bs), permutation=z(max_bs), lora_ranks=z(backend.max_loras_per_batch),
                scalings=torch.zeros(backend.max_loras_per_batch, dtype=torch.float, device=backend.device))
            backend.init_cuda_graph_batch_info(cuda_graph_batch_info=info, max_bs_in_cuda_graph=max_bs)
            backend.cuda_graph_batch_info = info  # where later generations keep it (the manager held it)
        else:
            backend.init_cuda_graph_batch_info(max_bs, 1)

    def fresh_kernel_caches(self) -> int:
        """Empty SGLang's own per-process caches of compiled kernels in the release's kernel modules, as a fresh
        server process starts: at the start of every case (kernel_caches.py says why). How many it emptied."""
        from .kernel_caches import empty
        return empty(self.kernels.values())

    def batch_infos(self, backend) -> dict:
        """Every ``LoRABatchInfo`` the backend holds now (``batch_info``, ``sgemm_batch_info``, ...): what the
        kernels of a forward read, and so what a CUDA graph captured now would point at. The class is the one
        the backends were imported with (not imported again: after ``sglang_engine`` loads in this process,
        ``sglang.srt.lora.utils`` is the engine's module, whose class these infos are not instances of)."""
        return batch_infos(backend, self.batch_info_cls)

    @staticmethod
    def graph_batch_info(backend):
        return getattr(backend, "cuda_graph_batch_info", None)

    def prepare(self, backend, fb, weight_indices, ranks, scalings, use_cuda_graph: bool) -> None:
        args = (fb, list(weight_indices), list(ranks), list(scalings))
        if "batch_info" in inspect.signature(backend.prepare_lora_batch).parameters:  # g0: the manager passes it
            backend.prepare_lora_batch(*args, batch_info=backend.cuda_graph_batch_info if use_cuda_graph else None)
        else:
            backend.prepare_lora_batch(*args, use_cuda_graph)

    def lora_linear(self, backend, x, a, b, base):
        """One LoRA linear layer as SGLang's ``ColumnParallelLinearWithLoRA.apply_lora``: shrink, then expand
        added into ``base`` (scaled by the adapter's scaling in the expand kernel)."""
        lora_a = backend.run_lora_a_sgemm(x, a)
        offset = torch.tensor([0, b.shape[-2]], dtype=torch.int32, device=x.device)
        return backend.run_lora_b_sgemm(x=lora_a, weights=b, output_offset=offset, base_output=base,
                                        output_offset_cpu=torch.tensor([0, b.shape[-2]], dtype=torch.int32))


def batch_infos(backend, info_cls) -> dict:
    """The backend's attributes that are ``info_cls`` instances (its ``LoRABatchInfo``), or a batch info not made
    yet (None); not the graph's."""
    return {k: v for k, v in vars(backend).items() if isinstance(v, info_cls) or
            (v is None and k.endswith("batch_info") and not k.startswith(("cuda_graph", "prefill_cuda_graph")))}


def _version(tree: Path) -> str:
    for d in tree.glob("sglang-*.dist-info"):
        return d.name.removeprefix("sglang-").removesuffix(".dist-info")
    v = tree / "sglang" / "version.py"
    if v.exists():
        m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", v.read_text())
        if m:
            return m.group(1)
    return "unknown"


def load(device: str, tree: Path) -> API:
    gen, kernels, kernel_pkg = None, {}, ""
    for g, pkg in KERNEL_PACKAGES:
        if (tree / pkg.replace(".", "/")).is_dir():
            gen, kernel_pkg = g, pkg
            break
    if gen is None:
        raise ImportError("no LoRA Triton kernels found (sglang.srt.lora.triton_ops, sglang.kernels.ops.*)")
    backends = {}
    for name, (mod, cls) in BACKENDS.items():
        backends[name] = getattr(importlib.import_module(mod), cls)
    from sglang.srt.lora.utils import LoRABatchInfo
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    init = getattr(backends["triton"], "init_cuda_graph_batch_info", None)
    if init is not None and "cuda_graph_batch_info" in inspect.signature(init).parameters:
        gen = "g0"
    if device == "cpu":
        proxy = cpu_torch()
        import sys
        for name, m in list(sys.modules.items()):
            if name.endswith("lora_tuning_config") and hasattr(m, "get_device_name"):
                m.get_device_name = lambda: "cpu"  # no tuned JSON for it: SGLang's default block sizes
            if name.startswith(("sglang.srt.lora", "sglang.kernels.ops", "sglang.kernels.ops.gemm")) \
                    and getattr(m, "torch", None) is torch:
                m.torch = proxy
    for name, m in __import__("sys").modules.items():
        if name.startswith(kernel_pkg) and m is not None:
            kernels[name.rsplit(".", 1)[-1]] = m
    a = API(version=_version(tree), generation=gen, backends=backends, kernels=kernels, forward_mode=ForwardMode,
            batch_info_cls=LoRABatchInfo)
    a.handles_idle = any("is_idle()" in (tree / f).read_text(encoding="utf-8") for f in
                         ("sglang/srt/lora/lora_manager.py", "sglang/srt/lora/utils.py") if (tree / f).exists())
    a.found = [f"{n} backend ({c.__module__}.{c.__name__})" for n, c in backends.items()]
    a.found.append("idle batches: " + ("handled (is_idle)" if a.handles_idle else "not drawn (no is_idle branch)"))
    a.found.append("graph batch info: " + ("init_decode_cuda_graph_batch_info" if hasattr(
        backends["triton"], "init_decode_cuda_graph_batch_info") else "init_cuda_graph_batch_info"))
    return a
