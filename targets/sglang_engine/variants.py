"""The decode graph runner's LoRA variant choice, SGLang's own code: which graphs it records per batch size and which
one a batch replays.

From 0.5.23 a backend that skips batches without an active adapter (``skip_inactive_dense_lora``: ``triton_v2``)
makes ``DecodeCudaGraphRunner`` record two graphs per size (``record_nolora_graph`` from
``_lora_backend_skips_inactive(model_runner)``, ``decode_cuda_graph_runner.py:246-248, :286``): "lora", captured
under ``capture_lora_variant("lora")`` so that the LoRA layers launch their kernels for the all-base capture batch
(``BaseLayerWithLoRA.lora_active`` -> ``capturing_lora_graph()``), and "nolora", without them (:1330-1347). A
replay takes the variant ``_resolve_lora_variant(forward_batch)`` names (:755-762): "lora" when any request has an
adapter. Each is called here as the runner calls it: the first on an object holding the manager
(``model_runner.lora_manager``), the second unbound on an object holding ``record_nolora_graph``; the capture runs
under SGLang's ``model_capture_mode()`` and ``capture_lora_variant(label)``, and so does the CPU's emulated replay
(graphs.py: the Python decisions a graph froze at capture are taken again under the capture's mode).

Releases before 0.5.23 record one graph per size for the dense LoRA path (their ``--record-nolora-graph``,
0.5.11 - 0.5.12.post1, serves MoE LoRA's runner): ``Variants.labels`` is ``(None,)`` there.
"""

from __future__ import annotations

import contextlib
import importlib
import types

RUNNER_MODULES = ("sglang.srt.model_executor.runner.decode_cuda_graph_runner",
                  "sglang.srt.model_executor.cuda_graph_runner")
CAPTURE_MODE = "sglang.srt.model_executor.runner_utils.capture_mode"


def _runner_module():
    for name in RUNNER_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def recorded_for_skipping_backends() -> bool:
    """Whether the release's decode graph runner records a "nolora" graph for backends that skip inactive batches
    (``_lora_backend_skips_inactive``: 0.5.23+)."""
    m = _runner_module()
    return m is not None and hasattr(m, "_lora_backend_skips_inactive")


class Variants:
    """SGLang's variant choice for one server (its manager): the labels captured and the one a batch replays."""

    def __init__(self, mgr):
        m = _runner_module()
        skips = getattr(m, "_lora_backend_skips_inactive", None)
        self.runner_cls = getattr(m, "DecodeCudaGraphRunner", None) or getattr(m, "CudaGraphRunner", None)
        try:
            self.mode = importlib.import_module(CAPTURE_MODE)
        except ImportError:
            self.mode = None
        # DecodeCudaGraphRunner.__init__: record_nolora_graph or _lora_backend_skips_inactive(model_runner)
        self.record_nolora_graph = bool(skips is not None and self.mode is not None
                                        and skips(types.SimpleNamespace(lora_manager=mgr)))
        self._runner = types.SimpleNamespace(record_nolora_graph=self.record_nolora_graph)

    @property
    def labels(self) -> tuple:
        """The variants captured per batch size, in SGLang's order (capture(): "lora" then "nolora")."""
        return ("lora", "nolora") if self.record_nolora_graph else (None,)

    def resolve(self, forward_batch):
        """The variant a batch replays: ``DecodeCudaGraphRunner._resolve_lora_variant``, SGLang's."""
        if not self.record_nolora_graph:
            return None
        return self.runner_cls._resolve_lora_variant(self._runner, forward_batch)

    @contextlib.contextmanager
    def capturing(self, label):
        """SGLang's capture mode for a graph of variant ``label`` (``model_capture_mode`` around the whole capture,
        ``capture_lora_variant`` around each variant's), each where the release has it."""
        with contextlib.ExitStack() as stack:
            capture = getattr(self.mode, "model_capture_mode", None)
            if capture is not None:
                stack.enter_context(capture())
            variant = getattr(self.mode, "capture_lora_variant", None)  # 0.5.23+ (0.5.16 - 0.5.22: capture mode only)
            if variant is not None:
                stack.enter_context(variant(label))
            yield


__all__ = ["Variants", "recorded_for_skipping_backends"]
