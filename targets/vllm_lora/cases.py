"""Cases for ``vllm_lora``: a launch configuration and the ops a model runner makes around vLLM's LoRA ops.

Ops (slots are LoRA slot indices, -1 = no adapter, as ``LoRAKernelMeta.prepare_tensors`` takes them):

* ``step``: a real batch; ``slots`` per scheduled token, ``pad`` extra rows for the CUDA-graph size
  (the mapping covers the unpadded tokens, the layer runs on all rows, as vLLM's runners do), and
  ``sampled``: the rows whose logits are computed (the prompt mapping).
* ``dummy_run``: ``num_tokens`` split over ``reqs`` requests, programmed as the installed release's V2
  runner does (runner.py); ``kind`` ``warmup`` asks for ``k`` dummy adapters cycled over the requests
  (honoured where the release maps dummy adapters, #35536), ``no_lora`` for none.
* ``set_adapter``: new weights copied into ``slot`` (adapter churn: vLLM copies into stacked tensors).
* ``capture``: a CUDA-graph capture for ``size`` rows and active-LoRA key ``key``; ``replay``: a real
  batch (``slots``) replayed through the captured graph that vLLM's dispatch would pick.

The config may add (where the installed vLLM drives them, api.py): ``lora_index_to_id`` (the adapter id
in each slot, for ``update_metadata``), ``embedding`` (the embedding layer; punica entry) and ``moe``
(a fused-MoE LoRA layer: experts, top_k, per-slice width ``n``, slices, rank, mul_routed_weight, and
which slots' adapters have MoE weights).

Draw order puts the simple choices first so that shrinking reaches a minimal case.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzzrunner.case import Case

OP_KINDS = ("dummy_run", "step", "step", "set_adapter", "capture_replay", "step", "dummy_run")
ENTRIES = ("public", "private", "punica")
# Triton 3.9's interpreter computes vLLM's bf16 shrink wrongly (errors ~1e10 on a case float16 gets right),
# so the CPU draws float16 only; the GPU (compiled) draws both.
DTYPES = {"cpu": ("float16",), "cuda": ("float16", "bfloat16")}


def capture_keys(max_loras: int, specialize: bool) -> list[int]:
    """vLLM's ``get_lora_capture_cases``: 0 (no LoRA) and max_loras+1, or 0 + every captured count."""
    if not specialize:
        return [0, max_loras + 1]
    return [0] + captured_counts(max_loras, True)


def captured_counts(max_loras: int, specialize: bool) -> list[int]:
    """vLLM's ``get_captured_lora_counts``: powers of two up to max_loras, then max_loras+1."""
    if not specialize:
        return [max_loras + 1]
    out, p = [], 1
    while p <= max_loras:
        out.append(p)
        p *= 2
    return out + [max_loras + 1]


@st.composite
def _slots(draw, max_loras: int, n: int) -> list[int]:
    # A few distinct runs, like requests: repeated mappings and -1 mixed in.
    out = []
    while len(out) < n:
        run = draw(st.integers(1, n - len(out)))
        out += [draw(st.integers(-1, max_loras - 1))] * run
    return out


def _padded(cfg: dict, n: int) -> int:
    """The rows vLLM runs ``n`` tokens on: the smallest captured size that holds them, else ``n`` (eager)."""
    return min([s for s in cfg["capture_sizes"] if s >= n], default=n)


@st.composite
def _pad(draw, cfg: dict, n: int, bucketed: bool) -> int:
    """Rows past ``n``: any number up to ``max_num_tokens``, or (a palette) as vLLM pads (``_padded``)."""
    return _padded(cfg, n) - n if bucketed else draw(st.integers(0, cfg["max_num_tokens"] - n))


@st.composite
def vllm_lora_op(draw, cfg: dict, bucketed: bool = False) -> list[dict]:
    """One op (two for a capture and its replay); ``bucketed``: rows padded as vLLM pads them (a palette)."""
    kind = draw(st.sampled_from(OP_KINDS))
    T, L = cfg["max_num_tokens"], cfg["max_loras"]
    if kind == "dummy_run":
        n = draw(st.integers(1, T))
        dk = draw(st.sampled_from(["no_lora", "warmup"]))
        op = {"op": "dummy_run", "num_tokens": n, "kind": dk, "reqs": draw(st.integers(1, n)),
              "pad": draw(_pad(cfg, n, bucketed))}
        if dk == "warmup":
            op["k"] = draw(st.integers(1, L + 1))
        return [op]
    if kind == "set_adapter":
        return [{"op": "set_adapter", "slot": draw(st.integers(0, L - 1)), "seed": draw(st.integers(0, 7))}]
    if kind == "capture_replay":
        size = draw(st.sampled_from(cfg["capture_sizes"]))
        slots = draw(_slots(L, draw(st.integers(0, size))))
        active = len({s for s in slots if s >= 0})
        key = draw(st.sampled_from([k for k in capture_keys(L, cfg["specialize_active_lora"]) if k >= active]))
        # at least one captured request per distinct slot of the batch (runner.replay: vLLM's graphs serve
        # batches of at most as many requests as they were captured with)
        reqs = draw(st.integers(max(1, len(set(slots))), size))
        return [{"op": "capture", "size": size, "key": key, "reqs": reqs},
                {"op": "replay", "slots": slots, "seed": draw(st.integers(0, 7))}]
    n = draw(st.integers(0, T))
    slots = draw(_slots(L, n))
    rows = n + draw(_pad(cfg, n, bucketed))
    sampled = sorted(draw(st.sets(st.integers(0, max(0, n - 1)), max_size=min(n, 4)))) if n else []
    return [{"op": "step", "slots": slots, "pad": rows - n, "sampled": sampled, "seed": draw(st.integers(0, 7))}]


@st.composite
def _moe(draw, max_loras: int) -> dict:
    # vLLM takes the naive path (the one driven) while tokens * top_k * 8 <= experts * max_loras
    experts = draw(st.sampled_from([64, 128]))
    return {"experts": experts, "top_k": draw(st.integers(1, 4)), "n": draw(st.sampled_from([16, 32])),
            "slices": draw(st.integers(1, 2)), "rank": draw(st.sampled_from([8, 16, 64])),
            "mul_routed_weight": draw(st.booleans()),
            "enabled": [not draw(st.booleans()) for _ in range(max_loras)]}


SLICES = ((16,), (32, 16), (16, 16, 16))


def shape_space(dtypes) -> list[tuple]:
    """Every shape vLLM's LoRA kernels are compiled for here, smallest first: (max_loras, max_num_tokens, hidden,
    rank, slices, dtype). A palette (``fuzzrunner/palette.py``) draws from a few of them."""
    return [(L, T, h, r, sl, d) for L in range(1, 5) for T in (4, 8, 16) for h in (16, 32, 64) for r in (8, 16)
            for sl in SLICES for d in dtypes]


@st.composite
def _shape(draw, dtypes, palette) -> tuple:
    if palette is not None:
        return draw(st.sampled_from(palette.choose(shape_space(dtypes))))
    L = draw(st.integers(1, 4))
    T = draw(st.sampled_from([4, 8, 16]))
    hidden = draw(st.sampled_from([16, 32, 64]))
    rank = draw(st.sampled_from([8, 16]))
    slices = draw(st.sampled_from(SLICES))
    return L, T, hidden, rank, slices, draw(st.sampled_from(list(dtypes)))


@st.composite
def vllm_lora_cases(draw, faults: tuple = (), max_ops: int = 8, *, device: str = "cuda", entries=ENTRIES,
                    grid_control=True, dtypes=None, moe=False, embedding=False, palette=None) -> Case:
    """A case for a run on ``device`` (the campaign's: ``Target.strategy`` passes it): its dtypes
    (``DTYPES``) unless ``dtypes`` names them. ``palette`` (``Settings.shape_palette``): the shape from the
    campaign's few (``shape_space``), and rows padded to the captured sizes as vLLM pads them, so that
    compiled kernel variants repeat."""
    dtypes = dtypes or DTYPES[device]
    L, T, hidden, rank, slices, dtype = draw(_shape(dtypes, palette))
    sizes = [s for s in (1, 2, 4, 8, 16) if s <= T]
    cfg = {
        "max_loras": L, "max_num_tokens": T, "hidden": hidden, "rank": rank, "slices": list(slices), "vocab": 32,
        "dtype": dtype,
        "specialize_active_lora": draw(st.booleans()) if grid_control else False,
        "entry": draw(st.sampled_from(list(entries))),
        "capture_sizes": sorted(draw(st.sets(st.sampled_from(sizes), min_size=1, max_size=3))),
    }
    if cfg["entry"] == "punica" and embedding:
        cfg["lora_index_to_id"] = draw(st.lists(st.integers(1, 2 * L), min_size=L, max_size=L, unique=True))
        cfg["embedding"] = draw(st.booleans())
    if moe and draw(st.booleans()):
        cfg["moe"] = draw(_moe(L))
    ops = []
    while True:
        ops += draw(vllm_lora_op(cfg, palette is not None))
        if len(ops) >= max_ops or draw(st.integers(0, 3)) == 0:
            break
    return Case("vllm_lora", cfg, tuple(ops[:max_ops]), tuple(faults))
