"""Cases for ``vllm_engine``: an engine's LoRA configuration, its adapters, and the ops its worker sees.

Config (plain JSON; every LoRA knob is vLLM's own ``LoRAConfig`` / ``SchedulerConfig`` field, applied by vLLM):
``max_loras``, ``max_cpu_loras``, ``max_lora_rank``, ``lora_dtype``, ``fully_sharded_loras``,
``specialize_active_lora``, ``target_modules`` (the deployment filter, or null), ``max_num_seqs``,
``max_num_batched_tokens``, ``num_speculative_tokens`` (drafts a request may carry); the model
(``dtype``: float16, or bfloat16 where Triton runs compiled (``DTYPES``; absent: float16), ``hidden``,
``vocab``, ``layout``: model.py, with a Qwen3.5 linear-attention projection in half the cases (``gdn``, whose
module(s) every forward then runs); ``seed`` of its base weights; ``moe``: null, or ``{"experts", "top_k"}`` for
a sparse block of vLLM's ``FusedMoE``, moe.py); ``layers``, the layers each forward runs (model.LAYERS, and
``experts`` with a MoE block; ``lm_head`` is the logits processor); ``adapters``: id -> ``{"rank", "alpha",
"rslora", "targets", "seed"}`` (adapters.py; ``experts`` in ``targets``: every expert's w1/w2/w3).

Ops:

* ``add`` / ``remove`` / ``pin`` ``{"id"}``: the runner's ``add_lora`` (load, register, activate), ``remove_lora``,
  ``pin_lora``;
* ``step`` ``{"finish": [request ids], "reqs": [{"id", "lora", "tokens", "drafts", "prompt_logprobs"[, "prompt",
  "score_ids", "prompt_start"]}],
  "pad", "seed"}``: the requests finished before the step, then the scheduled ones (a new id is a new request, with
  adapter ``lora``, 0 = none; a live one keeps its adapter), ``pad`` rows of graph padding; a new request's
  ``prompt`` (default: its ``tokens``) is its prompt's length: a longer prompt is a chunked prefill, its later
  steps' tokens the next chunks, each at most the rest of the prompt, as vLLM's scheduler gives them
  (``case_check._check_chunks``; prompt_logprobs.py); ``score_ids`` / ``prompt_start``: its
  ``prompt_logprob_token_ids`` / ``prompt_logprob_start`` (0.31 on, prompt_scores.py);
* ``dummy_run`` ``{"num_tokens", "reqs", "pad", "seed"}``: a runtime dummy run (an idle data-parallel rank).

Ops are drawn by rules over a model of the manager (``fuzzrunner.strategies``: ``OpSequence``,
``AdapterSlots``): adapters re-added, removed while in use, pinned, brought in when every slot is taken
(eviction), moved to another slot before an identical batch runs again, requests finished and their
indices reused, decode steps with drafts, prompt-logprobs prefills, dummy runs that drop every adapter.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.strategies import AdapterSlots, OpSequence

from . import moe, prompt_scores, serving_cases
from .case_check import DTYPES, GRAPH_MODES
from .model import LAYERS, gdn, packing

POOL = 5          # adapter ids 1..POOL
GO_ON_ODDS = 7    # going on after an op is 7 times as likely as stopping
RANKS = (1, 2, 4, 8, 16)
# the linear-attention layout (model.GDN) a case draws: none in half the cases, Qwen3.5's packed ``in_proj_qkvz`` (two
# packed names over four output slices) in a third, its split form (0.20: one name over three slices) in a sixth
GDN_DRAWS = ("none", "qkvz", "none", "split", "qkvz", "none")


# -- the model the rules draw over ------------------------------------------------------------------------
class EngineState(AdapterSlots):
    """The manager's slots (AdapterSlots: first free slot, LRU eviction), plus what the worker also holds:
    pinned adapters, live requests (id -> adapter, tokens last scheduled), the last step's requests."""

    def __init__(self, cfg: dict, scoring: prompt_scores.Scoring | None = None):
        super().__init__(cfg["max_loras"], range(1, POOL + 1))
        self.cfg = cfg
        self.scoring = scoring  # the release's prompt scoring beyond prompt logprobs (prompt_scores.py), or None
        self.pinned: set[int] = set()
        self.requests: dict[str, int] = {}     # live request id -> adapter id
        self.prefill: dict[str, int] = {}      # live request id -> prompt tokens not yet scheduled (chunked prefill)
        self.last_step: list[dict] | None = None
        self.next_id = 0

    def load(self, a: int) -> None:
        """``add_lora``: registered and activated, without being a batch."""
        last, churned = self.last_batch, self.churned
        self.add(a)
        self.activate([a])
        self.last_batch, self.churned = last, churned

    def drop(self, a: int) -> None:
        self.remove(a)
        self.pinned.discard(a)

    def clear(self) -> None:
        for a in list(self.live):
            self.drop(a)

    def new_id(self) -> str:
        self.next_id += 1
        return f"r{self.next_id}"

    def room(self, batch: set[int]) -> int:
        """How many distinct adapters a step may bring beyond ``batch``: pinned ones outside it hold slots."""
        return self.slots - len(batch) - len(self.pinned - batch)


# -- rules --------------------------------------------------------------------------------------------------
OPS = OpSequence()
# Rule order matters beyond the weights: OpSequence's draw among the enabled rules favours the first ones (an
# index near 0 is what Hypothesis draws most and shrinks to), so the rules that make a deep state come first
# (enabled only in such a state), then a step, a step under eviction pressure, a runtime dummy run, the adapter ops.


def _new_requests(draw, s: EngineState, adapters: list[int], budget: int, keep: set[int]) -> list[dict]:
    out = []
    room = s.room(keep)
    for a in adapters:
        if budget < 1 or len(s.requests) + len(out) >= s.cfg["max_num_seqs"]:  # each live request holds an index
            break
        if a and a not in keep and room <= 0:
            a = 0  # a full batch: the scheduler would not schedule another adapter's request
        if a and a not in keep:
            keep.add(a)
            room -= 1
        n = draw(st.integers(1, min(4, budget)))
        budget -= n
        r = {"id": s.new_id(), "lora": a, "tokens": n, "drafts": 0,
             "prompt_logprobs": n > 1 and draw(st.booleans())}
        scoring = s.scoring if s.cfg.get("runner", "v2") == "v2" else None
        if scoring and n > 1 and not r["prompt_logprobs"] and draw(st.booleans()):
            r["prompt_logprobs"] = True  # 0.31 on: a second chance, prompt_scores.request_fields picks what is scored
        if r["prompt_logprobs"]:  # either runner's prompt logprobs (prompt_logprobs.py, v1_prompt_logprobs.py)
            more = draw(st.sampled_from([0, 0, 1, 2, 3]))  # a chunked prefill: the prompt goes on in later steps
            if more:
                r["prompt"] = n + more
                s.prefill[r["id"]] = more
            if scoring:  # token ids, a start (0.31 on): prompt_scores.py
                r.update(draw(prompt_scores.request_fields(scoring, n + more, s.cfg["vocab"])))
        out.append(r)
    return out


def _continued(draw, s: EngineState, rid: str, budget: int) -> dict | None:
    left = s.prefill.get(rid, 0)
    if left:  # the next chunk of a chunked prefill (no drafts before the prompt is done)
        n = draw(st.integers(1, min(left, budget))) if budget >= 1 else 0
        if not n:
            return None
        s.prefill[rid] = left - n
        return {"id": rid, "lora": s.requests[rid], "tokens": n, "drafts": 0, "prompt_logprobs": False}
    spec = s.cfg["num_speculative_tokens"]
    drafts = draw(st.integers(0, spec)) if spec else 0
    if 1 + drafts > budget:
        return None
    return {"id": rid, "lora": s.requests[rid], "tokens": 1 + drafts, "drafts": drafts, "prompt_logprobs": False}


def _movable(s: EngineState) -> list[int]:
    """Adapters of the last step, its requests all still live and each able to run its token count again (a request
    in its prompt with fewer tokens left would run past it: ``case_check._check_chunks``), that a reload could move to
    another slot."""
    if s.slots < 2 or not s.last_step or any(r["id"] not in s.requests or 0 < s.prefill.get(r["id"], 0) < r["tokens"]
                                             for r in s.last_step):
        return []
    return sorted({r["lora"] for r in s.last_step} - {0})


@OPS.rule(weight=8, precondition=_movable)
def move(draw, s: EngineState) -> list[dict]:
    """Move ``x`` (an adapter of the last step) to another slot and put another adapter ``z`` where it was, then
    run the same requests with the same token counts again: an identical mapping, ``x`` in a new slot. With a
    resident ``y`` in a lower slot, outside the last step: remove ``y`` and ``x``, add ``x`` (into ``y``'s slot,
    the first free one) and ``y`` (into ``x``'s old one); else remove ``x``, add ``z`` (into ``x``'s slot), add ``x``.
    vLLM does not zero a freed slot: only a slot refilled by another adapter shows a stale slot index."""
    pairs = [(x, y) for x, y in s.movable() if x in _movable(s)]
    if pairs:
        x, y = draw(st.sampled_from(pairs))
        ops = [{"op": "remove", "id": y}, {"op": "remove", "id": x}, {"op": "add", "id": x}, {"op": "add", "id": y}]
        s.drop(y)
        s.drop(x)
        s.load(x)
        s.load(y)
    else:
        x = draw(st.sampled_from(_movable(s)))
        others = [a for a in s.ids if a != x and a not in s.pinned]
        idle = [a for a in others if a not in s.table]  # not resident: it takes x's freed slot
        z = draw(st.sampled_from(idle or others))
        ops = [{"op": "remove", "id": x}, {"op": "add", "id": z}, {"op": "add", "id": x}]
        s.drop(x)
        s.load(z)
        s.load(x)
    again = [{k: v for k, v in r.items() if k not in ("score_ids", "prompt_start")} | {"prompt_logprobs": False}
             for r in s.last_step]  # type: ignore[union-attr]  (live requests: their prompt's scoring is theirs)
    for r in again:  # a request in its prompt runs its next chunk
        s.prefill[r["id"]] = max(0, s.prefill.get(r["id"], 0) - r["tokens"])
    s.activate([r["lora"] for r in again])
    return ops + [{"op": "step", "finish": [], "reqs": again, "pad": 0, "seed": draw(st.integers(0, 7))}]


def _lacks(s: EngineState, x: int, y: int) -> bool:
    """Adapter ``y`` has no weights for a module ``x`` has, in a layer the case runs."""
    run = set(s.cfg["layers"])
    pack = packing(s.cfg["layout"]) | ({moe.LAYER: (moe.LAYER,)} if s.cfg.get("moe") else {})
    tx, ty = (set(s.cfg["adapters"][str(a)]["targets"]) for a in (x, y))
    return any(m in run and set(subs) & (tx - ty) for m, subs in pack.items())


def _narrower(s: EngineState) -> list[tuple[int, int]]:
    if len(s.requests) >= s.cfg["max_num_seqs"]:
        return []
    return [(x, y) for x in s.resident() if x not in s.pinned for y in s.ids
            if y not in s.table and y not in s.pinned and _lacks(s, x, y)]


@OPS.rule(weight=4, precondition=_narrower)
def reuse_slot(draw, s: EngineState) -> list[dict]:
    """Free the slot of ``x`` (remove it) and run a request of ``y``, which lacks a module ``x`` has: ``y`` takes a
    slot whose layers last held ``x``'s weights."""
    x, y = draw(st.sampled_from(_narrower(s)))
    s.drop(x)
    r = {"id": s.new_id(), "lora": y, "tokens": draw(st.integers(1, 2)), "drafts": 0, "prompt_logprobs": False}
    s.requests[r["id"]] = y
    s.add(y)
    s.activate([y])
    s.last_step = [r]
    return [{"op": "remove", "id": x}, {"op": "step", "finish": [], "reqs": [r], "pad": 0,
                                        "seed": draw(st.integers(0, 7))}]


@OPS.rule(weight=lambda s: 12 if s.churned else 6)
def step(draw, s: EngineState) -> dict:
    live = sorted(s.requests)
    finish = sorted(draw(st.sets(st.sampled_from(live), max_size=len(live)))) if live else []
    for rid in finish:
        del s.requests[rid]
    budget, reqs, keep = s.cfg["max_num_batched_tokens"], [], set()
    for rid in sorted(s.requests):
        a = s.requests[rid]
        if draw(st.booleans()) and (not a or a in keep or s.room(keep) > 0):
            r = _continued(draw, s, rid, budget)
            if r is not None:
                reqs.append(r)
                budget -= r["tokens"]
                keep |= {a} - {0}
    reqs += _new_requests(draw, s, draw(s.batch(max_requests=3)), budget, keep)
    if not reqs and len(s.requests) < s.cfg["max_num_seqs"]:
        reqs = _new_requests(draw, s, [0], budget, set())
    if not reqs:  # every index held by a request left unscheduled: schedule one of them
        rid = sorted(s.requests)[0]
        reqs = [{"id": rid, "lora": s.requests[rid], "tokens": 1, "drafts": 0, "prompt_logprobs": False}]
        if s.prefill.get(rid):
            s.prefill[rid] -= 1
    for r in reqs:
        s.requests[r["id"]] = r["lora"]
    for a in {r["lora"] for r in reqs} - {0}:
        if a not in s.live:
            s.add(a)  # a request's adapter is loaded by set_active_adapters
    s.activate([r["lora"] for r in reqs])
    s.last_step = reqs
    used = sum(r["tokens"] for r in reqs)
    pad = draw(st.sampled_from([0, 0, 0, s.cfg["max_num_batched_tokens"] - used]))
    return {"op": "step", "finish": finish, "reqs": reqs, "pad": pad, "seed": draw(st.integers(0, 7))}


def _drain_keep(s: EngineState) -> list[str]:
    """V1 runner: the requests ``drain`` may go on with alone: one of the last step's but its first (so that another
    of that step's requests sits in the batch below it), last ones first, whose adapter needs no slot a pin holds."""
    if s.cfg.get("runner") != "v1" or not s.last_step or len(s.last_step) < 2:
        return []
    return [r["id"] for r in reversed(s.last_step[1:]) if r["id"] in s.requests and
            (not s.requests[r["id"]] or s.requests[r["id"]] in s.table or s.room(set()) > 0)]


@OPS.rule(weight=6, precondition=_drain_keep)
def drain(draw, s: EngineState) -> dict:
    """V1 runner: the older requests finished or left unscheduled, a newer one goes on, and at most one new request:
    the persistent batch has holes below a live request, which ``condense()`` fills by moving it down (its LoRA
    mapping entry with it), or the new request fills the lowest, a prefill below a decode, which the decode-first
    reorder swaps (``swap_states``)."""
    rid = draw(st.sampled_from(_drain_keep(s)))
    older = [r for r in sorted(s.requests) if r != rid]
    finish = sorted(draw(st.sets(st.sampled_from(older), max_size=len(older))))
    for r in finish:
        del s.requests[r]
    a = s.requests[rid]
    if a and a not in s.live:
        s.add(a)
    r = _continued(draw, s, rid, s.cfg["max_num_batched_tokens"])
    assert r is not None  # 1 + drafts <= 3 < max_num_batched_tokens
    reqs = [r]
    if draw(st.booleans()):
        reqs += _new_requests(draw, s, draw(s.batch(max_requests=1)), s.cfg["max_num_batched_tokens"] - r["tokens"],
                              {a} - {0})
    for q in reqs[1:]:
        s.requests[q["id"]] = q["lora"]
        if q["lora"] and q["lora"] not in s.live:
            s.add(q["lora"])
    s.activate([q["lora"] for q in reqs])
    s.last_step = reqs
    return {"op": "step", "finish": finish, "reqs": reqs, "pad": 0, "seed": draw(st.integers(0, 7))}


def _pressure(s: EngineState) -> bool:
    """Two or more slots, fewer pins than slots - 1, and adapters enough to fill them and bring one more in."""
    free = [a for a in s.ids if a not in s.pinned]
    return s.slots >= 2 and len(s.pinned) < s.slots - 1 and len(free) > s.slots


@OPS.rule(weight=3, precondition=_pressure)
def evict_under_use(draw, s: EngineState) -> list[dict]:
    """Fill every slot (``add``), then one step with a request of the least recently used adapter (first in the
    batch's order: decode-sized) and one of an adapter that is not resident, so that bringing it in must evict
    another adapter than the one the step also uses."""
    ops: list[dict] = []
    while not s.full():
        a = draw(st.sampled_from([a for a in s.ids if a not in s.table]))
        s.load(a)
        ops.append({"op": "add", "id": a})
    old = next(a for a in s.by_age() if a not in s.pinned)
    c = draw(st.sampled_from([a for a in s.ids if a not in s.table and a not in s.pinned]))
    finish = sorted(s.requests)[:max(0, len(s.requests) + 2 - s.cfg["max_num_seqs"])]  # room for two requests
    for rid in finish:
        del s.requests[rid]
    q = 1 + s.cfg["num_speculative_tokens"]  # the decode query length: sort_batch_req_ids puts it first
    reqs = [{"id": s.new_id(), "lora": old, "tokens": q, "drafts": 0, "prompt_logprobs": False},
            {"id": s.new_id(), "lora": c, "tokens": q + 1, "drafts": 0, "prompt_logprobs": False}]
    if 2 * q + 1 > s.cfg["max_num_batched_tokens"]:
        reqs[1]["tokens"] = 1
    for r in reqs:
        s.requests[r["id"]] = r["lora"]  # type: ignore[index]
    s.add(c)
    s.activate([old, c])
    s.last_step = reqs
    return ops + [{"op": "step", "finish": finish, "reqs": reqs, "pad": 0, "seed": draw(st.integers(0, 7))}]


@OPS.rule(weight=lambda s: 3 if s.live else 1)  # a dummy run beside registered adapters: the state it meets
def dummy_run(draw, s: EngineState) -> dict:
    t = s.cfg["max_num_batched_tokens"]
    n = draw(st.integers(1, t))
    s.clear()  # the dummy run removes every adapter (maybe_dummy_run_with_lora(remove_lora=True))
    s.last_step = None
    return {"op": "dummy_run", "num_tokens": n, "reqs": draw(st.integers(1, min(n, s.cfg["max_num_seqs"]))),
            "pad": draw(st.sampled_from([0, t - n])), "seed": draw(st.integers(0, 7))}


@OPS.rule(weight=3)
def add(draw, s: EngineState) -> dict:
    a = draw(s.adapter_to_add())
    if len(s.pinned - {a}) >= s.slots:  # every slot pinned: vLLM would refuse; load a pinned one again instead
        a = draw(st.sampled_from(sorted(s.pinned)))
    s.load(a)
    return {"op": "add", "id": a}


@OPS.rule(precondition=lambda s: s.live)
def remove(draw, s: EngineState) -> dict:
    a = draw(s.live_adapter())
    s.drop(a)
    return {"op": "remove", "id": a}


def _pinnable(s: EngineState) -> list[int]:
    """Resident adapters not pinned, while a pin leaves a slot for the others."""
    return [a for a in s.resident() if a not in s.pinned] if len(s.pinned) < s.slots - 1 else []


@OPS.rule(weight=2, precondition=_pinnable)
def pin(draw, s: EngineState) -> dict:
    a = draw(st.sampled_from([a for a in s.resident() if a not in s.pinned]))
    s.pinned.add(a)
    return {"op": "pin", "id": a}


# -- configs ------------------------------------------------------------------------------------------------
@st.composite
def _adapter(draw, max_rank: int, subs: list[str], groups: tuple = ()) -> dict:
    """An adapter's spec; ``groups``: the packed names of a module whose names span several output slices (the
    linear attention's ``in_proj_qkvz``: model.GDN), of which a third of the adapters that target them all keep one
    name only (a partial adapter: vllm-project/vllm#47639's ``in_proj_qkv`` without ``in_proj_z``, or the converse)."""
    targets = draw(st.sampled_from([subs, subs, "some"]))
    if targets == "some":
        targets = sorted(draw(st.sets(st.sampled_from(subs), min_size=1, max_size=len(subs))))
    for names in groups:
        if set(names) <= set(targets) and draw(st.integers(0, 2)) == 0:
            drop = set(names) - {draw(st.sampled_from(names))}
            targets = [t for t in targets if t not in drop]
    return {"rank": draw(st.sampled_from([r for r in RANKS if r <= max_rank])), "alpha": draw(st.sampled_from([8, 16])),
            "rslora": draw(st.integers(0, 4)) == 0, "targets": list(targets), "seed": draw(st.integers(0, 99))}


def _moe_knob(draw, device: str, moe_blocks: bool) -> dict | None:
    """A MoE block in about one case in three (moe.py: expert counts for which vLLM's naive paths cover the
    batches) on the devices of ``moe.DEVICES``, half of them with 3D-format adapters (``"format": "3d"``:
    ``FusedMoE3DWithLoRA``) on those of ``moe.DEVICES_3D`` (the CPU, and cuda since scripts/gpu/vllm_engine_moe3d.py
    passed on an H100); ``moe_blocks``: this vLLM can build one (moe.unavailable)."""
    if not moe_blocks or device not in moe.DEVICES or draw(st.integers(0, 2)):
        return None
    block = {"experts": draw(st.sampled_from(moe.EXPERTS)), "top_k": draw(st.sampled_from(moe.TOP_K))}
    if device in moe.DEVICES_3D and draw(st.booleans()):  # half the blocks: 3D-format adapters, FusedMoE3DWithLoRA
        block["format"] = "3d"
    return block


@st.composite
def graph_config(draw, max_tokens: int, query_len: int) -> dict:
    """The graph knobs, as vLLM's ``CompilationConfig`` fields: ``cudagraph_mode``, ``cudagraph_capture_sizes``,
    ``cudagraph_specialize_lora`` (on 3 times in 4: vLLM's default)."""
    sizes = sorted(draw(st.sets(st.sampled_from([n for n in (1, 2, 4, 8, 16) if n <= max_tokens]),
                                min_size=1, max_size=3)))
    if sizes[-1] < query_len:  # a FULL decode graph needs a size >= 1 + num_speculative_tokens (case_check)
        sizes.append(next(n for n in (2, 4, 8, 16) if n >= query_len))
    return {"cudagraph_mode": draw(st.sampled_from(GRAPH_MODES[1:] + ("NONE",))),
            "cudagraph_capture_sizes": sizes, "cudagraph_specialize_lora": draw(st.integers(0, 3)) > 0}


@st.composite
def runner_config(draw, max_tokens: int, query_len: int) -> dict:
    """The V1 runner's knobs (v1_runner.py): the graph knobs (``graph_config``), the attention backend's reorder
    threshold (None: no reorder)."""
    return {"runner": "v1", **draw(graph_config(max_tokens, query_len)),
            "reorder_threshold": draw(st.sampled_from([None, 1, 2]))}


@st.composite
def engine_config(draw, device: str = "cpu", runners: tuple = ("v2",), v2_graphs: bool = False,
                  moe_blocks: bool = True) -> dict:
    max_loras = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(DTYPES[device]))
    layout = {"qkv": draw(st.sampled_from(["merged", "fused"])), "gate_up": draw(st.sampled_from(["merged", "fused"]))}
    linear_attn = draw(st.sampled_from(GDN_DRAWS))  # Qwen3.5's linear-attention projection (model.GDN), or none
    if linear_attn != "none":
        layout["gdn"] = linear_attn
    max_rank = draw(st.sampled_from([8, 16]))
    subs = sorted({s for m in packing(layout).values() for s in m})
    layers = sorted(draw(st.sets(st.sampled_from(LAYERS), min_size=1, max_size=3)) | set(gdn(layout)))
    groups = tuple(names for _, names in gdn(layout).values() if len(names) > 1)
    wrapped = list(packing(layout))
    block = _moe_knob(draw, device, moe_blocks)
    if block:
        subs, wrapped, layers = sorted(subs + [moe.LAYER]), wrapped + [moe.LAYER], sorted(layers + [moe.LAYER])
    cfg = {
        "max_loras": max_loras, "max_cpu_loras": max_loras + draw(st.integers(0, 2)), "max_lora_rank": max_rank,
        "dtype": dtype, "lora_dtype": draw(st.sampled_from(["auto", dtype])),
        "fully_sharded_loras": not block and draw(st.integers(0, 3)) == 0,
        "specialize_active_lora": draw(st.booleans()),
        "target_modules": (None if draw(st.integers(0, 4)) else
                           sorted(draw(st.sets(st.sampled_from(wrapped), min_size=1, max_size=len(wrapped))))),
        "max_num_seqs": draw(st.integers(2, 4)), "max_num_batched_tokens": draw(st.sampled_from([8, 16])),
        "num_speculative_tokens": draw(st.integers(0, 2)),
        "hidden": draw(st.sampled_from([16, 32])), "vocab": 32, "layout": layout, "seed": draw(st.integers(0, 3)),
        "layers": layers, "moe": block,
        "adapters": {str(i): draw(_adapter(max_rank, subs, groups)) for i in range(1, POOL + 1)},
    }
    if "v1" in runners and ("v2" not in runners or draw(st.booleans())):
        cfg.update(draw(runner_config(cfg["max_num_batched_tokens"], 1 + cfg["num_speculative_tokens"])))
    elif v2_graphs and draw(st.booleans()):  # the V2 runner's CUDA graphs (v2_graphs.py: 0.15 on)
        cfg.update(draw(graph_config(cfg["max_num_batched_tokens"], 1 + cfg["num_speculative_tokens"])))
        if draw(st.booleans()):
            cfg["cudagraph_capture_sizes"] = None  # vLLM's default sizes, as a server without the option gets
    return cfg


@st.composite
def vllm_engine_cases(draw, faults: tuple = (), *, max_ops: int = 8, device: str = "cpu",
                      runners: tuple = ("v2",), v2_graphs: bool = False, moe_blocks: bool = True,
                      prompt_scoring: prompt_scores.Scoring | None = None, serving: bool = False) -> Case:
    """A case for a run on ``device`` (the campaign's): its model dtypes (``DTYPES``); ``runners``: the model
    runners this vLLM has (``"v1"`` up to 0.33: V1 cases draw prompt logprobs and chunked prefills, not the V2
    runner's prompt scoring); ``v2_graphs``: its V2 runner
    has a CUDA-graph manager the target drives (v2_graphs.find: half the V2-runner cases draw the graph knobs);
    ``moe_blocks``: this vLLM can build the MoE block (0.28 and later, moe.py); ``prompt_scoring``: its prompt-logprobs
    worker scores token ids from a start (0.31 and later, prompt_scores.py: V2-runner prompt-logprobs requests draw
    them); ``serving``: this vLLM's serving layer and prefix cache import here (serving_cases.py: a third of the cases
    serve their adapters through the API, half run the prefix cache)."""
    cfg = draw(engine_config(device, runners, v2_graphs, moe_blocks))
    ops = draw(OPS.ops(lambda: EngineState(cfg, prompt_scoring), max_ops=max_ops, go_on_odds=GO_ON_ODDS))
    if cfg.get("runner") != "v1" and cfg.get("cudagraph_mode", "NONE") != "NONE":
        # a V2-runner step's padding is the graph dispatch's (v2_graphs.py)
        ops = [dict(op, pad=0) if op["op"] == "step" else op for op in ops]
    if serving:  # drawn last: the cases' other draws are those of a release before this knob
        knobs = serving_cases.knobs(draw)
        cfg.update({k: v for k, v in knobs.items() if v})
        ops = serving_cases.serving_ops(draw, cfg, ops, POOL) if cfg.get("serving") else ops
        ops = serving_cases.with_stems(draw, cfg, ops)
    return Case("vllm_engine", cfg, tuple(ops), tuple(faults))
