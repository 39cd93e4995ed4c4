"""Planted faults of the backends beyond triton / csgmv and of the decode graph runner's variant choice
(backends.py, variants.py): each a small change of one SGLang object, through ``unittest.mock.patch.object`` on
the case's own objects, undone when the case ends (``Session.close``), so that the oracles are shown to catch the
class of bug it stands for."""

from __future__ import annotations

import contextlib
from unittest import mock

FAULTS = {
    "nolora_graph_for_adapters":
        "DecodeCudaGraphRunner._resolve_lora_variant answers 'nolora' for every batch: a decode batch with adapters "
        "replays the base-only graph recorded for backends that skip inactive batches (triton_v2), and its adapter "
        "rows get no LoRA.",
    "skip_inactive_from_first_request":
        "the manager's skip-inactive decision (batch_info.has_active_lora) reads only the batch's first request: a "
        "batch whose first request has no adapter skips every LoRA kernel on a backend that skips inactive batches "
        "(triton_v2), and its later adapter rows get none.",
    "torch_native_first_segment_slot":
        "TorchNativeLoRABackend.prepare_lora_batch routes every segment of an eager batch to the first segment's "
        "slot (its segment -> slot table written from the first entry): a batch of several adapters, or the base "
        "model and an adapter, runs one adapter's weights for all.",
    "v2_expand_rank_past_bridge":
        "triton_v2's expand kernels (_grouped_lora_b_kernel, _per_row_lora_b_kernel) see each slot's rank one above "
        "the shrink's (lora_ranks + 1, up to the pool's max rank): their live-rank select keeps a workspace lane the "
        "shrink never wrote, and the expand multiplies it in (the shadow oracle's check that the kernel's by-design "
        "over-read of lanes it drops stays silent must still see a lane that is used).",
}
# triton_v2's expand kernels, by module (0.5.23 kernels/ops/lora/common/lora_b.py): each launch is given its slots'
# live ranks (lora_ranks_ptr) and selects the bridge lanes below them after loading a block of the pool's max rank
V2_EXPAND = ("sglang.kernels.ops.lora.common.lora_b", ("_grouped_lora_b_kernel", "_per_row_lora_b_kernel"))


# the one backend each fault needs, the one place it is said: a campaign that cannot draw it (the release lacks it,
# or FUZZRUNNER_SGLANG_BACKENDS leaves it out) would pass without testing the fault, so the fault is refused there
NEEDS = {
    "nolora_graph_for_adapters": "triton_v2",  # the backend that skips inactive batches ('nolora' decode graphs)
    "skip_inactive_from_first_request": "triton_v2",
    "torch_native_first_segment_slot": "torch_native",
    "v2_expand_rank_past_bridge": "triton_v2",
}
SINCE = {"torch_native": "0.5.6.post1+", "triton_v2": "0.5.23+"}


def unavailable(api, drawn=None) -> dict:
    """{fault: why it cannot be planted in this release, or in a campaign drawing only the backends ``drawn``
    (``drawn_backends``: ``FUZZRUNNER_SGLANG_BACKENDS``; None: all the release's)}."""
    from .variants import recorded_for_skipping_backends
    out = {}
    for fault, backend in NEEDS.items():
        if backend not in api.backends:
            out[fault] = f"SGLang {api.version} has no {backend} LoRA backend ({SINCE[backend]})"
        elif drawn is not None and backend not in drawn:
            out[fault] = (f"it needs the {backend} backend, which FUZZRUNNER_SGLANG_BACKENDS leaves out (it draws "
                          f"{', '.join(drawn)}): add {backend} to it, or unset it")
    if not recorded_for_skipping_backends():
        for fault in ("nolora_graph_for_adapters", "skip_inactive_from_first_request"):
            out.setdefault(fault, f"SGLang {api.version} has no backend that skips inactive batches (triton_v2: "
                                  f"0.5.23+) and so no 'nolora' decode graph")
    return out


def plant(stack: contextlib.ExitStack, faults: set, mgr, graphs=None) -> None:
    """Start each fault of ``faults`` on the case's objects; ``stack`` undoes them."""
    if "nolora_graph_for_adapters" in faults and graphs is not None and graphs.variants.runner_cls is not None:
        cls = graphs.variants.runner_cls  # SGLang's DecodeCudaGraphRunner: patched for this case only
        stack.enter_context(mock.patch.object(cls, "_resolve_lora_variant", _always_nolora(cls._resolve_lora_variant)))
    if "skip_inactive_from_first_request" in faults:
        stack.enter_context(mock.patch.object(mgr, "prepare_lora_batch", _first_request_only(mgr)))
    name = getattr(mgr.lora_backend, "name", "")
    if "torch_native_first_segment_slot" in faults and name == NEEDS["torch_native_first_segment_slot"]:
        backend = mgr.lora_backend
        stack.enter_context(mock.patch.object(backend, "prepare_lora_batch", _first_segment_slot(backend)))
    if "v2_expand_rank_past_bridge" in faults and name == NEEDS["v2_expand_rank_past_bridge"]:
        import sys
        module = sys.modules[V2_EXPAND[0]]
        for kernel in V2_EXPAND[1]:
            stack.enter_context(mock.patch.object(module, kernel, _RankPastBridge(getattr(module, kernel))))


def _always_nolora(original):
    def _resolve_lora_variant(self, forward_batch):
        label = original(self, forward_batch)
        return "nolora" if label is not None else None
    return _resolve_lora_variant


def _first_request_only(mgr):
    original = mgr.prepare_lora_batch

    def prepare_lora_batch(forward_batch):
        original(forward_batch)
        info = mgr.lora_backend.batch_info
        if info is not None and forward_batch.lora_ids:
            info.has_active_lora = forward_batch.lora_ids[0] is not None
    return prepare_lora_batch


def _first_segment_slot(backend):
    original = backend.prepare_lora_batch

    def prepare_lora_batch(forward_batch, weight_indices, *args, **kwargs):
        original(forward_batch, weight_indices, *args, **kwargs)
        info = backend.batch_info
        if not info.use_cuda_graph and info.num_segments > 1:
            first = int(info.weight_indices_cpu[0])
            info.weight_indices[: info.num_segments].fill_(first)
            info.weight_indices_cpu = info.weight_indices_cpu.clone().fill_(first)
    return prepare_lora_batch


class _RankPastBridge:
    """A Triton kernel whose launches get ``lora_ranks_ptr`` + 1 (at most the pool's ``RANK``)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def run(*args, **kwargs):
            import inspect
            params = inspect.signature(self.kernel.fn).parameters
            bound = inspect.signature(self.kernel.fn).bind_partial(
                *args, **{k: v for k, v in kwargs.items() if k in params})
            ranks, top = bound.arguments.get("lora_ranks_ptr"), bound.arguments.get("RANK")
            if ranks is not None and top is not None:
                bound.arguments["lora_ranks_ptr"] = (ranks + 1).clamp(max=top).to(ranks.dtype)
            return launch(*bound.args, **bound.kwargs, **{k: v for k, v in kwargs.items() if k not in params})
        return run


__all__ = ["FAULTS", "NEEDS", "plant", "unavailable"]
