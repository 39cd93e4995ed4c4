"""The decode CUDA graphs, made and replayed for the LoRA path as SGLang's decode graph runner makes them.

``DecodeCudaGraphRunner`` (0.5.23: ``model_executor/runner/decode_cuda_graph_runner.py``; ``CudaGraphRunner``
before) imports on the CPU, but its capture and replay need a whole ``ModelRunner`` (attention backends, KV
pools, input buffers); what it does for LoRA is re-stated here, each step calling SGLang's own code:

* start-up: ``init_decode_cuda_graph_batch_info(max_bs, 1)`` (``init_cuda_graph_batch_info`` before 0.5.23;
  ``runner.Session``, :453);
* capture, largest batch size first: the dummy batch ``lora_ids = [None] * bs`` (:1172-1177) prepared with the
  manager's ``prepare_lora_batch`` (:1397-1398), two warm-up runs on a side stream, then ``run_once`` under
  ``torch.cuda.graph``: ``reset_routing_cache`` where the manager has it (:1409), then the model's forward;
* replay: the real batch was prepared unpadded by ``ForwardBatch.init_new`` (the step's prepare); the graph of
  the smallest captured size that holds the batch is chosen (``bisect_left`` over the capture sizes), the input
  ids are copied into its static buffer, the rest padded, the graph replayed, the real rows read back.

On a GPU this is a real ``torch.cuda.CUDAGraph`` (pointers and launch grids frozen at capture). On the CPU there is
no graph: the capture-time preparation runs (SGLang's calls, in the runner's order), and a replay runs the forward
over the padded static buffer with what a graph freezes put back, as ``sglang_lora`` emulates it (docs/sglang.md,
"A graph, emulated"): the ``LoRABatchInfo`` objects the backend held at capture (their tensors are the graph's
pointers, their contents live) and their host values (``bs``, ``num_segments``, ``max_len``, ``use_cuda_graph``:
the kernels' grids and scalar arguments), restored after the forward to what the real batch's prepare set.
"""

from __future__ import annotations

import bisect

import torch

from targets.sglang_lora.api import API
from targets.sglang_lora.runner import HOST_FIELDS

from . import model as tiny

CAPTURE_SIZES = (1, 2, 4)
CAPTURED = {"cuda-graph": 0, "cpu": 0}  # captures made in this process, by kind (scripts/gpu_sglang_engine.sh)


class DecodeGraphs:
    def __init__(self, session, max_bs: int, skip_prepare: bool = False):
        self.s = session
        self.sizes = [b for b in CAPTURE_SIZES if b <= max_bs] or [max_bs]
        self.real = session.device.type == "cuda"
        self.skip_prepare = skip_prepare  # the planted fault capture_without_lora_batch
        self.pool = torch.cuda.graph_pool_handle() if self.real else None
        self.graphs: dict = {}
        for bs in reversed(self.sizes):  # the largest first, as SGLang captures
            self._capture(bs)

    def _run_once(self, ids: torch.Tensor) -> torch.Tensor:
        mgr = self.s.mgr
        if hasattr(mgr, "reset_routing_cache"):
            mgr.reset_routing_cache()
        with torch.no_grad():
            return tiny.forward(self.s.model, ids)

    def _capture(self, bs: int) -> None:
        s = self.s
        if not self.skip_prepare:
            s.mgr.prepare_lora_batch(s._forward_batch("decode", [None] * bs, [1] * bs))
        ids = torch.zeros(bs, dtype=torch.long, device=s.device)
        if not self.real:
            self.graphs[bs] = (None, ids, _held(s.mgr.lora_backend))
            CAPTURED["cpu"] += 1
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._run_once(ids)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=self.pool):
            out = self._run_once(ids)
        self.graphs[bs] = (g, ids, out)
        CAPTURED["cuda-graph"] += 1

    def pick(self, raw_bs: int) -> int | None:
        """The captured size a decode batch of ``raw_bs`` replays (None: it runs eagerly)."""
        i = bisect.bisect_left(self.sizes, raw_bs)
        return self.sizes[i] if i < len(self.sizes) else None

    def replay(self, bs: int, tokens: torch.Tensor) -> torch.Tensor:
        g, ids, out = self.graphs[bs]
        raw = tokens.shape[0]
        ids[:raw].copy_(tokens[:raw])
        ids[raw:].zero_()
        if g is not None:
            g.replay()
            return out[:raw].clone()
        backend = self.s.mgr.lora_backend
        prepared = _held(backend)
        _put(backend, out)  # ``out``: what the CPU capture froze
        try:
            return self._run_once(ids)[:raw].clone()
        finally:
            _put(backend, prepared)


def _held(backend) -> dict:
    """The batch-info objects the backend holds now, each with its host values."""
    return {k: (v, None if v is None else {f: getattr(v, f, None) for f in HOST_FIELDS})
            for k, v in API.batch_infos(backend).items()}


def _put(backend, held: dict) -> None:
    for k, (info, host) in held.items():
        setattr(backend, k, info)
        if info is not None and host is not None:
            for f, v in host.items():
                setattr(info, f, v)


__all__ = ["CAPTURED", "CAPTURE_SIZES", "DecodeGraphs"]
