"""Strategy helpers for target authors: op sequences built by rules over a model of adapter slots.

Bugs of LoRA runners live in deep adapter states: a slot reassigned between two identical
mappings, an eviction when every slot is taken, a batch repeated after its adapter moved. A
flat list of independently drawn ops reaches those rarely (a user's slot-reassignment bug was
not reached in ~350 examples on each of 2 seeds). In the spirit of Hypothesis' rule-based state
machines, ``OpSequence`` draws each op from the rules whose precondition holds *now*, and
``AdapterSlots`` keeps the bundle of live adapter ids and models which slot each one holds
(first free slot, least-recently-used eviction, as vLLM's and the reference runner's managers
do), so rules can pick what makes a deep state likely: re-add a live adapter, remove a resident
one, repeat the last mapping or a part of it, bring in an adapter when the slots are full::

    seq = OpSequence()

    @seq.rule(weight=2)
    def add(draw, s):
        aid = draw(s.adapter_to_add())
        s.add(aid)
        return {"op": "add_adapter", "adapter_id": aid}

    @seq.rule(precondition=lambda s: s.live)
    def step(draw, s):
        return {"op": "step", "adapters": s.activate(draw(s.batch()))}

    @seq.rule(precondition=lambda s: s.movable())   # a slot reassigned under the same mapping
    def move(draw, s):
        x, y = draw(st.sampled_from(s.movable()))
        s.remove(y)
        s.add(x)
        return [{"op": "remove_adapter", "adapter_id": y}, {"op": "add_adapter", "adapter_id": x}]

    ops = draw(seq.ops(lambda: AdapterSlots(slots=2, ids=range(1, 7)), max_ops=8))

Everything drawn is plain JSON (the rules return ops as dicts), so cases replay without
Hypothesis, and shrinking deletes whole ops (each is drawn after a "go on" choice).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hypothesis import strategies as st

from .errors import InvalidArgument

__all__ = ["AdapterSlots", "OpSequence"]


@dataclass(frozen=True)
class _Rule:
    name: str
    body: Callable       # body(draw, state) -> dict | list[dict] | None (None: nothing this time)
    weight: int | Callable  # or weight(state) -> int, 0 while the rule makes no sense
    precondition: Callable | None

    def weight_in(self, state) -> int:
        if self.precondition is not None and not self.precondition(state):
            return 0
        return self.weight(state) if callable(self.weight) else self.weight


def _check_weight(weight) -> None:
    if callable(weight):
        return
    if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
        raise InvalidArgument(f"rule weight={weight!r} must be an integer from 1 to 100, or weight(state) -> int.")


class OpSequence:
    """Rules that each add op(s) to a case, drawn while their precondition holds on the state;
    ``initialize`` rules run once each, first (as Hypothesis' ``@initialize``)."""

    def __init__(self) -> None:
        self.rules: list[_Rule] = []
        self.initializers: list[_Rule] = []

    def rule(self, *, weight: int | Callable = 1, precondition: Callable | None = None) -> Callable:
        """Decorator: ``body(draw, state)`` returns the op (or ops) it adds and updates ``state``.
        ``weight`` (or ``weight(state)``) makes a rule more likely than others in a state."""
        _check_weight(weight)

        def register(body: Callable) -> Callable:
            self.rules.append(_Rule(body.__name__, body, weight, precondition))
            return body
        return register

    def initialize(self, body: Callable) -> Callable:
        """Decorator: a rule run once, before the others (e.g. the adapters a server starts with)."""
        self.initializers.append(_Rule(body.__name__, body, 1, None))
        return body

    def enabled(self, state) -> list[tuple[_Rule, int]]:
        return [(r, w) for r in self.rules if (w := r.weight_in(state)) > 0]

    def ops(self, make_state: Callable, *, max_ops: int = 8, go_on_odds: int = 3):
        """A strategy of op lists (at most ``max_ops``): after each op, going on is ``go_on_odds``
        times as likely as stopping; stopping (0) is what shrinking goes to."""
        if not self.rules:
            raise InvalidArgument("an OpSequence needs at least one rule; add one with @seq.rule().")

        def add(out: list, made) -> None:
            out += [] if made is None else [made] if isinstance(made, dict) else list(made)

        @st.composite
        def draw_ops(draw) -> list:
            state = make_state()
            out: list[dict] = []
            for r in self.initializers:
                add(out, r.body(draw, state))
            while len(out) < max_ops:
                rules = self.enabled(state)
                if not rules:
                    break
                weighted = [r for r, w in rules for _ in range(w)]
                add(out, draw(st.sampled_from(weighted)).body(draw, state))
                if draw(st.integers(0, go_on_odds)) == 0:
                    break
            return out[:max_ops]
        return draw_ops()


class AdapterSlots:
    """A model of the adapter manager: the bundle of live (registered) ids and the slot each holds.

    ``add``/``remove`` register and unregister (re-adding a live id frees its slot, as a runner
    reloading an adapter does); ``activate(ids)`` gives each id of a batch a slot (first free,
    else the least recently used one not in the batch is evicted) and remembers the batch.
    """

    def __init__(self, slots: int, ids: Iterable[int]):
        self.slots, self.ids = slots, tuple(ids)
        self.live: list[int] = []                      # registered, oldest first
        self.table: list[int | None] = [None] * slots   # slot -> adapter id
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.last_batch: list[int] | None = None        # adapter ids of the last batch, per request
        self.evictions = 0
        self.churned = False                            # a resident adapter left its slot since the last batch

    # -- the model ------------------------------------------------------------------------------
    def add(self, adapter_id: int) -> None:
        if adapter_id in self.live:
            self.remove(adapter_id)
        self.live.append(adapter_id)

    def remove(self, adapter_id: int) -> None:
        if adapter_id in self.table:
            self.table[self.table.index(adapter_id)] = None
            self.churned = True
        self._lru.pop(adapter_id, None)
        if adapter_id in self.live:
            self.live.remove(adapter_id)

    def resident(self) -> list[int]:
        return [a for a in self.table if a is not None]

    def full(self) -> bool:
        return None not in self.table

    def by_age(self) -> list[int]:
        """Resident adapters, the least recently used first (the next one an activation evicts)."""
        return [a for a in self._lru if a in self.table]

    def slot_of(self, adapter_id: int) -> int | None:
        return self.table.index(adapter_id) if adapter_id in self.table else None

    def activate(self, batch: list[int]) -> list[int]:
        """Model a batch (adapter id per request, 0 = none) taking slots; returns ``batch``."""
        needed = [a for a in dict.fromkeys(batch) if a > 0]
        for a in needed:
            if a not in self.table:
                if self.full():
                    victim = next(v for v in self._lru if v not in needed)
                    self.table[self.table.index(victim)] = None
                    self._lru.pop(victim)
                    self.evictions += 1
                self.table[self.table.index(None)] = a
            self._lru[a] = None
            self._lru.move_to_end(a)
        self.last_batch, self.churned = list(batch), False
        return batch

    def movable(self) -> list[tuple[int, int]]:
        """``(x, y)`` pairs where removing resident ``y`` and re-adding ``x`` moves ``x`` to another slot
        before the last batch runs again: ``x`` is in the last batch, ``y`` is not and holds a lower slot
        (the first free slot is where a re-added adapter lands)."""
        last = set(self.last_batch or ()) - {0}
        return [(x, y) for x in sorted(last) if x in self.table for y in self.resident()
                if y not in last and self.table.index(y) < self.table.index(x)]

    # -- strategies over the model ----------------------------------------------------------------
    def adapter_to_add(self):
        """A new id from the pool, or a live one again (its slot is freed: a later identical
        mapping may land it elsewhere)."""
        new = [a for a in self.ids if a not in self.live]
        choices = ([st.sampled_from(new)] * 3 if new else []) + ([st.sampled_from(self.live)] if self.live else [])
        return st.sampled_from(choices).flatmap(lambda c: c)  # a new id three times as often

    def live_adapter(self):
        """A live id, those holding a slot first (removing one frees a slot)."""
        return st.sampled_from(self.resident() + [a for a in self.live if a not in self.table])

    def batch(self, *, max_requests: int = 4):
        """Adapter ids of a batch's requests (0 = none), at most ``slots`` distinct. Weighted by the state:
        the last batch again (a repeated mapping: most likely right after its slots changed) or a part
        of it; with every slot taken, one adapter that must evict; one live adapter; every live adapter
        in some order; or any live ones and none."""
        live, last = self.live, self.last_batch
        options = [(2, st.lists(st.sampled_from([*live, 0]), min_size=1, max_size=max_requests).map(self._fit))]
        if last is not None and all(a == 0 or a in live for a in last):
            options.append((6 if self.churned else 2, st.just(list(last))))
            if len(last) > 1:
                options.append((2, st.sets(st.sampled_from(range(len(last))), min_size=1, max_size=len(last) - 1)
                                .map(lambda keep: [last[i] for i in sorted(keep)])))
        if live:
            options.append((2, st.sampled_from(live).map(lambda a: [a])))
        idle = [a for a in live if a not in self.table]
        if idle and not self.full():  # one that takes the next free slot: the slots fill up
            options.append((8, st.sampled_from(idle).map(lambda a: [a])))
        if len(live) > 1:
            options.append((2, st.permutations(live).map(lambda ids: self._fit(ids[:max_requests]))))
        if self.full() and idle:  # one that must evict
            options.append((3, st.sampled_from(idle).map(lambda a: [a])))
        return st.sampled_from([o for w, o in options for _ in range(w)]).flatmap(lambda o: o)

    def _fit(self, batch: list[int]) -> list[int]:
        """At most ``slots`` distinct adapters: later newcomers become no-adapter requests."""
        seen: list[int] = []
        out = []
        for a in batch:
            if a and a not in seen and len(seen) >= self.slots:
                a = 0
            if a and a not in seen:
                seen.append(a)
            out.append(a)
        return out
