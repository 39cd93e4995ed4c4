"""CUDA graphs, and their stand-in on the CPU (and under compute-sanitizer).

On a GPU, ``capture`` records a real ``torch.cuda.CUDAGraph`` of the model body at a
fixed size. On the CPU a graph is the list of host-side launch decisions taken at
capture (no-LoRA flag, grid width); replay re-runs the body with those decisions
frozen, re-reading every buffer's *current* contents, which is what a CUDA graph does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .punica import HostDecisions


def real_graphs_possible() -> bool:
    """``torch.cuda.graph`` needs PyTorch's caching allocator. Under compute-sanitizer we turn it off
    (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``: otherwise initcheck misses reads of reused memory), and
    graphs are then emulated as on the CPU: host decisions frozen at capture, kernels re-launched,
    compiled and checked, at replay. Only the graph mechanism itself goes unexercised there."""
    import os
    return os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "0") in ("", "0")


@dataclass
class CapturedGraph:
    size: int
    decisions: list = field(default_factory=list)
    cuda_graph: Any = None
    static_output: torch.Tensor | None = None


class GraphPool:
    def __init__(self, device: torch.device, decisions: HostDecisions):
        self.device, self.decisions = device, decisions
        self.graphs: dict[int, CapturedGraph] = {}
        self._pool = None

    def capture(self, size: int, body: Callable[[], torch.Tensor]) -> CapturedGraph:
        if self.device.type == "cuda" and real_graphs_possible():
            graph = self._capture_cuda(size, body)
        else:
            self.decisions.record()
            try:
                body()
            finally:
                decisions = self.decisions.stop_recording()
            graph = CapturedGraph(size, decisions=decisions)
        self.graphs[size] = graph  # only a capture that completed is kept
        return graph

    def _capture_cuda(self, size: int, body) -> CapturedGraph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            body()  # warm-up: compiles the Triton kernels outside capture
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()  # type: ignore[assignment]
        with torch.cuda.graph(g, pool=self._pool):
            out = body()
        return CapturedGraph(size, cuda_graph=g, static_output=out)

    def find(self, num_tokens: int) -> CapturedGraph | None:
        sizes = sorted(s for s in self.graphs if s >= num_tokens)
        return self.graphs[sizes[0]] if sizes else None

    def replay(self, graph: CapturedGraph, body: Callable[[], torch.Tensor]) -> torch.Tensor:
        if graph.cuda_graph is not None:
            graph.cuda_graph.replay()
            return graph.static_output.clone()  # type: ignore[union-attr]
        self.decisions.replay(graph.decisions)
        try:
            return body()
        finally:
            self.decisions.replay(None)
