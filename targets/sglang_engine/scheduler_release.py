"""Where each release's scheduler reads its configuration and keeps its state, found by what the release has (never
its version string): the server knobs, the one-rank parallel widths, the pipeline micro-batch default, the tree
cache and the KV release of a finished request. ``scheduler.Server`` builds the scheduler object from these.

Shapes (docs/sglang.md, "the scheduler's admission of LoRA requests and its loop"):

* the knobs: 0.5.17+ read them from the runtime context's config bags (``get_schedule()``, ``get_lora()``);
  before, ``Scheduler.__init__`` reads them from its ``ServerArgs`` (``self.schedule_policy =
  server_args.schedule_policy``, ``scheduler.py:334`` in 0.5.16), so the case's ``ServerArgs`` is the source;
* the parallel widths: the runtime context's ``get_parallel()`` (0.5.14+); before, a world of one;
* ``pp_max_micro_batch_size``'s default (``Scheduler.init_model_worker``): 0.5.17+ a runtime-context override,
  0.5.16 an override of the published ``ServerArgs`` (``get_server_args().override(...)``), 0.5.12 - 0.5.15 an
  assignment on the global ``ServerArgs`` (``get_global_server_args().pp_max_micro_batch_size = ...``);
* the loop: ``get_next_batch_to_run(running_batch, last_batch)`` returning a plan (0.5.16+) or
  ``get_next_batch_to_run()`` setting ``running_batch`` (before); the sampled tokens relayed by
  ``_relay_forward_payload`` (0.5.16+, two signatures), stashed in the ``FutureMap`` (0.5.13 - 0.5.15) or set as
  ``batch.output_ids`` (0.5.12, no ``FutureMap``: the worker takes the ``ModelWorkerBatch``);
* the objects' fields and names: ``SchedulerDPAttnAdapter`` / ``create_future_map`` / ``ForwardBatch.init_new`` take
  the keywords their release declares (``accepted``); 0.5.12's ``Req`` (list token ids, ``check_finished``,
  ``is_chunked``) and its ``LoRADrainer`` made in ``Scheduler.__init__``.
"""

from __future__ import annotations

import importlib
import inspect
import types
from array import array

MICRO_BATCH_SOURCE = "scheduler.pp_max_micro_batch_size_default"  # the override's source name, as SGLang's


def _runtime_context():
    try:
        return importlib.import_module("sglang.srt.runtime_context")
    except ImportError:  # before 0.5.14
        return None


def knob_source(server_args) -> tuple:
    """``(schedule, lora)``: where the release's scheduler reads ``max_running_requests``, ``schedule_policy``, the
    priority knobs and ``max_loras_per_batch`` (module doc)."""
    rc = _runtime_context()
    if rc is not None and hasattr(rc, "get_schedule"):
        return rc.get_schedule(), rc.get_lora()
    return server_args, server_args


# the widths ModelRunner.__init__ takes for a world of one (the releases before the runtime context's ParallelContext)
ONE_RANK = {"tp_rank": 0, "tp_size": 1, "dp_size": 1, "attn_dp_size": 1, "pp_rank": 0, "pp_size": 1,
            "attn_cp_rank": 0, "attn_cp_size": 1, "moe_ep_size": 1, "dp_rank": None}


# Scheduler.__init__'s rank lines for one rank (0.5.10 - 0.5.11 read them from the scheduler, ``self.pp_size``;
# later releases from its ParallelState or the runtime context): tp, pp, dp 1 as the case's ServerArgs has them
SCHEDULER_RANKS = {"tp_rank": 0, "tp_size": 1, "pp_rank": 0, "pp_size": 1, "dp_rank": None, "dp_size": 1,
                   "moe_ep_rank": 0, "moe_ep_size": 1, "moe_dp_rank": 0, "moe_dp_size": 1, "attn_cp_rank": 0,
                   "attn_cp_size": 1, "attn_tp_rank": 0, "attn_tp_size": 1, "attn_dp_rank": 0}


def one_rank_widths():
    """The model runner's parallel widths: the runtime context's (0.5.14+, the world of one api.py set up), else
    ``ONE_RANK``."""
    rc = _runtime_context()
    return rc.get_parallel() if rc is not None else types.SimpleNamespace(**ONE_RANK)


def published_server_args():
    """The ``ServerArgs`` the release's scheduler reads globally: the runtime context's (0.5.15+), else
    ``get_global_server_args()``."""
    rc = _runtime_context()
    if rc is not None and hasattr(rc, "get_server_args"):
        return rc.get_server_args()
    return importlib.import_module("sglang.srt.server_args").get_global_server_args()


def default_micro_batch(n: int) -> None:
    """``Scheduler.init_model_worker``'s default of ``--pp-max-micro-batch-size`` (``max_running_requests //
    pp_size``, one rank here), set where the release keeps it (module doc); ``get_num_allocatable_reqs`` reads it."""
    rc = _runtime_context()
    if rc is not None and hasattr(rc.get_context(), "override"):  # 0.5.17+
        if not rc.get_parallel().pp_max_micro_batch_size:
            rc.get_context().override(MICRO_BATCH_SOURCE, pp_max_micro_batch_size=n)
        return
    sa = published_server_args()
    if sa.pp_max_micro_batch_size:
        return
    if hasattr(sa, "override"):  # 0.5.16: the published ServerArgs refuses a bare write
        sa.override(MICRO_BATCH_SOURCE, pp_max_micro_batch_size=n)
    else:
        sa.pp_max_micro_batch_size = n


def one_rank_state():
    """SGLang's own one-rank ``ParallelState``: ``ParallelState.trivial()`` (0.5.16 - 0.5.20), else made as 0.5.13 -
    0.5.15's ``Scheduler.__init__`` makes it for one rank (``scheduler.py:372-390`` in 0.5.15: ``SCHEDULER_RANKS``,
    attention DP of one, GPU 0; its output streamer reads it); None where there is no such class (the release reads
    the widths from the runtime context or its own attributes)."""
    try:
        from sglang.srt.distributed.parallel_state_wrapper import ParallelState
    except ImportError:
        return None
    if hasattr(ParallelState, "trivial"):
        return ParallelState.trivial()
    return ParallelState(**accepted(ParallelState, **SCHEDULER_RANKS, attn_dp_size=1, gpu_id=0))


def tree_cache():
    """The tree cache the release's server makes for a dense model with ``--disable-radix-cache`` and chunked prefill
    (``mem_cache/registry.py``'s default factory): 0.5.20+ a ``UnifiedRadixCache`` of the FULL component, disabled;
    before, a ``ChunkCache`` (``registry.py:91-95`` in 0.5.19; the scheduler's own lines before the registry)."""
    try:
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        return UnifiedRadixCache, {"tree_components": (ComponentType.FULL,)}
    except ImportError:
        from sglang.srt.mem_cache.chunk_cache import ChunkCache
        return ChunkCache, {}


def radix_tree_cache():
    """The tree cache the release's server makes for a dense model with the radix cache on (no
    ``--disable-radix-cache``, no hierarchical cache, LMCache or experimental C++ tree): where the fall-through
    ``return`` of ``mem_cache/registry.py``'s ``default_radix_cache_factory`` hands over to
    ``(_)create_unified_radix_cache``, a ``UnifiedRadixCache`` of the FULL component (0.5.19+: ``registry.py:143`` in
    0.5.19, ``:146`` in 0.5.23); else a ``RadixCache`` (its
    ``return RadixCache(params)``: ``registry.py:167`` in 0.5.18; ``scheduler.py:957`` in 0.5.12, ``:786`` in 0.5.5,
    before the registry)."""
    import ast
    import textwrap
    try:
        registry = importlib.import_module("sglang.srt.mem_cache.registry")
        body = ast.parse(textwrap.dedent(inspect.getsource(registry.default_radix_cache_factory))).body[0].body
        last = [ast.unparse(n) for n in body if isinstance(n, ast.Return)][-1]  # its fall-through return
        unified = "create_unified_radix_cache(" in last
    except (ImportError, AttributeError, OSError, IndexError):
        unified = False
    if unified:
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        return UnifiedRadixCache, {"tree_components": (ComponentType.FULL,)}
    from sglang.srt.mem_cache.radix_cache import RadixCache
    return RadixCache, {}


def make_tree_cache(tree_cache, **params):
    """The tree cache (``tree_cache()``'s class and keywords) made as the release's scheduler makes it: from a
    ``CacheInitParams`` (``mem_cache/cache_init_params.py``, 0.5.6+), else with the keywords its constructor declares
    (0.5.5: ``ChunkCache(req_to_token_pool=, token_to_kv_pool_allocator=, page_size=)``, ``scheduler.py:705``)."""
    cls, kw = tree_cache
    try:
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    except ImportError:
        return cls(**accepted(cls, **params))
    return cls(CacheInitParams(**accepted(CacheInitParams, **params), **kw))


def tp_model_worker():
    """``TpModelWorker``: the loop of 0.5.5 - 0.5.7 asks the worker's ``can_run_lora_batch`` (which asks the manager's
    ``validate_lora_batch``); later loops ask the manager through ``tp_worker.model_runner``."""
    from sglang.srt.managers.tp_worker import TpModelWorker
    return TpModelWorker


# Scheduler.__init__'s blocks that later releases moved into set-up methods of the same lines (0.5.7's
# ``init_running_status`` is 0.5.6's "# Init running status" block ...): the method -> the block's comment
INIT_BLOCKS = {"init_running_status": "# Init running status", "init_chunked_prefill": "# Init chunked prefill",
               "init_schedule_policy": "# Init schedule policy and new token estimation"}


def _init_block(cls, method: str) -> str | None:
    """The source of ``Scheduler.__init__``'s block for ``method`` (its comment line up to the next blank line that is
    followed by a comment line of the same indent), dedented; None where the release has no such block."""
    import textwrap
    try:
        lines = inspect.getsource(cls.__init__).splitlines()
    except (OSError, TypeError):
        return None
    head = INIT_BLOCKS[method]
    start = next((i for i, ln in enumerate(lines) if ln.strip() == head), None)
    if start is None:
        return None
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    end = next((j for j in range(start + 1, len(lines) - 1)
                if not lines[j].strip() and lines[j + 1].startswith(indent + "#")), len(lines))
    return textwrap.dedent("\n".join(lines[start:end]))


def has_init_step(cls, method: str) -> bool:
    return hasattr(cls, method) or _init_block(cls, method) is not None


def init_step(sc, cls, method: str) -> None:
    """One of the scheduler's set-up steps (``INIT_BLOCKS``): its own method (0.5.7+), else the same lines of the
    release's ``Scheduler.__init__`` (0.5.5 - 0.5.6: the block under its comment, taken from the release's source
    and run on the scheduler object in the scheduler module's namespace, ``server_args`` the object's)."""
    if hasattr(sc, method):
        getattr(sc, method)()
        return
    block = _init_block(cls, method)
    module = importlib.import_module(cls.__module__)
    exec(compile(block, f"<{cls.__module__}.Scheduler.__init__: {INIT_BLOCKS[method]}>", "exec"),  # noqa: S102
         dict(vars(module), self=sc, server_args=sc.server_args))


def metrics_off(sc, cls) -> None:
    """Whether this scheduler logs its prefill stats (``log_prefill_stats``: a log line and gauges, no LoRA state),
    answered no: ``current_scheduler_metrics_enabled`` is a method in 0.5.5 - 0.5.6 (``scheduler.py:2536`` in 0.5.6),
    an attribute set by ``__init__`` in 0.5.7 - 0.5.9 (the loop reads it, ``scheduler.py:2021`` in 0.5.7); on the
    server it is true on attention-TP rank 0. Later releases log through ``scheduler_stage_metrics`` (None here)."""
    if callable(getattr(cls, "current_scheduler_metrics_enabled", None)):
        sc.current_scheduler_metrics_enabled = lambda: False
    else:
        sc.current_scheduler_metrics_enabled = False


def release(release_kv_cache):
    """A finished request's KV given back as the release's result processing gives it back: 0.5.22+ checkpoint what
    it computed first (``checkpoint=True``); before, ``release_kv_cache(req, tree)`` (its ``is_insert`` default);
    0.5.5 (no ``release_kv_cache``) the tree cache's ``cache_finished_req(req)``
    (``scheduler_output_processor_mixin.py:114``)."""
    if release_kv_cache is None:
        return lambda req, tree: tree.cache_finished_req(req)
    if "checkpoint" in inspect.signature(release_kv_cache).parameters:
        return lambda req, tree: release_kv_cache(req, tree, checkpoint=True)
    return lambda req, tree: release_kv_cache(req, tree)


def next_batch(sc):
    """``event_loop_normal``'s call of ``get_next_batch_to_run``: 0.5.16+ hand it the running and last batches and take
    back a plan (the running batch and the batch to run); before, it reads and sets ``self.running_batch`` and
    returns the batch (the loop keeps it as ``cur_batch``)."""
    if "running_batch" in inspect.signature(sc.get_next_batch_to_run).parameters:
        plan = sc.get_next_batch_to_run(sc.running_batch, sc.last_batch)
        sc.running_batch = plan.running_batch
        sc.cur_batch_for_debug = plan.batch_to_run
        return plan.batch_to_run
    batch = sc.get_next_batch_to_run()
    sc.cur_batch = batch
    return batch


def token_allocator():
    """``TokenToKVPoolAllocator``: ``mem_cache/allocator/token.py`` 0.5.13+, ``mem_cache/allocator.py`` before."""
    try:
        from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    except ImportError:
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    return TokenToKVPoolAllocator


def forward_inputs_resolver():
    """``overlap_utils.resolve_forward_inputs`` (0.5.13+: the batch's input ids gathered from the ``FutureMap``), or
    None (0.5.12: ``run_batch`` hands the worker ``batch.get_model_worker_batch()``, input ids set by the batch)."""
    try:
        from sglang.srt.managers.overlap_utils import resolve_forward_inputs
    except ImportError:
        return None
    return resolve_forward_inputs


def init_lora_drainer(sc, server_args) -> None:
    """The scheduler's ``LoRADrainer``: its own ``init_lora_drainer`` (0.5.13+); 0.5.12 makes it in
    ``Scheduler.__init__`` (``scheduler.py:483-489``, re-stated: the drainer with the server's slots and threshold
    where the threshold is on); before 0.5.12 no drainer (the admission reads none)."""
    if hasattr(sc, "init_lora_drainer"):
        sc.init_lora_drainer()
        return
    try:
        from sglang.srt.lora.lora_drainer import LoRADrainer
    except ImportError:
        sc.lora_drainer = None
        return
    threshold = server_args.lora_drain_wait_threshold
    sc.lora_drainer = LoRADrainer(server_args.max_loras_per_batch, threshold) if threshold > 0.0 else None


def future_map(sc, device: str, req_pool):
    """The scheduler's ``FutureMap`` (``spec_algorithm.create_future_map``, with the keywords its release declares:
    ``needs_confidence_relay`` 0.5.16+), or None where the non-overlap loop has none (0.5.12: no
    ``create_future_map``; ``Scheduler.__init__`` makes a ``FutureMap`` for the overlap scheduler only)."""
    create = getattr(sc.spec_algorithm, "create_future_map", None)
    if create is None:
        return None
    return create(device, req_pool, **accepted(create, needs_cpu_seq_lens=True, needs_confidence_relay=False))


def dp_attn_adapter(**fields):
    """``SchedulerDPAttnAdapter`` (0.5.13+) with the fields its release declares, or None (0.5.12: the DP-attention
    hooks are ``SchedulerDPAttnMixin``'s methods on the scheduler)."""
    try:
        dp_attn = importlib.import_module("sglang.srt.managers.scheduler_components.dp_attn")
    except ImportError:
        return None
    return dp_attn.SchedulerDPAttnAdapter(**accepted(dp_attn.SchedulerDPAttnAdapter, **fields))


def update_finish_state(req, *args) -> None:
    """The request's finish check after a token: ``update_finish_state`` 0.5.13+, ``check_finished`` 0.5.12."""
    (getattr(req, "update_finish_state", None) or req.check_finished)(*args)


def middle_chunks(req) -> int:
    """The prefill chunks of ``req`` in flight before its last (``inflight_middle_chunks`` 0.5.13+, ``is_chunked``
    0.5.12): result processing gives such a chunk no token."""
    return req.inflight_middle_chunks if hasattr(req, "inflight_middle_chunks") else req.is_chunked


def middle_chunk_done(req) -> None:
    if hasattr(req, "inflight_middle_chunks"):
        req.inflight_middle_chunks -= 1
    else:
        req.is_chunked -= 1


def token_ids(req_cls):
    """How a request's prompt is handed to ``Req``: an ``array("q")`` where the release's ``Req`` keeps its token ids
    in arrays (0.5.13+: ``self.output_ids = array("q")``), else a list (0.5.12: ``origin_input_ids + output_ids``
    of lists; an array prompt raises "can only append array (not list) to array")."""
    if 'array("q")' in inspect.getsource(req_cls.__init__):
        return lambda tokens: array("q", tokens)
    return list


def stamp_queue_entry(req, t: float) -> None:
    """The request's waiting-queue entry time, as the release's ``_add_request_to_queue`` stamps it:
    ``time_stats.set_wait_queue_entry_time()`` (0.5.10+, ``observability/req_time_stats.py``), before that the
    ``TimeStats`` dataclass's field (``req.time_stats.wait_queue_entry_time = time.perf_counter()``,
    ``managers/scheduler.py:1687`` in 0.5.9; ``metrics/collector.py``'s ``TimeStats`` has no setter)."""
    setter = getattr(req.time_stats, "set_wait_queue_entry_time", None)
    if setter is not None:
        setter(t)
    else:
        req.time_stats.wait_queue_entry_time = t


def accepted(fn, **kwargs) -> dict:
    """The keywords of ``kwargs`` that ``fn`` (a function or a dataclass) declares: a constructor or method whose
    fields the releases add over time (``SchedulerDPAttnAdapter``'s ``model_runner`` 0.5.17+,
    ``create_future_map``'s ``needs_confidence_relay`` 0.5.16+) gets those its release has."""
    params = inspect.signature(fn).parameters
    return {k: v for k, v in kwargs.items() if k in params}


def checkpoint(common):
    """An unfinished request's computed KV kept, as the release's result processing keeps it: ``checkpoint_kv_cache``
    0.5.22+, ``maybe_cache_unfinished_req`` 0.5.11 - 0.5.21, the tree cache's own ``cache_unfinished_req`` 0.5.10
    (``scheduler_output_processor_mixin.py:194``)."""
    found = getattr(common, "checkpoint_kv_cache", None) or getattr(common, "maybe_cache_unfinished_req", None)
    return found or (lambda req, tree: tree.cache_unfinished_req(req))


def relay(sc, batch, result) -> None:
    """The sampled tokens stashed for the next round's ``resolve_forward_inputs`` (``_relay_forward_payload``):
    0.5.19+ take the batch first, 0.5.16 - 0.5.18 the future indices and the result; 0.5.13 - 0.5.15 have no such
    method: ``run_batch`` stashes the token ids itself (its one line, ``scheduler.py:3274`` in 0.5.14); 0.5.12 has
    no future map in the non-overlap loop: ``batch.output_ids = next_token_ids`` (``scheduler.py:3086``)."""
    method = getattr(sc, "_relay_forward_payload", None)
    if sc.future_map is None:  # 0.5.12: run_batch sets the batch's output ids; prepare_for_decode takes them
        batch.output_ids = result.next_token_ids
        return
    if method is None:
        sc.future_map.stash(batch.req_pool_indices, result.next_token_ids)
    else:
        first = (batch,) if "batch" in inspect.signature(method).parameters else ()
        method(*first, batch.req_pool_indices, result)
    batch.input_ids = None  # "Next-iter input_ids relayed via future_map" (run_batch)


__all__ = ["INIT_BLOCKS", "accepted", "checkpoint", "default_micro_batch", "dp_attn_adapter",
           "forward_inputs_resolver", "future_map", "has_init_step", "init_lora_drainer", "init_step", "knob_source",
           "make_tree_cache", "metrics_off", "middle_chunk_done", "middle_chunks", "next_batch", "one_rank_state",
           "one_rank_widths", "radix_tree_cache", "relay", "release", "stamp_queue_entry", "token_allocator",
           "token_ids", "tp_model_worker", "tree_cache", "update_finish_state"]
