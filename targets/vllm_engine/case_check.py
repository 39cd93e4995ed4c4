"""Whether a ``vllm_engine`` case is one the target can run: its config's knobs, its adapters, its ops, and its
requests' prompt chunks as vLLM's scheduler gives them (the case format: cases.py). ``check`` returns the config
or raises ``InvalidCase`` saying which rule the case breaks."""

from __future__ import annotations

from fuzzrunner.errors import InvalidCase

from . import moe, prompt_scores, serving_check
from .model import GDN, LAYERS, PACKED, gdn, packing

DTYPES = {"cpu": ("float16",), "cuda": ("float16", "bfloat16")}  # the model's, per device (as vllm_lora's)

def check(case) -> dict:
    c = case.config
    need = ("max_loras", "max_cpu_loras", "max_lora_rank", "lora_dtype", "fully_sharded_loras",
            "specialize_active_lora", "max_num_seqs", "max_num_batched_tokens", "num_speculative_tokens",
            "hidden", "vocab", "layout", "seed", "layers", "adapters")
    missing = [k for k in need if k not in c]
    if missing:
        raise InvalidCase(f"vllm_engine config is missing {', '.join(missing)}.")
    _check_sizes(c)
    if c.get("dtype", "float16") not in DTYPES["cuda"] or c["lora_dtype"] not in ("auto", c.get("dtype", "float16")):
        raise InvalidCase(f"dtype {c.get('dtype')!r}, lora_dtype {c['lora_dtype']!r}: the model's dtype is one of "
                          f"{', '.join(DTYPES['cuda'])}, lora_dtype 'auto' or the model's.")
    _check_moe(c)
    if any((k, c["layout"].get(k)) not in PACKED for k in ("qkv", "gate_up")) or \
            c["layout"].get("gdn", "none") not in GDN:
        raise InvalidCase(f"layout {c['layout']!r}: qkv and gate_up are each 'merged' or 'fused'; gdn (optional) one "
                          f"of {', '.join(GDN)}.")
    layers = LAYERS + ((moe.LAYER,) if c.get("moe") else ()) + tuple(gdn(c["layout"]))
    if not c["layers"] or any(x not in layers for x in c["layers"]):
        raise InvalidCase(f"layers {c['layers']!r}: a non-empty list of {', '.join(layers)}"
                          f"{'' if c.get('moe') else f' ({moe.LAYER!r} needs a moe block)'}.")
    subs = {s for m in packing(c["layout"]).values() for s in m} | ({moe.LAYER} if c.get("moe") else set())
    for i, a in c["adapters"].items():
        if not a["targets"] or any(t not in subs for t in a["targets"]) or a["rank"] > c["max_lora_rank"]:
            raise InvalidCase(f"adapter {i}: targets must be modules of the layout ({', '.join(sorted(subs))}) and "
                              f"rank <= max_lora_rank={c['max_lora_rank']}.")
    _check_runner(c)
    serving_check.config(c)
    for i, op in enumerate(case.ops):
        _check_op(c, i, op)
    _check_chunks(case.ops)
    return c


# the config's sizes: each an int of at least this (max_cpu_loras: at least max_loras, as vLLM's LoRAConfig asks)
SIZES = {"max_loras": 1, "max_lora_rank": 1, "max_num_seqs": 1, "max_num_batched_tokens": 1, "hidden": 1, "vocab": 1,
         "num_speculative_tokens": 0}


def _count(v, least: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


def _check_sizes(c: dict) -> None:
    """A size out of range is the case's error, never the engine's: before, ``max_loras: -3`` reached vLLM's
    ``LoRAConfig`` and came back a ``crash`` finding (pydantic's ValidationError) instead of a quarantined case."""
    for k, least in SIZES.items():
        if not _count(c[k], least):
            raise InvalidCase(f"{k} {c[k]!r}: an int >= {least}.")
    if not _count(c["max_cpu_loras"], c["max_loras"]):
        raise InvalidCase(f"max_cpu_loras {c['max_cpu_loras']!r}: an int >= max_loras={c['max_loras']} (vLLM's "
                          f"LoRAConfig refuses fewer).")
    for i, a in c["adapters"].items():
        rank = a.get("rank") if isinstance(a, dict) else None
        if not _count(rank, 1):
            raise InvalidCase(f"adapter {i}: rank {rank!r}: an int >= 1.")


def _check_moe(c: dict) -> None:
    m = c.get("moe")
    if m is None:
        return
    if not isinstance(m, dict) or m.get("experts") not in moe.EXPERTS or m.get("top_k") not in moe.TOP_K or \
            m.get("format", "2d") not in moe.FORMATS or set(m) - {"experts", "top_k", "format"}:
        raise InvalidCase(f"moe {m!r}: null, or {{'experts': one of {moe.EXPERTS}, 'top_k': one of {moe.TOP_K}, "
                          f"'format' (optional, default '2d'): one of {moe.FORMATS}}}.")
    if c["fully_sharded_loras"]:  # vLLM's fully sharded MoE LoRA always aligns with vllm._C (moe.py)
        raise InvalidCase("moe with fully_sharded_loras: the fused-MoE LoRA then takes its sorted path, whose align "
                          "op is compiled code (vllm._C); set fully_sharded_loras to false for a MoE case.")


GRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")  # vLLM's CUDAGraphMode names


def _check_runner(c: dict) -> None:
    """The runner knobs (V1 cases: v1_runner.py; V2 graphs: v2_graphs.py): ``runner``, ``cudagraph_mode``,
    ``cudagraph_capture_sizes`` (null in a V2-runner case: vLLM's default sizes), ``cudagraph_specialize_lora``,
    ``reorder_threshold``."""
    if c.get("runner", "v2") not in ("v1", "v2"):
        raise InvalidCase(f"runner {c.get('runner')!r}: 'v1' (GPUModelRunner, up to vLLM 0.33) or 'v2'.")
    if c.get("cudagraph_mode", "NONE") not in GRAPH_MODES:
        raise InvalidCase(f"cudagraph_mode {c.get('cudagraph_mode')!r}: one of {', '.join(GRAPH_MODES)}.")
    if c.get("cudagraph_capture_sizes") is None and c.get("runner", "v2") == "v2":
        return  # vLLM's own default sizes (VllmConfig._set_cudagraph_sizes): up to max_num_batched_tokens
    sizes = c.get("cudagraph_capture_sizes") or [1]
    if any(not 1 <= n <= c["max_num_batched_tokens"] for n in sizes):
        raise InvalidCase(f"cudagraph_capture_sizes {sizes!r}: each 1..max_num_batched_tokens="
                          f"{c['max_num_batched_tokens']}.")
    q = 1 + c["num_speculative_tokens"]
    if "FULL" in c.get("cudagraph_mode", "NONE") and max(sizes) < q:  # vLLM refuses it at start-up (ValueError)
        raise InvalidCase(f"cudagraph_capture_sizes {sizes!r} with cudagraph_mode {c['cudagraph_mode']!r}: the largest "
                          f"size must be at least 1 + num_speculative_tokens = {q} (a decode graph holds one "
                          f"request of {q} tokens); add a size >= {q}.")


def _check_op(c: dict, i: int, op: dict) -> None:
    kind = op.get("op")
    if kind not in ("add", "remove", "pin", "step", "dummy_run", "serve_load", "serve_unload"):
        raise InvalidCase(f"op {i}: unknown op {kind!r}; vllm_engine ops are add, remove, pin, step, dummy_run, "
                          f"serve_load, serve_unload.")
    if kind in ("serve_load", "serve_unload"):
        serving_check.op(c, i, op)
    if kind in ("add", "remove", "pin") and str(op.get("id")) not in c["adapters"]:
        raise InvalidCase(f"op {i}: adapter {op.get('id')!r} is not in the config's adapters.")
    if kind == "step":
        reqs = op["reqs"]
        tokens = sum(r["tokens"] for r in reqs) + op.get("pad", 0)
        if not reqs or tokens > c["max_num_batched_tokens"] or len(reqs) > c["max_num_seqs"]:
            raise InvalidCase(f"op {i}: a step schedules 1..max_num_seqs={c['max_num_seqs']} requests and at most "
                              f"max_num_batched_tokens={c['max_num_batched_tokens']} rows (padding included).")
        for r in reqs:
            if r["lora"] and str(r["lora"]) not in c["adapters"]:
                raise InvalidCase(f"op {i}: request {r['id']!r} asks for adapter {r['lora']}, not in the config.")
            if "prompt" in r and not (isinstance(r["prompt"], int) and r["tokens"] <= r["prompt"] <= 64):
                raise InvalidCase(f"op {i}: request {r['id']!r}: prompt {r['prompt']!r} is its prompt's length, an int "
                                  f"from its tokens ({r['tokens']}) to 64 (max_model_len).")
            prompt_scores.check_request(i, r, c["vocab"])
            serving_check.request(c, i, r)
            if not 0 <= r.get("drafts", 0) <= min(c["num_speculative_tokens"], r["tokens"] - 1):
                raise InvalidCase(f"op {i}: request {r['id']!r}: drafts <= num_speculative_tokens and < its tokens.")
        if len({r.get("model", r["lora"]) for r in reqs if r["lora"]}) > c["max_loras"]:
            raise InvalidCase(f"op {i}: more distinct adapters than max_loras={c['max_loras']} in one step.")
    if kind == "dummy_run" and not 1 <= op["num_tokens"] <= c["max_num_batched_tokens"] - op.get("pad", 0):
        raise InvalidCase(f"op {i}: a dummy run has 1..max_num_batched_tokens tokens, padding included.")


def _check_chunks(ops) -> None:
    """A request in its prompt is scheduled at most what is left of it: vLLM's scheduler gives a running request
    ``num_tokens_with_spec + num_output_placeholders - num_computed_tokens`` tokens (v1/core/sched/scheduler.py,
    ``schedule``), which before its prompt completes (no output, no drafts) is the rest of the prompt. A step past it
    has no prompt token to score: the prompt-logprobs worker takes every row but the last (one too many)."""
    left: dict[str, int] = {}  # live request id -> prompt tokens not yet scheduled
    for i, op in enumerate(ops):
        if op.get("op") != "step":
            continue
        for rid in op.get("finish", []):
            left.pop(rid, None)
        for r in op["reqs"]:
            rest = left.get(r["id"], r.get("prompt", r["tokens"]))  # a new request: its whole prompt
            if 0 < rest < r["tokens"]:
                raise InvalidCase(f"op {i}: request {r['id']!r} is scheduled {r['tokens']} tokens with {rest} of its "
                                  f"prompt left: vLLM schedules a request in its prompt at most the rest of it; "
                                  f"schedule {rest} or fewer.")
            left[r["id"]] = max(0, rest - r["tokens"])
