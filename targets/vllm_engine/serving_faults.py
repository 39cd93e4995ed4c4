"""Planted faults in the serving layer (serving.py) and the prefix cache (prefix_cache.py): each replaces one piece of
vLLM's for the length of a case, as ``faults.py``'s do (which merges these into the target's ``FAULTS``)."""

from __future__ import annotations

import contextlib
import functools

FAULTS = {
    "serving_reuses_freed_id":
        "OpenAIServingModels hands a newly loaded adapter the lowest lora_int_id no served name holds, instead of the "
        "next value of its counter: an id freed by an unload is given to the next load, while the worker still holds "
        "the unloaded adapter under it (add_lora of a registered id loads nothing), so the new name serves the old "
        "weights.",
    "block_hash_without_adapter":
        "the prefix cache's block hash leaves the adapter out (_gen_lora_extra_hash_keys returns no keys): a request "
        "of one adapter, of another or of the base model reuses the KV blocks another wrote over the same prompt "
        "prefix.",
}


def unavailable(found: dict) -> dict:
    from . import serving_missing
    why = serving_missing()
    return {f: why for f in FAULTS} if why else {}


class _LowestFree:
    """The fault's id counter: ``inc`` answers the lowest id no served name holds."""

    def __init__(self, models):
        self.models = models

    def inc(self, n: int = 1) -> int:
        held = {r.lora_int_id for r in self.models.lora_requests.values()}
        return next(i for i in range(1, len(held) + 2) if i not in held)


def _reuses_freed_id(stack: contextlib.ExitStack, found: dict) -> None:
    from . import serving
    from .faults import _patched
    cls = serving.find()["OpenAIServingModels"]
    original = cls.__init__

    @functools.wraps(original)  # its signature stays vLLM's (serving.py passes the constructor what it takes)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.lora_id_counter = _LowestFree(self)
    stack.enter_context(_patched(cls, "__init__", __init__))


def _hash_without_adapter(stack: contextlib.ExitStack, found: dict) -> None:
    from vllm.v1.core import kv_cache_utils

    from .faults import _patched
    stack.enter_context(_patched(kv_cache_utils, "_gen_lora_extra_hash_keys", lambda request: []))


PLANT = {"serving_reuses_freed_id": _reuses_freed_id, "block_hash_without_adapter": _hash_without_adapter}
