"""What a vllm_engine case exercises, from its JSON alone (no vLLM import): coverage features."""

from __future__ import annotations

from .model import GDN, GDN_PATHS, LAYERS

OPS = ("add", "remove", "pin", "step", "dummy_run")
SERVING_OPS = ("serve_load", "serve_unload")
FEATURE_SPACE = tuple(
    [f"op={o}" for o in OPS] + [f"layer={x}" for x in LAYERS + ("experts",)]
    + ["layout=qkv-merged", "layout=qkv-fused", "layout=gate_up-merged", "layout=gate_up-fused",
       "fully_sharded_loras=on", "specialize_active_lora=on", "target_modules=filtered", "lora_dtype=auto",
       "adapter=rslora", "adapter=partial-targets", "adapters=mixed-ranks", "moe=top_k-2", "moe=3d", "adapter=experts",
       "step=mixed", "step=no-lora", "step=padded", "step=drafts", "step=prompt-logprobs", "step=chunked-prompt",
       "step=prompt-token-ids", "step=prompt-start", "step=finished-requests",
       "step=index-reused", "step=repeated", "state=slots-full", "state=more-adapters-than-cpu-slots",
       "state=removed-in-use", "state=pinned", "state=re-added"]
    + [f"max_loras={n}" for n in (1, 2, 3)]
    + [f"layout=gdn-{g}" for g in GDN if g != "none"] + [f"layer={m}" for m in GDN_PATHS] + ["adapter=packed-partial"]
    + ["runner=v1", "runner=v1-graphs", "runner=v1-reorder", "runner=v1-prompt-logprobs", "runner=v2-graphs",
       "graphs=specialize-lora-off"]
    + [f"op={o}" for o in SERVING_OPS]
    + ["serving=on", "prefix_caching=on", "prefix_caching=off", "step=served-request", "serve=reload-same-name",
       "serve=reload-inplace", "step=shared-stem"])

# the features only a release with that part can give (feature_space)
_V1 = ("runner=v1", "runner=v1-graphs", "runner=v1-reorder", "runner=v1-prompt-logprobs")
_MOE = ("layer=experts", "moe=top_k-2", "moe=3d", "adapter=experts")
_SCORING = ("step=prompt-token-ids", "step=prompt-start")
_SERVING = tuple(f"op={o}" for o in SERVING_OPS) + ("serving=on", "prefix_caching=on", "prefix_caching=off",
                                                    "step=served-request", "serve=reload-same-name",
                                                    "serve=reload-inplace", "step=shared-stem")


def feature_space(v1: bool = True, v2_graphs: bool = True, moe: bool = True, scoring: bool = True,
                  serving: bool = True) -> tuple:
    """The features a release's cases can give (``make_target``, as ``vllm_engine_cases`` draws for it): ``v1``, its
    V1 runner (up to 0.33); ``v2_graphs``, the V2 runner's graph manager; ``moe``, its MoE block; ``scoring``, prompt
    token-id scores and starts (0.31 on). Before, every release declared all of ``FEATURE_SPACE``, and 0.34's
    campaigns listed the V1 runner's features as never reached."""
    left = set((() if v1 else _V1) + (() if v2_graphs else ("runner=v2-graphs",))
               + (() if v1 or v2_graphs else ("graphs=specialize-lora-off",)) + (() if moe else _MOE)
               + (() if scoring else _SCORING) + (() if serving else _SERVING))
    return tuple(f for f in FEATURE_SPACE if f not in left)


def _config(c: dict, out: set) -> None:
    out.add(f"max_loras={c.get('max_loras')}")
    for part in ("qkv", "gate_up"):
        out.add(f"layout={part}-{c.get('layout', {}).get(part)}")
    if c.get("layout", {}).get("gdn", "none") != "none":
        out.add(f"layout=gdn-{c['layout']['gdn']}")
    for layer in c.get("layers", ()):
        out.add(f"layer={layer}")
    for knob, name in (("fully_sharded_loras", "fully_sharded_loras=on"),
                       ("specialize_active_lora", "specialize_active_lora=on")):
        if c.get(knob):
            out.add(name)
    _runner(c, out)
    _moe(c, out)
    _serving(c, out)
    if c.get("target_modules") is not None:
        out.add("target_modules=filtered")
    if c.get("lora_dtype") == "auto":
        out.add("lora_dtype=auto")
    specs = list(c.get("adapters", {}).values())
    if any(a.get("rslora") for a in specs):
        out.add("adapter=rslora")
    if len({a.get("rank") for a in specs}) > 1:
        out.add("adapters=mixed-ranks")


def _runner(c: dict, out: set) -> None:
    """The runner and its graphs: V1 (v1_runner.py), V2 with CUDA graphs (v2_graphs.py)."""
    graphs = c.get("cudagraph_mode", "NONE") != "NONE"
    if c.get("runner") == "v1":
        out.add("runner=v1")
        if graphs:
            out.add("runner=v1-graphs")
        if c.get("reorder_threshold"):
            out.add("runner=v1-reorder")
    elif graphs:
        out.add("runner=v2-graphs")
    if graphs and c.get("cudagraph_specialize_lora") is False:
        out.add("graphs=specialize-lora-off")


def _serving(c: dict, out: set) -> None:
    """The serving layer and the prefix cache (serving_cases.py)."""
    if c.get("serving"):
        out.add("serving=on")
    if c.get("prefix_caching"):
        out.add("prefix_caching=on" if c["prefix_caching"].get("enabled") else "prefix_caching=off")


def _serving_ops(ops, out: set) -> None:
    """Same-name reloads (an unload, then a load of the name again), in-place reloads, served requests, stems that
    two requests share."""
    unloaded: set = set()
    stems: set = set()
    for op in ops:
        if op.get("op") == "serve_unload":
            unloaded.add(op.get("name"))
        elif op.get("op") == "serve_load":
            if op.get("name") in unloaded:
                out.add("serve=reload-same-name")
            if op.get("inplace"):
                out.add("serve=reload-inplace")
        elif op.get("op") == "step":
            for r in op.get("reqs", ()):
                if "model" in r:
                    out.add("step=served-request")
                if "stem" in r:
                    if r["stem"] in stems:
                        out.add("step=shared-stem")
                    stems.add(r["stem"])


def _moe(c: dict, out: set) -> None:
    if (c.get("moe") or {}).get("top_k") == 2:
        out.add("moe=top_k-2")
    if (c.get("moe") or {}).get("format") == "3d":
        out.add("moe=3d")
    if c.get("moe") and any("experts" in a.get("targets", ()) for a in c.get("adapters", {}).values()):
        out.add("adapter=experts")


def _step(op: dict, live: dict, freed: int, last, out: set) -> int:
    reqs = op.get("reqs", [])
    loras = [r.get("lora", 0) for r in reqs]
    if any(loras) and not all(loras):
        out.add("step=mixed")
    if not any(loras):
        out.add("step=no-lora")
    if op.get("pad"):
        out.add("step=padded")
    if any(r.get("drafts") for r in reqs):
        out.add("step=drafts")
    if any(r.get("prompt_logprobs") for r in reqs):
        out.add("step=prompt-logprobs")
    if any(r.get("prompt", 0) > r["tokens"] for r in reqs):
        out.add("step=chunked-prompt")
    if any(r.get("score_ids") for r in reqs):  # prompt_scores.py (0.31 on)
        out.add("step=prompt-token-ids")
    if any(r.get("prompt_start") for r in reqs):
        out.add("step=prompt-start")
    if op.get("finish"):
        out.add("step=finished-requests")
    new = [r for r in reqs if r["id"] not in live]
    if new and freed:
        out.add("step=index-reused")
    if last is not None and [(r["id"], r["tokens"]) for r in reqs] == last:
        out.add("step=repeated")
    return max(0, freed - len(new))


class _Walk:
    """The worker's state as the ops leave it, as far as the features need (no vLLM: from the JSON)."""

    def __init__(self, c: dict, out: set):
        self.c, self.out = c, out
        self.live: dict = {}          # request id -> adapter
        self.registered: set = set()  # adapters brought in since the last dummy run (no eviction modelled)
        self.ever: set = set()
        self.freed, self.last = 0, None

    def add(self, op: dict) -> None:
        if op["id"] in self.ever:
            self.out.add("state=re-added")
        self.registered.add(op["id"])
        self.ever.add(op["id"])

    def remove(self, op: dict) -> None:
        if op["id"] in set(self.live.values()):
            self.out.add("state=removed-in-use")
        self.registered.discard(op["id"])

    def pin(self, op: dict) -> None:
        self.out.add("state=pinned")

    def dummy_run(self, op: dict) -> None:
        self.registered.clear()

    def step(self, op: dict) -> None:
        for rid in op.get("finish", []):
            if self.live.pop(rid, None) is not None:
                self.freed += 1
        self.freed = _step(op, self.live, self.freed, self.last, self.out)
        for r in op.get("reqs", []):
            self.live.setdefault(r["id"], r.get("lora", 0))
            if r.get("lora"):
                self.registered.add(r["lora"])
                self.ever.add(r["lora"])
        self.last = [(r["id"], r["tokens"]) for r in op.get("reqs", [])]

    def after(self) -> None:
        if len(self.registered) >= self.c.get("max_loras", 1):
            self.out.add("state=slots-full")
        if len(self.registered) > self.c.get("max_cpu_loras", 1):
            self.out.add("state=more-adapters-than-cpu-slots")


def features(case) -> set:
    c = case.config
    out: set = set()
    _config(c, out)
    specs = list(c.get("adapters", {}).values())
    widest = max((len(a.get("targets", ())) for a in specs), default=0)
    if any(0 < len(a.get("targets", ())) < widest for a in specs):
        out.add("adapter=partial-targets")
    packed = GDN.get(c.get("layout", {}).get("gdn", "none"), {}).values()
    groups = [set(names) for _, names in packed if len(names) > 1]
    if any(0 < len(g & set(a.get("targets", ()))) < len(g) for g in groups for a in specs):
        out.add("adapter=packed-partial")  # some, not all, of a packed module's names spanning several slices
    _serving_ops(case.ops, out)
    walk = _Walk(c, out)
    for op in case.ops:
        kind = op.get("op")
        out.add(f"op={kind}")
        if kind == "step" and c.get("runner") == "v1" and "lm_head" in c.get("layers", ()) and \
                any(r.get("prompt_logprobs") for r in op.get("reqs", ())):
            out.add("runner=v1-prompt-logprobs")  # the V1 runner's _get_prompt_logprobs_dict (v1_prompt_logprobs.py)
        if kind in OPS:
            getattr(walk, kind)(op)
        walk.after()
    return out
