"""The baseline of benchmarks/coverage_steering.py: reference_runner's case strategy before the stateful
op-sequence builder (fuzzrunner.strategies): each op drawn flat, from a fixed list of kinds. ``FLAT`` is
the reference runner with this strategy (same runner, schema and features), loaded as FILE.py:FLAT.

Hypothesis strategies for reference_runner cases (as they were).

Draws are ordered so that shrinking reaches the minimal case: the op count first,
then each op's kind (``dummy_run`` first, so a bug a dummy run shows shrinks to
one), then small sizes; adapter id 0 ("no adapter") is everyone's simplest choice.
"""

from __future__ import annotations

import dataclasses

from fuzzrunner.targets.reference_runner import TARGET as REFERENCE
from fuzzrunner.targets.reference_runner.cases import runner_configs  # the configs are not what differs
from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.runner.config import RunnerConfig
from fuzzrunner.runner.model_runner import DUMMY_KINDS

# "warmup_1" is a 1-token warm-up dummy run with no further choices: the simplest op of all.
# Later entries repeat kinds to weight them: adapters, steps and replays are what bugs need.
OP_KINDS = ("warmup_1", "dummy_run", "step", "add_adapter", "capture", "replay", "remove_adapter",
            "capture_replay", "add_adapter", "replay", "step", "capture_replay")
MAX_ADAPTER_ID = 6


@st.composite
def requests(draw, cfg: RunnerConfig, adapters: list[int], max_tokens: int) -> list[dict]:
    """A batch: each request an adapter id (0 = none) and token ids; <= max_loras distinct adapters."""
    n = draw(st.integers(1, max(1, min(4, cfg.max_num_reqs, max_tokens))))
    budget, used, out = max_tokens, set(), []
    for i in range(n):
        if budget - (n - i - 1) < 1:
            break
        k = draw(st.integers(1, max(1, min(8, budget - (n - i - 1)))))
        budget -= k
        a = draw(st.sampled_from(adapters + [0])) if adapters else 0  # registered adapters first
        if a and a not in used and len(used) >= cfg.max_loras:
            a = 0
        if a:
            used.add(a)
        t0 = draw(st.integers(0, cfg.vocab_size - 1))
        out.append({"adapter_id": a, "tokens": [(t0 + 7 * j) % cfg.vocab_size for j in range(k)]})
    return out


class _OpState:
    """What earlier ops of the case left behind: registered adapters, captured sizes, last batch."""

    def __init__(self):
        self.registered: dict[int, int] = {}
        self.captured: list[int] = []
        self.last_requests = None


@st.composite
def runner_op(draw, cfg: RunnerConfig, state: _OpState) -> list[dict]:
    """Usually one op; ``capture_replay`` is a capture and a replay that fits it, back to back."""
    kind = draw(st.sampled_from(OP_KINDS))
    if kind == "capture_replay":
        capture = draw(_one_op(cfg, state, "capture"))
        return [capture, draw(_one_op(cfg, state, "replay", limit=capture["size"]))]
    return [draw(_one_op(cfg, state, kind))]


@st.composite
def _one_op(draw, cfg: RunnerConfig, state: _OpState, kind: str, limit: int | None = None) -> dict:
    if kind == "warmup_1":
        return {"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}
    if kind == "dummy_run":
        v = draw(st.integers(0, cfg.max_num_tokens * len(DUMMY_KINDS) - 1))
        return {"op": "dummy_run", "num_tokens": v // len(DUMMY_KINDS) + 1, "kind": DUMMY_KINDS[v % len(DUMMY_KINDS)]}
    if kind == "add_adapter" or (kind == "remove_adapter" and not state.registered):
        aid = draw(st.integers(1, MAX_ADAPTER_ID))
        rank = draw(st.integers(1, cfg.max_lora_rank))
        state.registered[aid] = rank
        return {"op": "add_adapter", "adapter_id": aid, "rank": rank}
    if kind == "remove_adapter":
        aid = draw(st.sampled_from(sorted(state.registered)))
        del state.registered[aid]
        return {"op": "remove_adapter", "adapter_id": aid}
    if kind == "capture" or (kind == "replay" and not state.captured):  # a replay needs a graph first
        size = draw(st.sampled_from(cfg.capture_sizes[::-1]))  # largest first: room for mixed batches
        state.captured.append(size)
        return {"op": "capture", "size": size}
    return {"op": kind, "requests": draw(_batch(cfg, state, kind, limit))}


@st.composite
def _batch(draw, cfg: RunnerConfig, state: _OpState, kind: str, limit: int | None) -> list[dict]:
    """A step's or a replay's requests; often the last batch again (the "same mapping" shortcut)."""
    last = state.last_requests
    if limit is None:
        limit = max(state.captured) if kind == "replay" else cfg.max_num_tokens
    if last is not None and draw(st.booleans()) \
            and all(r["adapter_id"] in state.registered or r["adapter_id"] == 0 for r in last) \
            and sum(len(r["tokens"]) for r in last) <= limit:
        reqs = last
    else:
        reqs = draw(requests(cfg, sorted(state.registered), limit))
    state.last_requests = reqs
    return reqs


@st.composite
def runner_ops(draw, cfg: RunnerConfig, max_ops: int = 8) -> list[dict]:
    """Ops drawn like a list (a continue choice before each further op) so shrinking can delete any op.

    Going on is 3 times as likely as stopping (mean ~4 ops): bugs that need add, capture
    and replay in order are reached, and 0 (stop) is still what shrinking goes to.
    """
    state, ops = _OpState(), []
    while True:
        ops += draw(runner_op(cfg, state))
        if len(ops) >= max_ops or draw(st.integers(0, 3)) == 0:
            return ops[:max_ops]


@st.composite
def cases(draw, faults: tuple = (), *, max_ops: int = 8) -> Case:
    cfg = draw(runner_configs())
    ops = draw(runner_ops(cfg, max_ops))
    return Case("reference_runner", cfg.to_dict(), tuple(ops), tuple(faults))


FLAT = dataclasses.replace(REFERENCE, cases=cases)
