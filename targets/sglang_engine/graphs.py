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
  ids are copied into its static buffer, the rest padded, the graph replayed, the real rows read back;
* variants (variants.py, SGLang's code): where the backend skips inactive batches (``triton_v2``), each size is
  captured twice, "lora" and "nolora", under SGLang's ``model_capture_mode`` / ``capture_lora_variant``, and a
  replay takes the one ``_resolve_lora_variant`` names.

On a GPU this is a real ``torch.cuda.CUDAGraph`` (pointers and launch grids frozen at capture). On the CPU there is
no graph: the capture-time preparation runs (SGLang's calls, in the runner's order), and a replay runs the forward
over the padded static buffer with what a graph freezes put back, as ``sglang_lora`` emulates it (docs/sglang.md,
"A graph, emulated"): the batch-info objects the backend held at capture (their tensors are the graph's
pointers, their contents live) and their host values (every field that is not a tensor: ``bs``,
``num_segments``, ``max_len``, ``use_cuda_graph``, ``has_active_lora``...: the kernels' grids, scalar arguments
and the Python decisions between launches), the dense runner's bound state where the backend has one
(``triton_v2``: ``DenseLoraRunner``'s token count, phase, token-slot views, its workspace's graph mode), all
restored after the forward to what the real batch's prepare set; the forward runs under the capture's mode and
variant, so the LoRA layers launch what they launched at capture.
"""

from __future__ import annotations

import bisect
import dataclasses

import torch

from ..sglang_lora.api import batch_infos
from ..sglang_lora.runner import HOST_FIELDS
from . import model as tiny
from .variants import Variants

CAPTURE_SIZES = (1, 2, 4)
CAPTURED = {"cuda-graph": 0, "cpu": 0}  # captures made in this process, by kind (scripts/gpu_sglang_engine.sh)


class DecodeGraphs:
    def __init__(self, session, max_bs: int, skip_prepare: bool = False):
        self.s = session
        self.sizes = [b for b in CAPTURE_SIZES if b <= max_bs] or [max_bs]
        self.real = session.device.type == "cuda"
        self.skip_prepare = skip_prepare  # the planted fault capture_without_lora_batch
        self.pool = torch.cuda.graph_pool_handle() if self.real else None
        self.variants = Variants(session.mgr)
        self.graphs: dict = {}  # (size, variant label) -> (graph, static ids, output or what the capture held)
        for bs in reversed(self.sizes):  # the largest first, as SGLang captures; each size's variants in turn
            for label in self.variants.labels:
                with self.variants.capturing(label):
                    self._capture(bs, label)

    def _run_once(self, ids: torch.Tensor) -> torch.Tensor:
        mgr = self.s.mgr
        if hasattr(mgr, "reset_routing_cache"):
            mgr.reset_routing_cache()
        with torch.no_grad():
            return tiny.forward(self.s.model, ids)

    def _capture(self, bs: int, label) -> None:
        s = self.s
        if not self.skip_prepare:
            s.mgr.prepare_lora_batch(s._forward_batch("decode", [None] * bs, [1] * bs))
        ids = torch.zeros(bs, dtype=torch.long, device=s.device)
        if not self.real:
            self.graphs[bs, label] = (None, ids, _held(s.mgr.lora_backend))
            CAPTURED["cpu"] += 1
            return
        # warm-up and capture on one stream, as SGLang's graph backend does (full_cuda_graph_backend.py: the
        # capture stream): triton_v2's LoraWorkspace keys its buffers by stream, and a capture on another stream
        # than the warm-ups' raises "workspace was not warmed before CUDA capture"
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._run_once(ids)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=self.pool, stream=side):
            out = self._run_once(ids)
        self.graphs[bs, label] = (g, ids, out)
        CAPTURED["cuda-graph"] += 1

    def pick(self, raw_bs: int) -> int | None:
        """The captured size a decode batch of ``raw_bs`` replays (None: it runs eagerly)."""
        i = bisect.bisect_left(self.sizes, raw_bs)
        return self.sizes[i] if i < len(self.sizes) else None

    def replay(self, bs: int, tokens: torch.Tensor, fb=None) -> torch.Tensor:
        """Replay the graph of size ``bs`` of the variant SGLang resolves for the prepared batch ``fb``."""
        label = self.variants.resolve(fb) if fb is not None else None
        g, ids, out = self.graphs[bs, label]
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
            with self.variants.capturing(label):  # the capture's mode: its Python decisions between launches
                return self._run_once(ids)[:raw].clone()
        finally:
            _put(backend, prepared)


# the dense runner's bound state (triton_v2's DenseLoraRunner.begin_batch) that a graph froze at capture
RUNNER_STATE = ("phase", "num_tokens", "_token_slots", "token_slots", "lora_ranks", "scalings")
WORKSPACE_STATE = ("_graph_mode", "_is_prefill_graph")


def _host(info) -> dict:
    """Every field of a batch-info object that is not a tensor (what a graph freezes as host values)."""
    fields = set(HOST_FIELDS) | {f.name for f in dataclasses.fields(info)} if dataclasses.is_dataclass(info) \
        else set(HOST_FIELDS)
    return {f: getattr(info, f, None) for f in sorted(fields) if not isinstance(getattr(info, f, None), torch.Tensor)}


def _held(backend) -> dict:
    """The batch-info objects the backend holds now, each with its host values; and the dense runner's state."""
    from sglang.srt.lora.utils import LoRABatchInfo  # the engine's: this process imported the release whole
    infos = dict(batch_infos(backend, LoRABatchInfo))
    if "batch_info" not in infos:  # a batch info of the backend's own class (triton_v2's _BatchInfo)
        infos["batch_info"] = getattr(backend, "batch_info", None)
    held: dict = {k: (v, None if v is None else _host(v)) for k, v in infos.items()}
    runner = getattr(backend, "runner", None)
    if runner is not None and hasattr(runner, "begin_batch"):
        held["runner"] = ({f: getattr(runner, f) for f in RUNNER_STATE if hasattr(runner, f)},
                          {f: getattr(runner.workspace, f) for f in WORKSPACE_STATE if hasattr(runner.workspace, f)})
    return held


def _put(backend, held: dict) -> None:
    for k, (info, host) in held.items():
        if k == "runner":
            for f, v in info.items():
                setattr(backend.runner, f, v)
            for f, v in host.items():
                setattr(backend.runner.workspace, f, v)
            continue
        setattr(backend, k, info)
        if info is not None and host is not None:
            for f, v in host.items():
                setattr(info, f, v)


__all__ = ["CAPTURED", "CAPTURE_SIZES", "DecodeGraphs"]
