"""Hypothesis strategies for reference_runner cases: op sequences from the stateful builder.

Each op is drawn from the rules (``fuzzrunner.strategies.OpSequence``) that make sense in the
state the earlier ops left: a replay once a graph is captured, a removal once an adapter is
live. The adapter model (``AdapterSlots``) follows which slot each adapter holds, so batches
often repeat the last mapping (or a part of it), re-add a live adapter, remove a resident one,
or bring in one that must evict: the deep slot states where the ``_last_mapping`` shortcut and
eviction bugs live. Rule order puts the simplest first (a 1-token warm-up dummy run), so a bug
a dummy run shows shrinks to one; adapter id 0 ("no adapter") is everyone's simplest choice.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.runner.config import RunnerConfig
from fuzzrunner.runner.model_runner import DUMMY_KINDS
from fuzzrunner.strategies import AdapterSlots, OpSequence

MAX_ADAPTER_ID = 6
GO_ON_ODDS = 11  # going on after an op is 11 times as likely as stopping: deep states need ~7 ops


@st.composite
def runner_configs(draw, *, hidden_size: int = 32, vocab_size: int = 64) -> RunnerConfig:
    max_loras = draw(st.integers(1, 4))
    max_num_tokens = draw(st.sampled_from([8, 16, 32]))
    sizes = [s for s in (1, 2, 4, 8, 16, 32) if s <= max_num_tokens]
    capture_sizes = draw(st.lists(st.sampled_from(sizes), min_size=1, max_size=len(sizes), unique=True))
    return RunnerConfig(
        max_loras=max_loras,
        max_lora_rank=draw(st.sampled_from([8, 16, 4, 1])),
        max_num_tokens=max_num_tokens,
        max_num_reqs=draw(st.integers(1, min(8, max_num_tokens))),
        capture_sizes=tuple(sorted(capture_sizes)),
        vocab_size=vocab_size, hidden_size=hidden_size,
        specialize_active_lora=draw(st.booleans()),
        seed=draw(st.integers(0, 3)))


class RunnerState(AdapterSlots):
    """The adapter slots, plus what else earlier ops left behind: captured sizes, the last batch."""

    def __init__(self, cfg: RunnerConfig):
        super().__init__(cfg.max_loras, range(1, MAX_ADAPTER_ID + 1))
        self.cfg = cfg
        self.captured: list[int] = []
        self.last_requests: list[dict] | None = None
        self.dummy_mapped = False  # a dummy run or capture programmed its own mapping since the last batch


@st.composite
def requests(draw, s: RunnerState, limit: int) -> list[dict]:
    """A batch of at most ``limit`` tokens: the adapters from the model (the last batch again keeps its
    tokens: the same mapping), each request 1..8 tokens."""
    adapters = draw(s.batch(max_requests=max(1, min(4, s.cfg.max_num_reqs, limit))))
    last = s.last_requests
    if last is not None and adapters == [r["adapter_id"] for r in last] \
            and sum(len(r["tokens"]) for r in last) <= limit:
        s.activate(adapters)
        return last
    n = min(len(adapters), s.cfg.max_num_reqs, limit)
    budget, out = limit, []
    for i, a in enumerate(adapters[:n]):
        k = draw(st.integers(1, max(1, min(8, budget - (n - i - 1)))))
        budget -= k
        t0 = draw(st.integers(0, s.cfg.vocab_size - 1))
        out.append({"adapter_id": a, "tokens": [(t0 + 7 * j) % s.cfg.vocab_size for j in range(k)]})
    s.activate([r["adapter_id"] for r in out])
    return out


def _batch_op(draw, s: RunnerState, kind: str, limit: int) -> dict:
    reqs = draw(requests(s, limit))
    s.last_requests, s.dummy_mapped = reqs, False
    return {"op": kind, "requests": reqs}


def _capture(draw, s: RunnerState) -> dict:
    size = draw(st.sampled_from(s.cfg.capture_sizes[::-1]))  # largest first: room for mixed batches
    s.captured.append(size)
    s.dummy_mapped = True  # a capture programs a dummy mapping
    return {"op": "capture", "size": size}


OPS = OpSequence()


@OPS.initialize
def load_adapters(draw, s: RunnerState) -> list[dict]:
    """The adapters a server starts with: none (the simplest) to 3, at most one more than there are slots."""
    return [add_adapter(draw, s) for _ in range(draw(st.integers(0, s.slots + 1)))]



@OPS.rule()
def warmup_1(draw, s: RunnerState) -> dict:
    """The simplest op of all: a 1-token warm-up dummy run."""
    s.dummy_mapped = True  # it programs a mapping of its own
    return {"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}


@OPS.rule()
def dummy_run(draw, s: RunnerState) -> dict:
    s.dummy_mapped = True
    v = draw(st.integers(0, s.cfg.max_num_tokens * len(DUMMY_KINDS) - 1))
    return {"op": "dummy_run", "num_tokens": v // len(DUMMY_KINDS) + 1, "kind": DUMMY_KINDS[v % len(DUMMY_KINDS)]}


@OPS.rule(weight=lambda s: 12 if s.churned else 4)  # after a slot changed, most often a batch next
def step(draw, s: RunnerState) -> dict:
    return _batch_op(draw, s, "step", s.cfg.max_num_tokens)


@OPS.rule(weight=3)
def add_adapter(draw, s: RunnerState) -> dict:
    aid = draw(s.adapter_to_add())
    s.add(aid)
    return {"op": "add_adapter", "adapter_id": aid, "rank": draw(st.integers(1, s.cfg.max_lora_rank))}


@OPS.rule()
def capture(draw, s: RunnerState) -> dict:
    return _capture(draw, s)


@OPS.rule(weight=2, precondition=lambda s: s.captured)
def replay(draw, s: RunnerState) -> dict:
    """Through the largest captured graph, or now and then wider than any (the runner falls back to eager)."""
    return _batch_op(draw, s, "replay", draw(st.sampled_from([max(s.captured), s.cfg.max_num_tokens])))


@OPS.rule(precondition=lambda s: s.live)
def remove_adapter(draw, s: RunnerState) -> dict:
    aid = draw(s.live_adapter())
    s.remove(aid)
    return {"op": "remove_adapter", "adapter_id": aid}


@OPS.rule(weight=8, precondition=lambda s: s.movable() and not s.dummy_mapped)
def move_adapter(draw, s: RunnerState) -> list[dict]:
    """Remove an adapter outside the last batch, reload one of the batch's, and run the same batch
    again: the reloaded adapter is in another slot under an identical mapping (the trap of the
    ``_last_mapping`` shortcut, docs/background.md)."""
    x, y = draw(st.sampled_from(s.movable()))
    s.remove(y)
    s.add(x)
    again = s.last_requests
    s.activate([r["adapter_id"] for r in again])  # type: ignore[union-attr]
    return [{"op": "remove_adapter", "adapter_id": y},
            {"op": "add_adapter", "adapter_id": x, "rank": draw(st.integers(1, s.cfg.max_lora_rank))},
            {"op": "step", "requests": again}]


@OPS.rule()
def capture_replay(draw, s: RunnerState) -> list[dict]:
    """A capture and a replay that fits it, back to back."""
    op = _capture(draw, s)
    return [op, _batch_op(draw, s, "replay", op["size"])]


@st.composite
def cases(draw, faults: tuple = (), *, max_ops: int = 8) -> Case:
    cfg = draw(runner_configs())
    ops = draw(OPS.ops(lambda: RunnerState(cfg), max_ops=max_ops, go_on_odds=GO_ON_ODDS))
    return Case("reference_runner", cfg.to_dict(), tuple(ops), tuple(faults))
