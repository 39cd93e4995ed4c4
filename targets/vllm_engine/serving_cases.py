"""Cases for the serving layer and the prefix cache of ``vllm_engine`` (serving.py, prefix_cache.py): the knobs and
the ops a client of vLLM's API server sends, drawn over the ops ``cases.py`` draws (no vLLM import).

Knobs (config): ``serving`` (true: adapters come and go through vLLM's ``OpenAIServingModels``, as with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` and ``/v1/load_lora_adapter`` / ``/v1/unload_lora_adapter``; requests name a
served adapter), ``prefix_caching`` (null: ``--no-enable-prefix-caching``; else ``{"enabled": bool, "block_size":
1 or 2}``: vLLM's ``KVCacheManager`` runs beside the runner as the scheduler drives it).

Ops of a serving case (``serving_ops`` rewrites the drawn adapter ops into them):

* ``serve_load {"name", "adapter", "inplace"}``: ``POST /v1/load_lora_adapter`` with ``lora_name`` = name,
  ``lora_path`` = the PEFT folder of config adapter ``adapter`` (its weights), ``load_inplace``;
* ``serve_unload {"name"}``: ``POST /v1/unload_lora_adapter``;
* a step's request ``{"model": name, "lora": adapter}``: a completion request for the served name (``lora``: the
  adapter the name serves, as the generator expects it; the run takes the serving layer's own answer).

A prefix-caching case's new requests carry ``stem`` (0 - 2): their prompt token ids are the first tokens of one of
three fixed sequences (prefix_cache.prompt), so that requests of one adapter, of other adapters and of the base model
share prompt prefixes.
"""

from __future__ import annotations

from hypothesis import strategies as st

NAMES = ("n1", "n2", "n3", "n4", "n5")  # the served names: "n<a>" is first loaded with config adapter a
STEMS = 3
BLOCK_SIZES = (1, 2)


def name(adapter: int) -> str:
    return f"n{adapter}"


def knobs(draw) -> dict:
    """The serving and prefix-caching knobs of a case: a third of the cases serve through ``OpenAIServingModels``,
    half run the KV cache manager (prefix caching on in 3 of 4 of those: ``--enable-prefix-caching`` is vLLM's
    default)."""
    out: dict = {"serving": draw(st.integers(0, 2)) == 0}
    out["prefix_caching"] = ({"enabled": draw(st.integers(0, 3)) > 0, "block_size": draw(st.sampled_from(BLOCK_SIZES))}
                             if draw(st.booleans()) else None)
    return out


def with_stems(draw, cfg: dict, ops: list[dict]) -> list[dict]:
    """A prefix-caching case's new requests each draw a ``stem``."""
    if not cfg.get("prefix_caching"):
        return ops
    seen: set[str] = set()
    out = []
    for op in ops:
        if op["op"] == "step":
            reqs = []
            for r in op["reqs"]:
                if r["id"] not in seen:
                    r = dict(r, stem=draw(st.integers(0, STEMS - 1)))
                    seen.add(r["id"])
                reqs.append(r)
            op = dict(op, reqs=reqs)
        out.append(op)
    return out


class _Client:
    """The client's view while ``serving_ops`` rewrites: which name serves which adapter, which were ever loaded."""

    def __init__(self, draw, pool: int):
        self.draw, self.pool = draw, pool
        self.served: dict[str, int] = {}
        self.ever: set[str] = set()
        self.out: list[dict] = []

    def load(self, n: str, a: int, inplace: bool = False) -> None:
        self.out.append({"op": "serve_load", "name": n, "adapter": a, "inplace": inplace})
        self.served[n] = a
        self.ever.add(n)

    def unload(self, n: str) -> None:
        if n in self.served:
            self.out.append({"op": "serve_unload", "name": n})
            del self.served[n]

    def any_adapter(self) -> int:
        return self.draw(st.sampled_from(range(1, self.pool + 1)))

    def ensure(self, a: int) -> str:
        """``n<a>`` served: loaded (adapter a the first time, any adapter on a reload), or reloaded right before the
        step one time in six (in place or after an unload)."""
        n = name(a)
        if n not in self.served:
            self.load(n, self.any_adapter() if n in self.ever else a)
        elif self.draw(st.integers(0, 5)) == 0:
            inplace = self.draw(st.booleans())
            if not inplace:
                self.unload(n)
            self.load(n, self.any_adapter(), inplace)
        return n

    def step(self, op: dict) -> None:
        reqs = []
        for r in op["reqs"]:
            if r.get("lora"):
                n = self.ensure(r["lora"])
                r = dict(r, model=n, lora=self.served[n])
            reqs.append(r)
        self.out.append(dict(op, reqs=reqs))


def serving_ops(draw, cfg: dict, ops: list[dict], pool: int) -> list[dict]:
    """The drawn ops as a client of the API server sends them: ``add`` of adapter a is ``serve_load`` of ``n<a>``
    (adapter a the first time; after an unload, a reload of the same name with any adapter of the pool: the same-name
    reload of vllm-project/vllm#42125), ``remove`` is ``serve_unload``, ``pin`` has no API (dropped); a step's
    request of adapter a names ``n<a>``, loaded first if the name is not served, and sometimes unloaded and loaded
    again (in place or not, with another adapter or the same) right before the step."""
    c = _Client(draw, pool)
    for op in ops:
        kind = op["op"]
        if kind == "add" and name(op["id"]) not in c.served:
            n = name(op["id"])
            c.load(n, c.any_adapter() if n in c.ever else op["id"])
        elif kind == "remove":
            c.unload(name(op["id"]))
        elif kind == "step":
            c.step(op)
        elif kind not in ("add", "pin"):
            c.out.append(op)
    return c.out
