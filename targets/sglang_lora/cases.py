"""Cases for ``sglang_lora``: a server configuration and the batches SGLang's model runner makes around LoRA.

Ops (``uids``: one adapter id per request, 0 = no adapter; at most ``max_loras`` distinct ids a batch,
the no-adapter request included, as SGLang's ``max_loras_per_batch`` counts them):

* ``step``: an eager batch, ``mode`` ``decode`` (one token a request) or ``extend`` (``lens`` tokens each);
* ``capture``: a CUDA graph for ``bs`` decode requests (one of ``graph_sizes``), SGLang's dummy batch;
* ``replay``: a decode batch run through the smallest captured graph that fits it (padded);
* ``idle``: a DP-attention idle batch (no request), drawn only where the release's LoRA path has an idle branch
  (0.5.2x; before, DP attention and LoRA did not meet there: ``generate_sequence_lengths`` refuses the mode);
* ``unload``: an adapter leaves the memory pool (its slot is free for the next batch's adapters).

Draw order puts the simple choices first so that shrinking reaches a minimal case.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzzrunner.case import Case

OP_KINDS = ("step", "capture_replay", "step", "replay", "idle", "unload", "capture_replay")


@st.composite
def _uids(draw, max_loras: int, n: int) -> list[int]:
    pool = draw(st.lists(st.integers(0, 2 * max_loras), min_size=1, max_size=max_loras, unique=True))
    out: list[int] = []
    while len(out) < n:  # runs of one adapter, like requests of one user
        out += [draw(st.sampled_from(pool))] * draw(st.integers(1, n - len(out)))
    return out


@st.composite
def sglang_lora_op(draw, cfg: dict, captured: list, idle: bool = True) -> list[dict]:
    kind = draw(st.sampled_from([k for k in OP_KINDS if idle or k != "idle"]))
    L, top = cfg["max_loras"], max(cfg["graph_sizes"])
    if kind == "idle":
        return [{"op": "idle"}]
    if kind == "unload":
        return [{"op": "unload", "uid": draw(st.integers(1, 2 * L))}]
    if kind in ("capture_replay", "replay"):
        ops = []
        if kind == "capture_replay" or not captured:
            bs = draw(st.sampled_from(cfg["graph_sizes"]))
            captured.append(bs)
            ops.append({"op": "capture", "bs": bs})
        n = draw(st.integers(1, max(captured)))
        return ops + [{"op": "replay", "uids": draw(_uids(L, n)), "seed": draw(st.integers(0, 7))}]
    mode = draw(st.sampled_from(["decode", "extend"]))
    n = draw(st.integers(1, top))
    op = {"op": "step", "mode": mode, "uids": draw(_uids(L, n)), "seed": draw(st.integers(0, 7))}
    if mode == "extend":
        op["lens"] = draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    return [op]


def shape_space(backends, dtypes) -> list[tuple]:
    """Every shape SGLang's LoRA kernels are compiled for here, smallest first: (backend, max_loras, rank, hidden,
    out, dtype). A palette (``fuzzrunner/palette.py``) draws from a few of them."""
    return [(b, L, r, h, o, d) for b in backends for L in range(2, 5) for r in (8, 16) for h in (16, 32)
            for o in (16, 32) for d in dtypes]


@st.composite
def _shape(draw, backends, dtypes, palette) -> tuple:
    if palette is not None:
        return draw(st.sampled_from(palette.choose(shape_space(backends, dtypes))))
    return (draw(st.sampled_from(list(backends))), draw(st.integers(2, 4)), draw(st.sampled_from([8, 16])),
            draw(st.sampled_from([16, 32])), draw(st.sampled_from([16, 32])), draw(st.sampled_from(list(dtypes))))


@st.composite
def sglang_lora_cases(draw, faults: tuple = (), max_ops: int = 8, *, backends=("triton", "csgmv"),
                      dtypes=("float16",), idle: bool = True, palette=None) -> Case:
    """``palette`` (``Settings.shape_palette``): the shape from the campaign's few (``shape_space``), so that
    compiled kernel variants repeat; the batches (graph sizes, requests, lengths) drawn in full."""
    backend, max_loras, rank, hidden, out, dtype = draw(_shape(backends, dtypes, palette))
    cfg = {
        "backend": backend, "max_loras": max_loras, "rank": rank, "hidden": hidden, "out": out, "dtype": dtype,
        "graph_sizes": sorted(draw(st.sets(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3))),
        "overlap": draw(st.booleans()),
        "chunk": 16,
    }
    ops: list = []
    captured: list = []
    while True:
        ops += draw(sglang_lora_op(cfg, captured, idle))
        if len(ops) >= max_ops or draw(st.integers(0, 3)) == 0:
            break
    ops = ops[:max_ops]
    if ops and ops[-1]["op"] == "capture":
        ops = ops[:-1] or [{"op": "unload", "uid": 1}]
    return Case("sglang_lora", cfg, tuple(ops), tuple(faults))
