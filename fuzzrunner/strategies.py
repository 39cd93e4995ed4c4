"""Hypothesis strategies that produce cases for the reference runner and the LoRA kernels.

Draws are ordered so that shrinking reaches the minimal case: the op count first,
then each op's kind (``dummy_run`` first, so a bug a dummy run shows shrinks to
one), then small sizes; adapter id 0 ("no adapter") is everyone's simplest choice.
"""

from __future__ import annotations

from hypothesis import strategies as st

from .case import Case
from .runner.config import RunnerConfig
from .runner.model_runner import DUMMY_KINDS

OP_KINDS = ("dummy_run", "step", "add_adapter", "capture", "replay", "remove_adapter")
MAX_ADAPTER_ID = 6


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
        a = draw(st.sampled_from([0] + adapters)) if adapters else 0
        if a and a not in used and len(used) >= cfg.max_loras:
            a = 0
        used.add(a) if a else None
        t0 = draw(st.integers(0, cfg.vocab_size - 1))
        out.append({"adapter_id": a, "tokens": [(t0 + 7 * j) % cfg.vocab_size for j in range(k)]})
    return out


@st.composite
def runner_ops(draw, cfg: RunnerConfig, max_ops: int = 8) -> list[dict]:
    n_ops = draw(st.integers(1, max_ops))
    registered: dict[int, int] = {}
    captured: list[int] = []
    ops, last_requests = [], None
    for _ in range(n_ops):
        kind = draw(st.sampled_from(OP_KINDS))
        adapters = sorted(registered)
        if kind == "dummy_run":
            ops.append({"op": "dummy_run", "num_tokens": draw(st.integers(1, cfg.max_num_tokens)),
                        "kind": draw(st.sampled_from(DUMMY_KINDS))})
        elif kind == "add_adapter" or (kind == "remove_adapter" and not registered):
            aid = draw(st.integers(1, MAX_ADAPTER_ID))
            rank = draw(st.integers(1, cfg.max_lora_rank))
            registered[aid] = rank
            ops.append({"op": "add_adapter", "adapter_id": aid, "rank": rank})
        elif kind == "remove_adapter":
            aid = draw(st.sampled_from(adapters))
            del registered[aid]
            ops.append({"op": "remove_adapter", "adapter_id": aid})
        elif kind == "capture":
            size = draw(st.sampled_from(cfg.capture_sizes))
            captured.append(size)
            ops.append({"op": "capture", "size": size})
        else:  # step or replay
            repeat = last_requests is not None and draw(st.booleans())
            valid = repeat and all(r["adapter_id"] in registered or r["adapter_id"] == 0 for r in last_requests)
            limit = max(captured) if kind == "replay" and captured else cfg.max_num_tokens
            if valid and sum(len(r["tokens"]) for r in last_requests) <= limit:
                reqs = last_requests
            else:
                reqs = draw(requests(cfg, adapters, limit))
            last_requests = reqs
            ops.append({"op": kind, "requests": reqs})
    return ops


@st.composite
def reference_runner_cases(draw, faults: tuple = (), max_ops: int = 8) -> Case:
    cfg = draw(runner_configs())
    ops = draw(runner_ops(cfg, max_ops))
    return Case("reference_runner", cfg.to_dict(), tuple(ops), tuple(faults))


# -- the kernels alone ---------------------------------------------------------------------

@st.composite
def kernel_launch(draw, max_loras: int, max_num_tokens: int) -> dict:
    kernel = draw(st.sampled_from(["shrink", "expand", "bgmv"]))
    n = draw(st.integers(0, max_num_tokens))
    slot_values = st.integers(-1, max_loras - 1)
    slots = draw(st.lists(slot_values, min_size=n, max_size=n))
    pad = draw(st.integers(0, max_num_tokens - n))
    return {"op": "launch", "kernel": kernel, "slots": slots, "pad": pad, "seed": draw(st.integers(0, 7))}


@st.composite
def lora_kernel_cases(draw, faults: tuple = (), max_ops: int = 4) -> Case:
    """Launch sequences over one persistent metadata: larger, then smaller, then all -1 batches."""
    max_loras = draw(st.integers(1, 4))
    max_num_tokens = draw(st.sampled_from([4, 16, 40]))
    config = {
        "max_loras": max_loras, "max_num_tokens": max_num_tokens,
        "hidden": draw(st.sampled_from([16, 32, 48])),
        "rank": draw(st.sampled_from([1, 4, 8, 16, 64])),
        "slices": draw(st.sampled_from([[16], [32, 16], [32, 16, 16]])),
        "dtype": "float32",
    }
    ops = draw(st.lists(kernel_launch(max_loras, max_num_tokens), min_size=1, max_size=max_ops))
    return Case("lora_kernels", config, tuple(ops), tuple(faults))
