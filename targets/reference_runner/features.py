"""What a reference_runner case exercises, from its JSON alone (no torch): coverage features.

Besides op and dummy-run kinds, it follows the adapter slots as ``AdapterManager`` assigns them
(first free slot, least-recently-used eviction), so deep states show: an eviction, and an
adapter moved to another slot between two identical mappings (where the ``_last_mapping``
shortcut must not reuse the old slots).
"""

from __future__ import annotations

from collections import OrderedDict

from fuzzrunner.runner.model_runner import DUMMY_KINDS

OPS = ("add_adapter", "remove_adapter", "step", "replay", "dummy_run", "capture")
FEATURE_SPACE = tuple(
    [f"op={o}" for o in OPS] + [f"dummy={k}" for k in DUMMY_KINDS]
    + [f"batch_adapters={n}" for n in ("0", "1", "2", "3+")]
    + ["batch=mixed", "batch=padded", "batch=no-lora-after-lora", "mapping=repeated",
       "replay=graph", "replay=eager-fallback", "capture=after-adapters", "adapter=re-added",
       "slots=full", "slots=eviction", "slots=moved-between-same-mappings",
       "specialize_active_lora=on", "specialize_active_lora=off"]
    + [f"max_loras={n}" for n in (1, 2, 3, 4)])


class _Slots:
    """AdapterManager's slot table, without weights."""

    def __init__(self, n: int):
        self.table: list = [None] * n
        self.lru: OrderedDict = OrderedDict()
        self.registered: set = set()

    def remove(self, aid: int) -> None:
        if aid in self.table:
            self.table[self.table.index(aid)] = None
            self.lru.pop(aid, None)
        self.registered.discard(aid)

    def activate(self, ids: list, out: set) -> None:
        needed = [i for i in dict.fromkeys(ids) if i > 0]
        for i in needed:
            if i not in self.table:
                if None not in self.table:
                    victim = next((v for v in self.lru if v not in needed), None)
                    if victim is None:
                        return  # more adapters than slots: the runner rejects it
                    self.table[self.table.index(victim)] = None
                    self.lru.pop(victim)
                    out.add("slots=eviction")
                self.table[self.table.index(None)] = i
            self.lru[i] = None
            self.lru.move_to_end(i)
        if None not in self.table:
            out.add("slots=full")


class _Walk:
    """One pass over the ops, collecting features."""

    def __init__(self, config: dict):
        self.out: set = set()
        self.sizes = sorted(config.get("capture_sizes") or [])
        self.slots = _Slots(config.get("max_loras", 1))
        self.captured: list = []
        self.last_mapping = None
        self.last_slots = None
        self.lora_seen = False

    def op(self, op: dict) -> None:
        kind = op.get("op")
        self.out.add(f"op={kind}")
        if kind == "add_adapter":
            if op.get("adapter_id") in self.slots.registered:
                self.out.add("adapter=re-added")
            self.slots.remove(op.get("adapter_id"))
            self.slots.registered.add(op.get("adapter_id"))
        elif kind == "remove_adapter":
            self.slots.remove(op.get("adapter_id"))
        elif kind == "dummy_run":
            self.out.add(f"dummy={op.get('kind')}")
            self._mapping(("dummy",))
        elif kind == "capture":
            self.captured.append(op.get("size", 0))
            if self.slots.registered:
                self.out.add("capture=after-adapters")
            self._mapping(("dummy",))
        elif kind in ("step", "replay"):
            self._batch(kind, op.get("requests") or [])

    def _batch(self, kind: str, requests: list) -> None:
        ids = [r.get("adapter_id", 0) for r in requests for _ in r.get("tokens", [])]
        n, distinct = len(ids), {i for i in ids if i > 0}
        self.out.add(f"batch_adapters={len(distinct) if len(distinct) < 3 else '3+'}")
        if distinct and 0 in ids:
            self.out.add("batch=mixed")
        if not distinct and self.lora_seen:
            self.out.add("batch=no-lora-after-lora")
        self.lora_seen = self.lora_seen or bool(distinct)
        fits = [s for s in self.captured if s >= n]
        if kind == "replay":
            self.out.add("replay=graph" if fits else "replay=eager-fallback")
        padded = min(fits) if kind == "replay" and fits else next((s for s in self.sizes if s >= n), n)
        if padded > n:
            self.out.add("batch=padded")
        self.slots.activate(ids, self.out)
        self._mapping(tuple(ids))

    def _mapping(self, mapping: tuple) -> None:
        table = self.slots.table
        slots = tuple(table.index(i) if i in table else None for i in dict.fromkeys(mapping) if i != "dummy" and i > 0)
        if mapping == self.last_mapping:
            self.out.add("mapping=repeated")
            if slots != self.last_slots:
                self.out.add("slots=moved-between-same-mappings")
        self.last_mapping, self.last_slots = mapping, slots


def features(case) -> set:
    config = case.config
    walk = _Walk(config)
    walk.out.add(f"max_loras={config.get('max_loras')}")
    walk.out.add(f"specialize_active_lora={'on' if config.get('specialize_active_lora') else 'off'}")
    for op in case.ops:
        walk.op(op)
    return walk.out
