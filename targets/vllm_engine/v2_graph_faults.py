"""Planted faults in the V2 model runner's CUDA-graph choice with LoRA (v2_graphs.py): each replaces one method of
vLLM's for the length of a case, as ``faults.py``'s do (which merges these into the target's ``FAULTS``)."""

from __future__ import annotations

import contextlib
import inspect

FAULTS = {
    "graph_dispatch_ignores_lora":
        "the V2 runner's CudaGraphManager.dispatch keys the graph on the batch's shape alone (num_active_loras=0, as "
        "the V2 runner before #35536 keyed it): a batch with adapters replays the graph captured without LoRA, "
        "whose no-LoRA flag is frozen on.",
}


def unavailable(found: dict) -> dict:
    g = found.get("v2_graphs")
    if g is None:
        return {f: "this vLLM's V2 runner has no CUDA-graph manager that imports here" for f in FAULTS}
    if g.shape != "lora_cases":
        return {"graph_dispatch_ignores_lora": "this vLLM's V2 runner keys its graphs on the batch's shape alone "
                                               "(no LoRA capture cases before 0.24, #35536): the fault is the "
                                               "release's own dispatch"}
    return {}


def _dispatch_without_lora(stack: contextlib.ExitStack, found: dict) -> None:
    from .faults import _patched
    cls = found["v2_graphs"].module.CudaGraphManager
    original = cls.__dict__["dispatch"]
    at = list(inspect.signature(original).parameters).index("num_active_loras")  # self counted

    def dispatch(self, *args, **kwargs):
        if "num_active_loras" in kwargs:
            kwargs["num_active_loras"] = 0
        elif len(args) >= at:
            args = args[:at - 1] + (0,) + args[at:]
        return original(self, *args, **kwargs)
    stack.enter_context(_patched(cls, "dispatch", dispatch))


PLANT = {"graph_dispatch_ignores_lora": _dispatch_without_lora}
