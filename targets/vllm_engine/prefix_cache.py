"""vLLM's prefix cache keyed by adapter, as shipped: the v1 ``KVCacheManager`` beside the engine target's runner.

Per case with ``prefix_caching`` drawn (serving_cases.py): vLLM's own ``KVCacheManager`` (``enable_caching`` =
``--enable-prefix-caching``, one full-attention KV-cache group of vLLM's ``FullAttentionSpec`` in a
``KVCacheConfig``, ``block_size`` 1 or 2 tokens so that the target's short prompts fill blocks), the release's own
block hasher (``get_request_block_hasher`` with the ``CacheConfig``'s hash function, after ``init_none_hash``, as
``EngineCore`` makes it) and vLLM ``Request`` objects holding each request's ``LoRARequest``, prompt token ids (one
of three fixed stems, ``prompt``) and the hasher. Each step, before the worker runs it, per request as the
scheduler's ``schedule()`` calls the manager: a finished request's ``free``; a new request's
``get_computed_blocks`` (its prefix-cache hit), then ``allocate_slots(request, num_new_tokens,
num_new_computed_tokens, new_computed_blocks)`` and ``num_computed_tokens`` advanced; a running request in its
prompt ``allocate_slots(request, num_new_tokens)``. The chunk sizes are the case's (the step's ``tokens``): a hit
adds its cached tokens in front of what the step computes (the worker's forward is the case's, independent of
the hit). Decode tokens are not hashed here (no output token ids are appended).

Not vLLM's ``Scheduler`` itself: its ``schedule()`` would choose every request's tokens from its own budget and
queues, where the target's steps draw them (their chunks, drafts, finishes); the manager is driven with the
scheduler's own calls in its order instead (about 10 lines of ``schedule()`` / ``finish_requests`` re-stated).

Oracle ``step.prefix_cache`` (a state violation): every block a request reuses (``get_computed_blocks``) was
written by a request of the same adapter identity, the same weights (the config adapter its LoRARequest's path
holds; the base model), over the same tokens up to the block's end. The block's writer is recorded at its
allocation (the request that computes its tokens), never from vLLM's hashes.
"""

from __future__ import annotations

import inspect

from . import adapters

STEMS = 3
STEM_LEN = 64  # max_model_len


def prompt(stem: int, length: int) -> list[int]:
    """A prompt of ``length`` token ids: the first tokens of stem ``stem`` (three fixed sequences of 64 ids)."""
    return [(7 * stem + 3 * i * (stem + 1) + i * i) % 31 + 1 for i in range(length)]


def find() -> dict:
    """vLLM's prefix-cache pieces in this release."""
    from vllm.v1.core import kv_cache_utils as utils
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request
    try:
        from vllm.utils.hashing import get_hash_fn_by_name
    except ImportError:
        from vllm.utils import get_hash_fn_by_name  # type: ignore[attr-defined,no-redef]
    return {"KVCacheManager": KVCacheManager, "Request": Request, "utils": utils,
            "FullAttentionSpec": FullAttentionSpec, "KVCacheConfig": KVCacheConfig,
            "KVCacheGroupSpec": KVCacheGroupSpec, "hash_fn": get_hash_fn_by_name}


def _call(fn, **kw):
    """``fn`` with the keywords its signature takes (the constructors' arguments differ between releases)."""
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kw.items() if k in params})


def hashes_name_only(found: dict) -> bool:
    """This release's block hash keys an adapter on its name alone (``_gen_lora_extra_hash_keys`` without the
    path: before #44950, 0.31)."""
    return "lora_path" not in inspect.getsource(found["utils"]._gen_lora_extra_hash_keys)


class PrefixCache:
    """The scheduler's KV cache manager in front of a session (or of its serving front end's session)."""

    def __init__(self, session, ctx, found: dict):
        import torch
        self.session, self.ctx, self.f = session, ctx, found
        knob = session.c["prefix_caching"]
        self.bs = bs = knob["block_size"]
        spec = _call(found["FullAttentionSpec"], block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float16)
        blocks = 1 + 4 * session.c["max_num_seqs"] * STEM_LEN // bs  # the null block, and room: nothing preempted
        cfg = _call(found["KVCacheConfig"], num_blocks=blocks, kv_cache_tensors=[],
                    kv_cache_groups=[found["KVCacheGroupSpec"](["model.layers.0.self_attn.attn"], spec)])
        self.kv = _call(found["KVCacheManager"], kv_cache_config=cfg, max_model_len=STEM_LEN,
                        enable_caching=knob["enabled"], hash_block_size=bs, scheduler_block_size=bs,
                        block_size=bs, log_stats=False)
        hash_fn = found["hash_fn"](session.cfg.cache_config.prefix_caching_hash_algo)
        found["utils"].init_none_hash(hash_fn)
        self.hasher = _call(found["utils"].get_request_block_hasher, block_size=bs, hash_block_size=bs,
                            caching_hash_fn=hash_fn)
        self.requests: dict[str, object] = {}        # request id -> vLLM Request
        self.identity: dict[str, tuple] = {}         # request id -> (adapter, name, id, path) it runs under
        self.prompt_len: dict[str, int] = {}
        self.writer: dict[int, tuple] = {}           # block id -> (identity, token ids up to its end) that wrote it

    def __getattr__(self, name):
        return getattr(self.session, name)

    def step(self, op) -> None:
        for rid in op.get("finish", []):
            req = self.requests.pop(rid, None)
            if req is not None:
                self.kv.free(req)
        for r in op["reqs"]:
            if r["id"] in self.requests:
                self._running(r)
            elif r["id"] not in self.session.live:
                self._new(r)
        self.session.step(op)

    def _new(self, r: dict) -> None:
        lora = self.session.lora_request_of(r)
        length = int(r.get("prompt", r["tokens"])) + STEM_LEN // 4  # the stem's shared tokens, then the case's
        ids = prompt(r.get("stem", 0), min(length, STEM_LEN - 1))
        req = _call(self.f["Request"], request_id=r["id"], prompt_token_ids=ids, sampling_params=_params(),
                    pooling_params=None, eos_token_id=None, lora_request=lora, block_hasher=self.hasher,
                    arrival_time=0.0)
        self.requests[r["id"]] = req
        weights = adapters.folder(self.session.c, self.session.c["adapters"][str(r["lora"])]) if r["lora"] else None
        self.identity[r["id"]] = (weights, r["lora"], getattr(lora, "lora_name", None),
                                  getattr(lora, "lora_int_id", None), getattr(lora, "lora_path", None))
        self.prompt_len[r["id"]] = len(ids)
        blocks, hit = self.kv.get_computed_blocks(req)[:2]
        self._check_reuse(r["id"], req, blocks, hit)
        new = max(1, min(len(ids) - hit, r["tokens"] + STEM_LEN // 4))
        self._allocate(r["id"], req, new, hit, blocks)

    def _running(self, r: dict) -> None:
        req = self.requests[r["id"]]
        left = self.prompt_len[r["id"]] - req.num_computed_tokens
        if left > 0:
            self._allocate(r["id"], req, min(left, r["tokens"]), 0, None)

    def _allocate(self, rid: str, req, new: int, hit: int, blocks) -> None:
        kw = {"num_new_computed_tokens": hit, "new_computed_blocks": blocks} if blocks is not None else {}
        if self.kv.allocate_slots(req, new, **kw) is None:
            raise AssertionError(f"prefix cache: no room for {new} tokens of {rid} ({len(self.kv.block_pool.blocks)} "
                                 f"blocks: the target sizes the pool so that nothing waits)")
        start = req.num_computed_tokens + hit
        req.num_computed_tokens = end = start + new
        ids = list(req.prompt_token_ids)
        for j, bid in enumerate(self.kv.get_block_ids(rid)[0]):
            if (j + 1) * self.bs > start and j * self.bs < end:  # the blocks this chunk computes (a partial one
                # the last chunk began included: this chunk completes it), so it writes them
                self.writer[bid] = (self.identity[rid], tuple(ids[:min((j + 1) * self.bs, end)]))

    def _check_reuse(self, rid: str, req, blocks, hit: int) -> None:
        if not hit:
            return
        me, ids, problems = self.identity[rid], list(req.prompt_token_ids), []
        for j, bid in enumerate(blocks.get_block_ids()[0][: hit // self.bs]):
            who = self.writer.get(bid)
            tokens = tuple(ids[:(j + 1) * self.bs])
            if who is None:
                problems.append(f"block {j} (id {bid}) reused by {rid!r}: no request ever wrote it")
            elif who[0][0] != me[0] or who[1] != tokens:
                problems.append(f"block {j} (id {bid}) reused by {rid!r} under {_who(me)} was written under "
                                f"{_who(who[0])}" + ("" if who[1] == tokens else " over other tokens"))
        if problems:
            self.ctx.check("step.prefix_cache", problems[:3],
                           {"reader": _ident(me), "writer": _ident(self.writer[blocks.get_block_ids()[0][0]][0])
                            if blocks.get_block_ids()[0][0] in self.writer else None, "hit_tokens": hit})


def _params():
    from vllm.sampling_params import SamplingParams
    return SamplingParams(max_tokens=8)


def _ident(x: tuple) -> dict:
    return {"adapter": x[1], "name": x[2], "lora_int_id": x[3], "path": x[4]}


def _who(x: tuple) -> str:
    return "the base model" if not x[1] else f"adapter {x[1]} (name {x[2]!r}, lora_int_id {x[3]})"
