"""Cases for ``sglang_engine``: a server configuration (the LoRA knobs), the adapters a user brings, and an
adapter-management + batch program over them, as rules (``fuzzrunner.strategies.OpSequence``).

Config (each a knob of SGLang's server, applied through its ``ServerArgs``): ``backend`` (``--lora-backend``),
``max_loras_per_batch`` (the base model's slot included), ``eviction_policy`` (``--lora-eviction-policy``),
``max_lora_rank``, ``target_modules`` (``--lora-target-modules``), ``graph_bs`` (0: no decode CUDA graph; else
the largest captured batch, whose static batch info decode batches then use), ``chunk``
(``--max-lora-chunk-size``), ``dtype``, ``max_loaded_loras`` (``--max-loaded-loras``: null, or
``max_loras_per_batch`` or one more, as the server requires it at least that); ``adapters``: name ->
``{r, alpha, modules, pinned}`` (PEFT target modules, within the server's; ``pinned``: loaded with
``pinned=True``). ``max_loaded_loras`` and ``pinned`` are drawn only where the release's adapter-management API
is driven (``frontend``: frontend.py); there a step's requests may name any adapter ever loaded (the tokenizer
manager reloads an unloaded one) and as many adapters as they like (the scheduler splits them into batches).

``tie``: ``tie_word_embeddings`` of the model's config (``lm_head`` is the embedding module itself, model.py).
On the scheduler path: ``disable_radix_cache`` (a radix case's served steps give their requests a shared ``stem``
and their own ``key``, keys.py), ``max_total_tokens`` (a small KV pool) with ``retract_interval`` (SGLang's
retraction test mode, retraction.py).

Rules: ``load`` an adapter not loaded (``v``: which weights; a reload after an unload may bring others),
``unload`` a loaded one, ``step`` a batch of requests (an adapter name or null each) that the scheduler would
admit (at most ``max_loras_per_batch`` distinct, the base included). More adapters than slots make the pool
evict and reuse slots; cycles of unload/load reuse names and slots. Ops are plain JSON: cases replay without
Hypothesis and shrink by deleting ops.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.strategies import OpSequence

from . import keys as user_keys
from . import moe as sparse
from . import retraction
from .adapters import SERVER_NAME

STEM_MAX = 6  # the longest shared prompt stem a served step's request draws (serving.stem_tokens)

BACKENDS = ("triton", "csgmv")  # every release's; torch_native (0.5.6.post1+), triton_v2 (0.5.23+) where it has them
SERVER_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head")
# PEFT target-module groups adapters are made with (q_proj always with v_proj: see docs/sglang_engine.md)
GROUPS = {"qkv_proj": (("q_proj", "v_proj"), ("q_proj", "k_proj", "v_proj")), "o_proj": (("o_proj",),),
          "gate_up_proj": (("gate_proj", "up_proj"),), "down_proj": (("down_proj",),),
          "embed_tokens": (("embed_tokens",),), "lm_head": (("lm_head",),)}


class _State:
    def __init__(self, cfg: dict, frontend: bool = False, logprobs: bool = False, scheduler: bool = False,
                 results: bool = False):
        self.cfg, self.loaded, self.ever, self.frontend, self.logprobs = cfg, [], set(), frontend, logprobs
        self.scheduler, self.results = scheduler, results


# the expert adapters' layout: per expert, --experts-shared-outer-loras, or --lora-use-virtual-experts (not both:
# virtual experts over a shared factor align with compiled code, moe.py)
MOE_LAYOUTS = ("per-expert", "shared-outer", "virtual")


@st.composite
def _moe(draw) -> dict | None:
    """None (three cases in four: the dense MLP), or the sparse block's size and knobs (moe.py). The layout is one
    draw of ``MOE_LAYOUTS``: drawn as two booleans (virtual = not shared and a second boolean), virtual experts
    needed the two to differ, and Hypothesis' generation copies a draw onto another of the same strategy (its
    mutator: most of a campaign's cases) and so made them equal: 0 of 63 MoE cases had virtual experts."""
    if not draw(st.sampled_from([False, False, False, True])):
        return None
    layout = draw(st.sampled_from(MOE_LAYOUTS))
    return {"experts": draw(st.sampled_from(sparse.EXPERTS)), "top_k": draw(st.sampled_from(sparse.TOP_K)),
            "shared_outer": layout == "shared-outer", "virtual": layout == "virtual"}


@st.composite
def _adapter(draw, server: list, max_rank: int, frontend: bool = False) -> dict:
    mods = draw(st.lists(st.sampled_from(server), min_size=1, max_size=len(server), unique=True))
    peft = [m for s in sorted(mods, key=SERVER_MODULES.index) for m in draw(st.sampled_from(GROUPS[s]))]
    r = draw(st.sampled_from([r for r in (2, 4, 8) if r <= max_rank]))
    out = {"r": r, "alpha": draw(st.sampled_from([r, 2 * r, 16])), "modules": peft}
    if frontend:
        out["pinned"] = draw(st.sampled_from([False, False, True]))
    return out


def _requests(draw, s, pool: list, budget: int | None, stream: bool, drain: bool) -> tuple[int, list]:
    """How many requests a step makes, and the adapters they draw from (a stream: a hot set)."""
    if budget is not None:  # a MoE case: every request's tokens in one forward stay where SGLang aligns in Triton
        return draw(st.integers(1, min(5 if s.scheduler else 4, budget))), pool
    if stream:
        size = min(len(pool), s.cfg["max_loras_per_batch"] + 1)
        hot = draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size, unique=True))
        return draw(st.integers(5, 10)), hot
    return draw(st.integers(1, (8 if drain else 5) if s.scheduler else 4)), pool


def _program() -> OpSequence:
    seq = OpSequence()

    @seq.initialize
    def first_load(draw, s):
        name = draw(st.sampled_from(sorted(s.cfg["adapters"])))
        s.loaded.append(name)
        s.ever.add(name)
        return {"op": "load", "name": name, "v": 0}

    @seq.rule(weight=lambda s: 3 if len(s.loaded) < len(s.cfg["adapters"]) else 0)
    def load(draw, s):
        name = draw(st.sampled_from([n for n in sorted(s.cfg["adapters"]) if n not in s.loaded]))
        s.loaded.append(name)
        v = draw(st.integers(0, 1)) if name in s.ever else 0
        s.ever.add(name)
        return {"op": "load", "name": name, "v": v}

    @seq.rule(weight=2, precondition=lambda s: s.loaded)
    def unload(draw, s):
        name = draw(st.sampled_from(s.loaded))
        s.loaded.remove(name)
        return {"op": "unload", "name": name}

    @seq.rule(weight=6)
    def step(draw, s):
        limit = s.cfg["max_loras_per_batch"]
        drain = bool(s.cfg.get("lora_drain_wait_threshold"))
        pool = [None, *sorted(s.ever)] if s.frontend else [None, *s.loaded]
        # served by SGLang's scheduler, half the steps are a stream: requests arriving over many rounds, over a hot
        # set of one adapter more than the slots (where the front end lets a step name more), each asking 1-8
        # tokens, so that running adapters hold the slots while another waits, and (drainer on) a drain starts,
        # ends, and the drained adapter's later requests come (docs/sglang.md, "the scheduler path's generation")
        budget = sparse.max_tokens(s.cfg) if s.cfg.get("moe") else None  # a MoE case: tokens a forward may hold
        stream = s.scheduler and budget is None and draw(st.booleans())
        n, pool = _requests(draw, s, pool, budget, stream, drain)
        reqs: list = []
        for _ in range(n):
            choice = draw(st.sampled_from(pool))
            if not s.frontend and choice not in reqs and len(set(reqs)) >= limit:
                choice = reqs[0]  # the scheduler would not admit it; with the front end it splits the batch
            reqs.append(choice)
        op = {"op": "step", "reqs": reqs, "mode": draw(st.sampled_from(["decode", "extend"])),
              "seed": draw(st.integers(0, 3))}
        if op["mode"] == "extend":
            longest = 3 if budget is None else max(1, min(3, budget // n))
            op["lens"] = draw(st.lists(st.integers(1, longest), min_size=n, max_size=n))
            if s.logprobs and not stream and draw(st.booleans()):  # input logprobs asked: each request's start
                op["logprob"] = [draw(st.integers(0, k)) for k in op["lens"]]
        # served by SGLang's scheduler: tokens to generate, arrival round (input logprobs too where its result
        # processing is driven: results.py)
        if s.scheduler and ("logprob" not in op or s.results):
            if stream:  # arrivals one gap after another; varied token counts (a drain's budget is a token count)
                op["new"] = [draw(st.sampled_from([1, 2, 3, 5, 8])) for _ in range(n)]
                gaps = [draw(st.sampled_from([0, 0, 1, 1, 2])) for _ in range(n)]
                op["arrive"] = [sum(gaps[:k]) for k in range(n)]
            else:
                op["new"] = [draw(st.sampled_from([1, 1, 2, 3, 5] if drain else [1, 1, 2, 3])) for _ in range(n)]
                op["arrive"] = [draw(st.sampled_from([0, 0, 1, 2, 4, 6] if drain else [0, 0, 1, 2]))
                                for _ in range(n)]
        return op
    return seq


PROGRAM = _program()


@st.composite
def sglang_engine_cases(draw, faults: tuple = (), *, max_ops: int = 8, device: str = "cpu",
                        modules: tuple = SERVER_MODULES, frontend: bool = False, logprobs: bool = False,
                        backends: tuple = BACKENDS, scheduler: bool = False, drainer: bool = True,
                        moe: bool = False, radix: bool = False,
                        results: bool = False) -> Case:
    """``modules``: the target modules the release's LoRA pool has buffers for (api.EngineAPI.modules);
    ``frontend``: whether the release's adapter-management API is driven (frontend.py); ``logprobs``: whether
    SGLang's LogitsProcessor is driven (batch.py), so extend steps may ask for input logprobs; ``backends``: the
    ``--lora-backend`` values the release has that run without compiled code (backends.py); ``moe``: whether the
    release's MoE LoRA runs here (moe.py): then one case in four has Mixtral's sparse block, its knobs drawn;
    ``radix``: whether the release's radix cache is driven on its scheduler path (scheduler.load's ``radix_cache``):
    then ``--disable-radix-cache`` is drawn; ``results``: whether the scheduler's result processing is driven
    (results.py), so steps asking input logprobs are served by the scheduler too."""
    server = draw(st.lists(st.sampled_from(list(modules)), min_size=1, max_size=3, unique=True))
    max_rank = draw(st.sampled_from([4, 8]))
    names = [f"a{i}" for i in range(draw(st.integers(2, 4)))]
    slots = draw(st.integers(2, 3))
    backend = draw(st.sampled_from(list(backends)))
    # where the release runs MoE LoRA, one case in four has Mixtral's sparse block (moe.py), drawn before the
    # adapters so that they adapt its experts: SGLang wraps them only with both gate_up_proj and down_proj targeted;
    # triton_v2 pairs only with the MoeLoraRunner (--moe-runner-backend lora_*: CUDA SM90 / SM100 only)
    spec = draw(_moe()) if moe and device == "cpu" and backend != "triton_v2" else None
    if spec:
        server = sorted(set(server) | {"gate_up_proj", "down_proj"}, key=SERVER_MODULES.index)
    cfg = {
        "backend": backend,
        "max_loras_per_batch": slots,
        "eviction_policy": draw(st.sampled_from(["lru", "fifo"])),
        "max_lora_rank": max_rank,
        "target_modules": sorted(server, key=SERVER_MODULES.index),
        # a MoE case's decode graph would align its LoRA with compiled code in the capture
        "graph_bs": 0 if spec else draw(st.sampled_from([0, 0, 2, 4])),
        "chunk": 16,
        # float16 rounding over six LoRA'd layers exceeds its tolerance: exact enough in fp32; SGLang's gated
        # virtual-expert shrink asserts a half-precision model (fused_moe_triton_kernels.py)
        "dtype": "float16" if spec and spec["virtual"] else "float32",
        "adapters": {n: draw(_adapter(server, max_rank, frontend)) for n in names},
    }
    if spec:
        cfg["moe"] = spec
    if frontend:
        cfg["max_loaded_loras"] = draw(st.sampled_from([None, slots, slots + 1]))
    if logprobs:  # SGLANG_ENABLE_LOGPROB_CHUNK / SGLANG_LOGPROB_CHUNK_SIZE: None = SGLang's defaults, 0 = off
        cfg["logprob_chunk"] = draw(st.sampled_from([None, 0, 1, 2, 3]))
    if scheduler:  # SGLang's scheduler (scheduler.py): its knobs, applied through ServerArgs as the server does
        cfg["max_running_requests"] = draw(st.sampled_from([2, 3, 4]))
        cfg["chunked_prefill_size"] = draw(st.sampled_from([None, None, 2, 3]))
        cfg["max_prefill_tokens"] = draw(st.sampled_from([16384, 16384, 4]))
        # --lora-drain-wait-threshold, in rounds (the scheduler path's clock): 0 = no drainer; 0.5.12+ (``drainer``)
        if drainer:
            cfg["lora_drain_wait_threshold"] = draw(st.sampled_from([0.0, 0.0, 1.0, 2.0]))
    ops = draw(PROGRAM.ops(lambda: _State(cfg, frontend, logprobs, scheduler, results), max_ops=max_ops))
    # tie_word_embeddings (one case in four): lm_head is the embedding module itself, as SGLang's LlamaForCausalLM
    # ties it (model.py); drawn last, so the draws before it (and the cases a seed gave before) stay as they were
    cfg["tie"] = draw(st.sampled_from([False, False, False, True]))
    # --disable-radix-cache (half the cases of a release whose radix cache imports, ``radix``): with the radix
    # cache on, each served step's requests draw a shared prompt stem (serving.stem_tokens, 0 - STEM_MAX tokens each,
    # the same tokens in every step), so that requests of one adapter, of two, and of the base model share
    # prefixes; drawn last, as ``tie``: a case of the radix cache off is the case the same seed gave before
    if scheduler and radix:
        cfg["disable_radix_cache"] = draw(st.booleans())
        if not cfg["disable_radix_cache"]:
            ops = [_with_stem(draw, op, names) if op["op"] == "step" and "logprob" not in op and not spec else op
                   for op in ops]
    # --max-total-tokens (retraction.py): in half the cases of the scheduler path a KV pool of the longest request's
    # tokens and a little headroom, so that decode outgrows the admission's estimate and SGLang retracts requests;
    # drawn last (a case of the large pool is the case the same seed gave before)
    # with SGLang's retraction test mode (SGLANG_TEST_RETRACT, every ``retract_interval``-th forward) in three of them
    if scheduler and not spec and draw(st.booleans()):
        cfg["max_total_tokens"] = retraction.pool_tokens(ops, draw(st.sampled_from(retraction.HEADROOM)))
        interval = draw(st.sampled_from([0, 1, 2, 3]))
        if interval:
            cfg["retract_interval"] = interval
    return Case("sglang_engine", cfg, tuple(ops), tuple(faults))


def _with_stem(draw, op: dict, names: list) -> dict:
    """A served step's requests with stems of their own lengths (often the whole stem, a long match; sometimes part of
    it or none) and their own ``extra_key`` (keys.py): none, a key users share, or the lora_id of one of the case's
    adapters (``lora:NAME``: SGLang #24638's base-model request in an adapter's namespace)."""
    stems = [draw(st.sampled_from([0, 2, 4, STEM_MAX, STEM_MAX])) for _ in op["reqs"]]
    key = [draw(st.sampled_from([*user_keys.KEYS, *(user_keys.LORA_PREFIX + n for n in names)]))
           for _ in op["reqs"]]
    return {**op, "stem": stems} | ({"key": key} if any(k is not None for k in key) else {})


def _config_features(c: dict) -> set:
    """The features a case's configuration reaches (its server arguments and knobs)."""
    out: set = set()
    out |= {f"backend={c.get('backend')}", f"eviction={c.get('eviction_policy')}",
            f"graph={'on' if c.get('graph_bs') else 'off'}", f"max_loras_per_batch={c.get('max_loras_per_batch')}"}
    out |= {f"target={m}" for m in c.get("target_modules", ())}
    out.add("tie=" + ("on" if c.get("tie") else "off"))
    if "max_loaded_loras" in c:
        out.add(f"max_loaded_loras={'on' if c['max_loaded_loras'] else 'off'}")
    if any(a.get("pinned") for a in c.get("adapters", {}).values()):
        out.add("adapter=pinned")
    if "max_running_requests" in c:
        out |= {f"max_running_requests={c['max_running_requests']}",
                "chunked_prefill=" + ("on" if c.get("chunked_prefill_size") else "off"),
                "max_prefill_tokens=" + ("small" if c.get("max_prefill_tokens", 16384) < 16 else "default")}
    if "lora_drain_wait_threshold" in c:
        out.add("drain=" + ("on" if c["lora_drain_wait_threshold"] else "off"))
    if "disable_radix_cache" in c:
        out.add("radix_cache=" + ("off" if c["disable_radix_cache"] else "on"))
    if "max_total_tokens" in c:
        out.add("kv_pool=small")
    if c.get("retract_interval"):
        out.add("retract=test-mode")
    if c.get("moe"):
        m = c["moe"]
        out |= {"moe=on", f"moe.top_k={m['top_k']}", f"moe.experts={m['experts']}",
                "moe.shared_outer=" + ("on" if m.get("shared_outer") else "off"),
                "moe.virtual_experts=" + ("on" if m.get("virtual") else "off")}
    if "logprob_chunk" in c:
        chunk = c["logprob_chunk"]
        out.add("logprob_chunk=" + ("default" if chunk is None else "off" if chunk == 0 else "small"))
    return out


# How a step reaches the engine (``step_path``): the one decision ``runner.Session.step`` takes, named as coverage
# features so that a report says which path ran, case by case (a new user's trial: no report said whether SGLang's
# scheduler ran): "scheduler" is SGLang's own scheduler loop (scheduler.py, serving.py), "tokenizer-manager" the
# adapter-management API with the admission re-stated (frontend.py), "direct" the LoRAManager called as the model
# runner calls it.
PATHS = ("scheduler", "tokenizer-manager", "direct")


def step_path(op: dict, scheduler: bool, frontend: bool, results: bool = False) -> str:
    """Which path a ``step`` op takes on a release whose scheduler (``scheduler``), its result processing
    (``results``) and tokenizer manager (``frontend``) are driven: input logprobs go past the scheduler where its
    result processing (which stores them) is not driven."""
    if scheduler and (results or op.get("logprob") is None):
        return "scheduler"
    return "tokenizer-manager" if frontend else "direct"


def paths(scheduler: bool, frontend: bool, logprobs: bool, results: bool = False) -> tuple:
    """The paths the drawn steps can take on such a release (the features ``features`` may name): past the
    scheduler only a step with input logprobs (drawn where the LogitsProcessor is driven, ``logprobs``), where the
    scheduler's result processing is not driven (``results``)."""
    other = "tokenizer-manager" if frontend else "direct"
    return (("scheduler",) if scheduler else ()) + ((other,) if not scheduler or (logprobs and not results) else ())


def features(case, *, scheduler: bool = False, frontend: bool = False, results: bool = False) -> set:
    """What ``case`` reaches, its steps' paths (``step_path``) as this release's loaded engine takes them included."""
    c, out = case.config, _config_features(case.config)
    loaded: list = []
    resident_names: set = set()
    for op in case.ops:
        kind = op.get("op")
        out.add(f"op={kind}")
        if kind == "load":
            if op.get("name") in resident_names:
                out.add("adapter=reloaded")
            loaded.append(op.get("name"))
        elif kind == "unload" and op.get("name") in loaded:
            loaded.remove(op.get("name"))
            resident_names.add(op.get("name"))
        elif kind == "step":
            out |= _step_features(op, loaded, c.get("max_loras_per_batch", 9))
            out.add(f"path={step_path(op, scheduler, frontend, results)}")
    if sum(1 for op in case.ops if op.get("op") == "load") >= c.get("max_loras_per_batch", 9):
        out.add("pool=more-adapters-than-slots")
    return out


def _step_features(op: dict, loaded: list, slots: int) -> set:
    reqs, out = op.get("reqs", []), {f"step={op.get('mode', 'decode')}"}
    if None in reqs and any(reqs):
        out.add("step=mixed")
    if len({r for r in reqs if r}) > 1:
        out.add("step=several-adapters")
    if len(set(reqs)) > slots:
        out.add("step=more-adapters-than-slots")
    if any(r is not None and r not in loaded for r in reqs):
        out.add("step=names-unloaded-adapter")
    if op.get("logprob") is not None:
        out.add("step=input-logprobs")
    if any(k > 1 for k in op.get("new", ())):
        out.add("step=multi-round")
    if any(op.get("arrive", ())):
        out.add("step=late-arrival")
    if len(reqs) >= 5 and len(set(op.get("arrive", ()))) >= 3:
        out.add("step=stream")
    if sum(1 for k in op.get("stem", ()) if k) >= 2:
        out.add("step=shared-prefix")
    drawn = op.get("key") or ()
    if user_keys.KEY_USER in drawn:
        out.add("step=user-key")
    if any(isinstance(k, str) and k.startswith(user_keys.LORA_PREFIX) for k in drawn):
        out.add("step=key-names-adapter")
    return out


def feature_space(modules: tuple = SERVER_MODULES, frontend: bool = False, logprobs: bool = False,
                  backends: tuple = BACKENDS, scheduler: bool = False, drainer: bool = True,
                  moe: bool = False, radix: bool = False,
                  results: bool = False) -> tuple:
    """Every feature ``features`` gives for a release whose pool has buffers for ``modules`` (and whose
    adapter-management API is driven: ``frontend``; whose LogitsProcessor is driven: ``logprobs``)."""
    return tuple(
        [f"backend={b}" for b in backends] + ["eviction=lru", "eviction=fifo", "graph=on", "graph=off",
         "max_loras_per_batch=2", "max_loras_per_batch=3", "op=load", "op=unload", "op=step", "adapter=reloaded",
         "step=mixed", "step=several-adapters", "step=decode", "step=extend", "pool=more-adapters-than-slots",
         "tie=on", "tie=off"]
        + [f"target={m}" for m in modules]
        + (["max_loaded_loras=on", "max_loaded_loras=off", "adapter=pinned", "step=more-adapters-than-slots",
            "step=names-unloaded-adapter"] if frontend else [])
        + (["logprob_chunk=default", "logprob_chunk=off", "logprob_chunk=small", "step=input-logprobs"]
           if logprobs else [])
        + ([f"max_running_requests={m}" for m in (2, 3, 4)] + ["chunked_prefill=on", "chunked_prefill=off",
           "max_prefill_tokens=small", "max_prefill_tokens=default", "step=multi-round", "step=late-arrival",
           "step=stream"] + (["drain=on", "drain=off"] if drainer else [])
           + (["radix_cache=on", "radix_cache=off", "step=shared-prefix", "step=user-key", "step=key-names-adapter"]
              if radix else []) + ["kv_pool=small", "retract=test-mode"] if scheduler else [])
        + (["moe=on", "moe.top_k=1", "moe.top_k=2", *(f"moe.experts={e}" for e in sparse.EXPERTS),
            "moe.shared_outer=on", "moe.shared_outer=off", "moe.virtual_experts=on", "moe.virtual_experts=off"]
           if moe else [])
        + [f"path={p}" for p in paths(scheduler, frontend, logprobs, results)])


FEATURE_SPACE = feature_space()

__all__ = ["BACKENDS", "FEATURE_SPACE", "PATHS", "SERVER_NAME", "feature_space", "features", "paths",
           "sglang_engine_cases", "step_path"]
