"""SGLang's scheduler around the LoRA path, driven as the engine drives itself: the waiting queue, the admission
loop (``get_next_batch_to_run`` -> ``get_new_batch_prefill`` -> ``PrefillAdder`` with ``can_schedule_lora_req`` and
``LoRADrainer``), ``ScheduleBatch.init_new`` / ``prepare_for_extend`` / ``update_running_batch`` ->
``prepare_for_decode`` over SGLang's own request and KV pools, and ``ForwardBatch.init_new`` (its LoRA part:
``fetch_new_loras`` then ``prepare_lora_batch``) of the batch the scheduler made.

The pools are SGLang's classes, built on the CPU as SGLang's own CPU tests build them
(``sglang/test/unified_allocator_fixtures.py``, ``kits/unified_radix_cache``): ``ReqToTokenPool``, a tiny
``MHATokenToKVPool`` behind a ``TokenToKVPoolAllocator``, and the tree cache the server's registry makes for a
dense model (``UnifiedRadixCache`` with the FULL component, ``disable`` as ``--disable-radix-cache``; with the
drawn knob off, the release's radix tree, ``scheduler_release.radix_tree_cache``, whose ``match_prefix`` the
admission loop calls, keyed by each request's LoRA id; serving.check_prefix is its oracle). The
scheduler and the model runner are not built (they start processes, NCCL groups, attention backends): their
methods run on a ``Scheduler`` / ``ModelRunner`` object holding exactly what those methods read, made by the
release's own ``init_*`` methods where it has them (``init_running_status``, ``init_chunked_prefill``,
``init_schedule_policy``, ``init_lora_drainer``, ``init_beam_coordinator``, ``init_kv_index_translator``,
``init_ngram_embedding_manager``); the knobs are read from the runtime context the case's ``ServerArgs`` was
published into, as the server reads them. Where a release's shape differs (0.5.12 - 0.5.19: where the knobs are
read, the loop's call, the token relay, the constructors' fields), ``scheduler_release.py`` finds it by what the
release has.

The batch's result is processed by SGLang's own ``process_batch_result`` where the release's shape is adapted
(results.py: 0.5.14+), sampled by its own ``Sampler``. Re-stated (each says why, docs/sglang.md's table): the loop of
``event_loop_normal`` (non-overlap: one ``get_next_batch_to_run``, the batch run, its result processed),
``TpModelWorker.forward_batch_generation``'s call of ``ForwardBatch.init_new`` then the model (the model is the
target's tiny one, attention a token-local stand-in), and where the result processing is not driven (0.5.5 -
0.5.13) greedy sampling (argmax) and the 12 lines of ``process_batch_result_prefill`` / ``_decode`` that append the
token, update the finish state and release a finished request's KV (``release_kv_cache``, ``checkpoint_kv_cache``:
SGLang's functions). Time: the drainer's clock (``time.monotonic`` in
``lora_drainer.py``, ``wait_queue_entry_time``) is the round counter, so ``--lora-drain-wait-threshold`` counts
scheduler rounds and a case replays exactly.
"""

from __future__ import annotations

import importlib
import inspect
import os
import types

import torch

from . import results as result_processing
from . import retraction
from . import scheduler_release as release_shape

# the Scheduler's methods the loop runs, each SGLang's own (a release without one: the path is not driven there)
SCHED_METHODS = (
    "get_next_batch_to_run", "get_new_batch_prefill", "get_num_allocatable_reqs", "update_running_batch",
    "init_req_max_new_tokens")
# the Scheduler's set-up methods the object is made with; where a release has none (0.5.5 - 0.5.6), the same lines
# of its ``Scheduler.__init__`` (scheduler_release.init_step)
SCHED_INIT = ("init_running_status", "init_chunked_prefill", "init_schedule_policy")
# the admission's LoRA check, by its release's name (``_can_schedule_lora_req`` 0.5.12 - 0.5.19)
LORA_ADMISSION = ("can_schedule_lora_req", "_can_schedule_lora_req")
# methods some releases' loop calls, or their init_running_status binds (not calls); taken where the release has them
SCHED_OPTIONAL = (
    "get_prefill_adder_class", "_reqs_finishing_inflight", "process_pending_chunked_abort", "_process_hicache_events",
    "_should_defer_prefill", "_arm_prefill_decode_interval", "init_lora_drainer", "init_beam_coordinator",
    "_relay_forward_payload", "flush_cache", "is_fully_idle", "send_control_output",
    "_abort_on_waiting_timeout", "_abort_on_running_timeout", "_should_delay_dflash_prefill_for_batching",
    "_maybe_prepare_ngram_embedding", "maybe_prepare_mlp_sync_batch",
    "maybe_prepare_mlp_sync_batch_and_log_stats",  # 0.5.8 - 0.5.8.post1 (no DP attention: the batch handed back)
    # 0.5.8+ (before, the loop's body is inline in get_new_batch_prefill / get_next_batch_to_run)
    "_get_new_batch_prefill_raw", "stash_chunked_request",
    # 0.5.8 - 0.5.8.post1's loop calls it each round (SGLANG_QUEUED_TIMEOUT_MS -1: it returns at its first line)
    "_abort_on_queued_timeout",
    "log_prefill_stats_late",  # 0.5.7's loop calls it (metrics off: it returns without a batch's stats)
    "init_diffusion_llm",  # 0.5.8 - 0.5.8.post1: the loop reads its (empty, no dLLM) staging requests
    # update_running_batch's retraction (retraction.py): a retracted request back into the waiting queue
    "_add_request_to_queue", "_set_or_validate_priority", "_abort_on_queued_limit", "_prefetch_kvcache",
    "_release_aborted_request")
RUNNER_METHODS = ("init_kv_index_translator", "init_ngram_embedding_manager")
CLOCK_START = 1000.0  # virtual seconds: 0.0 is "never stamped" to Req's time stats


class Clock:
    """The drainer's and the waiting queue's clock: one virtual second per scheduler round."""

    def __init__(self):
        self.now = CLOCK_START

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name):  # the rest of the time module, for the drainer module's other uses
        import time
        return getattr(time, name)


CLOCK = Clock()


DRIVEN_ON = "0.5.5 - 0.5.23"  # the releases whose scheduler shape is adapted (docs/sglang.md, "not driven" table)


def _lacks(e: Exception) -> str:
    """What an import of the path found missing, in a few words: ``lacks sglang.srt.x.y`` for a missing name or
    module (before, doctor printed the ImportError itself, cut at 160 characters mid-path), else the error's kind
    and first line."""
    import re
    name = getattr(e, "name", None)
    missing = re.match(r"cannot import name '([^']+)'", str(e))
    if isinstance(e, ImportError) and name:
        return f"lacks {name}.{missing.group(1)}" if missing else f"lacks {name}"
    return f"fails to import it ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"


def load():
    """The release's scheduler path, or ``(None, why)`` where it cannot be driven (a method or class missing, or
    turned off with ``FUZZRUNNER_SGLANG_SCHEDULER=0``: the earlier path, re-stated admission and LoRA lines)."""
    if os.environ.get("FUZZRUNNER_SGLANG_SCHEDULER", "1") == "0":
        return None, "turned off (FUZZRUNNER_SGLANG_SCHEDULER=0)"
    try:
        from sglang.srt.managers import schedule_batch
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.mem_cache import common
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
        from sglang.srt.model_executor.model_runner import ModelRunner
        from sglang.srt.sampling.sampling_params import SamplingParams
        TokenToKVPoolAllocator = release_shape.token_allocator()
    except Exception as e:  # noqa: BLE001 - any import failure: the release's admission is driven the older way
        return None, f"the scheduler path is driven on SGLang {DRIVEN_ON} only: this release {_lacks(e)}"
    why = unsupported(Scheduler)
    if why:
        return None, why
    try:  # 0.5.12+: --lora-drain-wait-threshold's LoRADrainer
        importlib.import_module("sglang.srt.lora.lora_drainer").time = CLOCK  # module doc: the threshold counts rounds
        drainer = True
    except ImportError:
        drainer = False
    try:
        return types.SimpleNamespace(
            Scheduler=Scheduler, ModelRunner=ModelRunner, Req=schedule_batch.Req, drainer=drainer,
            results=not result_processing.supported(Scheduler),  # its result processing driven (results.py)
            ScheduleBatch=schedule_batch.ScheduleBatch,
            SamplingParams=SamplingParams, ReqToTokenPool=ReqToTokenPool, MHATokenToKVPool=MHATokenToKVPool,
            TokenToKVPoolAllocator=TokenToKVPoolAllocator, tree_cache=release_shape.tree_cache(),
            TpModelWorker=release_shape.tp_model_worker(), **_radix(),
            release_kv_cache=release_shape.release(getattr(common, "release_kv_cache", None)),
            checkpoint_kv_cache=release_shape.checkpoint(common),
            resolve_forward_inputs=release_shape.forward_inputs_resolver(),
            token_ids=release_shape.token_ids(schedule_batch.Req)), ""
    except Exception as e:  # noqa: BLE001 - a shape not foreseen: the release's admission is driven the older way
        # (before, an unforeseen name here failed the whole engine's import: 0.5.10 lacks maybe_cache_unfinished_req)
        return None, f"the scheduler path is driven on SGLang {DRIVEN_ON} only: this release {_lacks(e)}"


def _radix() -> dict:
    """The release's radix tree cache (``radix_cache``: ``radix_tree_cache()``'s class and keywords), or None with
    why (``radix_why``): the server's tree cache without ``--disable-radix-cache``."""
    try:
        return {"radix_cache": release_shape.radix_tree_cache(), "radix_why": ""}
    except Exception as e:  # noqa: BLE001 - any import failure: the radix cache is not driven on this release
        return {"radix_cache": None, "radix_why": f"its radix cache {_lacks(e)}"}


# the server knobs of the scheduler path (cases.py draws them), with the server's defaults where a case has none
# (--disable-radix-cache: the server's default is off, a case without the knob keeps the radix cache off as before)
SCHED_KNOBS = {"max_running_requests": 4, "chunked_prefill_size": -1, "max_prefill_tokens": 16384,
               "lora_drain_wait_threshold": 0.0, "disable_radix_cache": True}
KV_TOKENS = 256  # --max-total-tokens without the drawn knob: room for every case's requests (nothing retracted)


def scheduler_knobs(c: dict, driven: bool, drainer: bool = True) -> dict:
    """The ServerArgs keywords of a case's scheduler knobs (none where the scheduler path is not driven; no
    ``--lora-drain-wait-threshold`` where the release has no drainer, 0.5.10 - 0.5.11: its ServerArgs has no such
    field, and a case asking a drain there is refused, runner.Session)."""
    if not driven:
        return {}
    out = {k: c.get(k, v) for k, v in SCHED_KNOBS.items() if drainer or k != "lora_drain_wait_threshold"}
    out["chunked_prefill_size"] = out["chunked_prefill_size"] or -1
    # --max-total-tokens (``max_total_tokens``, retraction.py): a KV pool small enough that decode retracts requests
    return out | {"max_total_tokens": c.get("max_total_tokens") or KV_TOKENS, "disable_overlap_schedule": True}


def unsupported(cls) -> str:
    """Why the release's ``Scheduler`` cannot run the loop (the methods it lacks), or "" where it can. The LoRA check
    is a method (0.5.12+) or inline in ``_get_new_batch_prefill_raw`` (0.5.10 - 0.5.11: ``validate_lora_batch`` of
    the running adapters and the request's, ``scheduler.py:2639-2655`` in 0.5.11)."""
    lacking = [m for m in SCHED_METHODS if not hasattr(cls, m)] + \
        [m for m in SCHED_INIT if not release_shape.has_init_step(cls, m)] + \
        ([] if any(hasattr(cls, m) for m in LORA_ADMISSION) or inline_lora_check(cls)
         else [" / ".join(LORA_ADMISSION)])
    return f"the release's Scheduler lacks {', '.join(lacking)}" if lacking else ""


def prefill_loop(cls) -> str:
    """The name of the method that holds the admission loop over the waiting queue: ``_get_new_batch_prefill_raw``
    (0.5.8+), else ``get_new_batch_prefill`` itself (0.5.5 - 0.5.7)."""
    return "_get_new_batch_prefill_raw" if hasattr(cls, "_get_new_batch_prefill_raw") else "get_new_batch_prefill"


# the inline LoRA check's calls: the manager's (0.5.8 - 0.5.11), the worker's (0.5.5 - 0.5.7, ``TpModelWorker``'s
# ``can_run_lora_batch``, which calls the manager's ``validate_lora_batch``)
INLINE_CHECKS = ("validate_lora_batch(", "can_run_lora_batch(")


def inline_lora_check(cls) -> bool:
    """Whether the release's loop checks a request's adapter inline (0.5.5 - 0.5.11), with no method of its own."""
    loop = getattr(cls, prefill_loop(cls), None)
    try:
        return loop is not None and any(c in inspect.getsource(loop) for c in INLINE_CHECKS)
    except (OSError, TypeError):  # no source (a stand-in)
        return False


def scheduler_methods(cls) -> tuple:
    """The Scheduler methods the loop runs in this release (module doc), its result processing's included."""
    return SCHED_METHODS + tuple(m for m in SCHED_INIT + SCHED_OPTIONAL + LORA_ADMISSION
                                 + result_processing.SCHED_METHODS if hasattr(cls, m))


def admission_name(cls) -> str | None:
    """The release's name of the admission's LoRA check (None: inline, 0.5.10 - 0.5.11)."""
    return next((m for m in LORA_ADMISSION if hasattr(cls, m)), None)


def describe(sl) -> str:
    """The target's details line of the release's scheduler path (``sl``: ``load``'s): the loop, the LoRA check by
    the name the release calls it (inline in the loop 0.5.5 - 0.5.11), the drainer where it has one, the radix tree
    cache a case with the radix cache on gets (or why none), whether SGLang's own result processing runs (or why
    not)."""
    check = admission_name(sl.Scheduler) or f"the LoRA check inline in {prefill_loop(sl.Scheduler)}"
    radix = getattr(sl, "radix_cache", None)  # (class, keywords), or None with why (_radix)
    cache = (f"tree cache ({radix[0].__name__} where a case draws the radix cache on)" if radix is not None
             else f"tree cache (radix cache not driven: {getattr(sl, 'radix_why', '') or 'not found'})")
    results = result_processing.supported(sl.Scheduler)
    return (f"SGLang's get_next_batch_to_run / PrefillAdder / {check}{' / LoRADrainer' if sl.drainer else ''} over its "
            f"ReqToTokenPool, KV allocator and {cache}; ForwardBatch.init_new; result processing: "
            + ("SGLang's process_batch_result (its Sampler)" if not results else f"re-stated ({results})"))


def _shape(name: str, cls, methods) -> object:
    """An object of a class named ``name`` whose methods are ``cls``'s own (unbound functions, so ``self`` is
    the shape): it holds exactly the attributes those methods read."""
    return type(name, (), {m: getattr(cls, m) for m in methods})()


class Server:
    """One server's scheduler and model runner over a session's ``LoRAManager`` and model (runner.Session)."""

    def __init__(self, sl, session):
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        self.sl, self.s = sl, session
        sa = session.server_args
        sched, lora = release_shape.knob_source(sa)
        self.model_config = ModelConfig.from_server_args(sa)
        self.max_running = sched.max_running_requests
        self.kv_size = sa.max_total_tokens
        # a user's request leaves ignore_eos off, and the admission then reserves only an estimate of its new tokens
        # (PrefillAdder: new_token_ratio, 1.0 for ignore_eos), so that decode can outgrow the pool and retract
        # (retraction.py); the tiny model has no EOS a request knows (no tokenizer, no eos_token_ids), so each still
        # generates all its tokens. Before the drawn pool, every request was sent with ignore_eos (kept there)
        self.ignore_eos = session.c.get("max_total_tokens") is None
        self.max_req_len = self.model_config.context_len
        dev = str(session.device)
        # the model runner's pools (ModelRunner.init_memory_pool: a request pool of max_running_requests rows,
        # the KV pool and its allocator of max_total_tokens), the tree cache the registry makes for a dense model
        self.req_pool = sl.ReqToTokenPool(size=self.max_running, max_context_len=self.max_req_len + 4, device=dev,
                                          enable_memory_saver=False)
        cfg = session.eng.hf_config
        self.kv = sl.MHATokenToKVPool(size=self.kv_size, page_size=1, dtype=session.dtype,
                                      head_num=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                                      layer_num=cfg.num_hidden_layers, device=dev, enable_memory_saver=False)
        self.alloc = sl.TokenToKVPoolAllocator(self.kv_size, session.dtype, dev, self.kv, need_sort=False)
        # --disable-radix-cache (the case's knob): the server's tree cache then is the disabled one; without it the
        # release's radix tree (scheduler_release.radix_tree_cache), keyed by each request's extra_key, which Req
        # ends with its lora_id (schedule_batch.py:1168 in 0.5.23)
        self.radix = not sa.disable_radix_cache
        self.tree = release_shape.make_tree_cache(
            sl.radix_cache if self.radix else sl.tree_cache, disable=not self.radix, req_to_token_pool=self.req_pool,
            token_to_kv_pool_allocator=self.alloc, page_size=1, chunked_prefill_size=sched.chunked_prefill_size)
        # the model runner: what ForwardBatch.init_new reads
        mr = _shape("ModelRunner", sl.ModelRunner, [m for m in RUNNER_METHODS + result_processing.RUNNER_METHODS
                                                     if hasattr(sl.ModelRunner, m)])
        mr.lora_manager, mr.model, mr.model_config, mr.device = session.mgr, session.model, self.model_config, dev
        mr.is_draft_worker, mr.page_size, mr.max_running_requests = False, 1, self.max_running
        mr.req_to_token_pool, mr.token_to_kv_pool_allocator, mr.token_to_kv_pool = self.req_pool, self.alloc, self.kv
        mr.prefill_attention_backend_str = "torch_native"  # the CPU server's attention backend (no AMX: its log)
        mr.attn_backend, mr.prefill_aware_swa = None, False
        # ModelRunner.__init__'s widths (0.5.21 reads attn_dcp_* in init_new), one rank
        parallel = release_shape.one_rank_widths()
        for k in ("tp_rank", "tp_size", "dp_size", "attn_dp_size", "pp_rank", "pp_size", "attn_cp_rank",
                  "attn_cp_size", "attn_dcp_rank", "attn_dcp_size", "moe_ep_size", "dp_rank"):
            if hasattr(parallel, k):
                setattr(mr, k, getattr(parallel, k))
        # 0.5.16 - 0.5.20: the ModelRunner is handed the scheduler's ParallelState
        mr.ps = release_shape.one_rank_state()
        mr.server_args = sa  # read by 0.5.16 - 0.5.18's init_ngram_embedding_manager
        # what 0.5.12 - 0.5.15's init_new reads of the runner, as ModelRunner.__init__ sets it for this dense Llama
        # model without mrope (``model_is_mrope``: no mrope_section in its rope scaling) on one rank (dcp_size 1)
        mr.use_ngram_embedding = mr.model_is_mrope = mr.is_hybrid_swa = False
        mr.mambaish_config, mr.dcp_rank, mr.dcp_size = None, 0, 1
        for m in RUNNER_METHODS:  # 0.5.19+, 0.5.16+
            if hasattr(mr, m):
                getattr(mr, m)()
            else:
                setattr(mr, m.removeprefix("init_"), None)  # the releases before read none (getattr'd where read)
        self.mr = mr
        # the scheduler: Scheduler.__init__'s argument lines for what the loop reads, then its own init_* methods
        sc = _shape("Scheduler", sl.Scheduler, scheduler_methods(sl.Scheduler))
        sc.server_args = sa
        for k in ("schedule_policy", "enable_priority_scheduling", "schedule_low_priority_values_first",
                  "priority_scheduling_preemption_threshold"):
            setattr(sc, k, getattr(sched, k))
        sc.enable_lora, sc.max_loras_per_batch = True, lora.max_loras_per_batch
        sc.ps = mr.ps  # 0.5.16 - 0.5.18's init_chunked_prefill reads ps.pp_size (the scheduler's own ParallelState)
        for k, v in release_shape.SCHEDULER_RANKS.items():  # 0.5.10 - 0.5.11 keep them on the scheduler
            setattr(sc, k, v)
        sc.enable_lora_overlap_loading = False  # not drawn: a CUDA stream (docs/sglang.md, "LoRA knobs")
        sc.enable_overlap = sc.enable_overlap_mlx = False  # the non-overlap loop (module doc)
        sc.spec_algorithm = SpeculativeAlgorithm.from_string(None)
        sc.page_size = 1
        for k in ("enable_hierarchical_cache", "enable_lmcache", "enable_hicache_storage",
                  "enable_unified_cache_external_linker", "enable_hisparse", "enable_pdmux", "is_hybrid_swa",
                  "require_mlp_sync", "enable_unified_memory", "enable_fpm"):
            setattr(sc, k, False)
        sc.processed_tokens_counter = sc.forward_ct = 0
        sc.enable_metrics = sa.enable_metrics  # off (the server's default); 0.5.9's loop reads it unconditionally
        # no speculative decoding: the KV headroom a decode step checks (init_memory_pool_and_cache's 1; 0.5.5 - 0.5.7)
        sc.decode_mem_cache_buf_multiplier = 1
        # what _add_request_to_queue reads when update_running_batch requeues a retracted request (retraction.py)
        sc.max_queued_requests = getattr(sa, "max_queued_requests", None)
        if hasattr(sl.Scheduler, "kv_shard_widening"):  # 0.5.21+: the class default before a page-interleaved pool
            sc.kv_shard_widening = sl.Scheduler.kv_shard_widening
        sc.sliding_window_size, sc.decode_offload_manager = None, None  # a dense model; no decode offload
        sc.model_config, sc.dllm_config, sc.hisparse_coordinator = self.model_config, None, None
        sc.req_to_token_pool, sc.token_to_kv_pool_allocator, sc.tree_cache = self.req_pool, self.alloc, self.tree
        # the worker's info (TpModelWorker.get_worker_info)
        sc.max_total_num_tokens, sc.max_running_requests = self.kv_size, self.max_running
        sc.max_prefill_tokens, sc.max_req_len = sa.max_prefill_tokens, self.max_req_len
        sc.max_req_input_len, sc.max_new_tokens_limit, sc.device = self.max_req_len - 1, None, dev
        sc.min_free_slots_delayer, sc.dynamic_chunk_sizer, sc.truncation_align_size = None, None, None
        sc.disaggregation_mode = importlib.import_module("sglang.srt.disaggregation.utils").DisaggregationMode.NULL
        release_shape.default_micro_batch(max(self.max_running, 1))  # Scheduler.init_model_worker's default
        # the worker: its model runner, and its can_run_lora_batch where the release's loop asks it (0.5.5 - 0.5.7)
        sc.tp_worker = _shape("TpModelWorker", sl.TpModelWorker, [m for m in ("can_run_lora_batch",)
                                                                  if hasattr(sl.TpModelWorker, m)])
        sc.tp_worker.model_runner = mr
        sc.ipc_channels = None  # 0.5.22's init_running_status hands it to its flush wrapper (kept, not used): no IPC
        for m in SCHED_INIT:
            release_shape.init_step(sc, sl.Scheduler, m)
        if hasattr(sc, "init_diffusion_llm"):  # 0.5.8 - 0.5.8.post1's set-up step (dllm_config None: none staged)
            sc.init_diffusion_llm()
        release_shape.init_lora_drainer(sc, sa)
        sc.future_map = release_shape.future_map(sc, dev, self.req_pool)
        if hasattr(sc, "init_beam_coordinator"):  # 0.5.19+ (beam search); before, the loop reads no coordinator
            sc.init_beam_coordinator()
        sc.grammar_manager = types.SimpleNamespace(has_waiting_grammars=lambda: False)
        sc.grammar_queue = []  # the same before the grammar manager (0.5.5 - 0.5.6: __init__'s grammar block's queue)
        # the pending-token count of the prefill stats (metrics: not run; 0.5.12's metrics mixin method the same)
        sc.load_inquirer = types.SimpleNamespace(_get_num_pending_tokens=lambda chunk_deduct=0: 0)
        sc._get_num_pending_tokens = sc.load_inquirer._get_num_pending_tokens
        # without DP attention its hooks hand the batch back; each release takes the fields it declares (the model
        # runner 0.5.17+; the TP group and the parallel state 0.5.13 - 0.5.21, read only for the MLP sync of DP
        # attention: none here); 0.5.12 has them as a mixin's methods (SCHED_OPTIONAL)
        sc.dp_attn_adapter = release_shape.dp_attn_adapter(
            model_runner=mr, req_to_token_pool=self.req_pool, token_to_kv_pool_allocator=self.alloc,
            tree_cache=self.tree, offload_tags=set(), model_config=self.model_config, enable_overlap=False,
            spec_algorithm=sc.spec_algorithm, get_require_mlp_sync=lambda: False, tp_group=None, ps=mr.ps,
            server_args=sa)
        sc.ngram_embedding_manager = mr.ngram_embedding_manager
        sc.use_ngram_embedding = False  # 0.5.12 - 0.5.15's loop asks it (Scheduler.__init__: the model has none)
        sc._pending_chunked_abort_req = None
        sc.scheduler_stage_metrics = None  # metrics off: the stage decorators call through
        release_shape.metrics_off(sc, sl.Scheduler)  # 0.5.5 - 0.5.9: no prefill-stats log line (module doc)
        sc.temp_prefill_info = None  # init_metrics' line: what log_prefill_stats leaves for log_prefill_stats_late
        # SGLang's result processing (results.py), where the release's shape is adapted; else the re-stated lines
        self.results_why = result_processing.set_up(sc, mr)  # "" where sl.results
        retraction.reporter_fields(sc)
        self.sc = sc
        self.rounds = 0
        self.patches: list = []  # planted faults (scheduler_faults.py), stopped by close()
        self.abandoned = False  # a step left requests behind after its reported problem (serving.serve)
        # KV slot -> (rid, lora_id) of the request whose forward last wrote it (serving._run: each batch's
        # out_cache_loc, where SGLang's attention backends write K/V, ``set_kv_buffer(layer, out_cache_loc, k, v)``)
        self.kv_writer: dict = {}
        retraction.test_mode(self, session.c.get("retract_interval"))  # SGLANG_TEST_RETRACT (retraction.py)
        self.reused = 0  # prefix slots reused by a request of the writer's own adapter (serving.check_prefix)
        CLOCK.now = CLOCK_START

    def close(self) -> None:
        while self.patches:
            self.patches.pop().stop()

    # -- requests --------------------------------------------------------------------------------------------
    def submit(self, rid: str, tokens: list, max_new: int, lora_id, logprob_start: int | None = None,
               extra_key: str | None = None):
        """A request as the scheduler's ``handle_generate_request`` makes and queues it (greedy, no stop;
        ``logprob_start``: ``return_logprob`` with that ``logprob_start_len``, else no logprobs; ``extra_key``: the
        user's cache key, ``GenerateReqInput.extra_key``, handed to ``Req`` as the tokenizer manager and the scheduler
        hand it on: ``Req.__init__`` adds the lora_id to it, keys.py)."""
        sl, sc = self.sl, self.sc
        sp = sl.SamplingParams(max_new_tokens=max_new, temperature=0, ignore_eos=self.ignore_eos)
        sp.normalize(None)
        key = {} if extra_key is None else {"extra_key": extra_key}  # the releases' Req without a key: keys.py
        req = sl.Req(rid, "", sl.token_ids(tokens), sp, lora_id=lora_id, vocab_size=self.s.eng.hf_config.vocab_size,
                     return_logprob=logprob_start is not None, **key)
        if logprob_start is not None:  # handle_generate_request: a start the user gave (0 <= start <= its length)
            req.logprob_start_len = logprob_start
        sc.init_req_max_new_tokens(req)
        release_shape.stamp_queue_entry(req, CLOCK.now)
        sc.waiting_queue.append(req)  # _add_request_to_queue's line for a non-disaggregated server
        return req

    # -- one round of event_loop_normal ------------------------------------------------------------------------
    def round(self):
        """One scheduler step: the next batch (SGLang's ``get_next_batch_to_run``), or None."""
        sc = self.sc
        batch = release_shape.next_batch(sc)
        if batch is None:
            sc.last_batch = None  # the loop's last line (a round that ran a batch sets it in finish_round)
        self.rounds += 1
        CLOCK.now += 1.0
        return batch

    def forward_batch(self, batch):
        """``forward_batch_generation``'s first step: ``resolve_forward_inputs`` then ``ForwardBatch.init_new`` (its
        LoRA part: ``fetch_new_loras``, ``prepare_lora_batch``)."""
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch
        if not self.results_why:
            result_processing.launch(self.sc, batch)
        if self.sl.resolve_forward_inputs is not None:
            self.sl.resolve_forward_inputs(batch, self.sc.future_map)
        else:  # 0.5.12: run_batch hands the worker the batch's ModelWorkerBatch (its input ids set by the batch)
            batch = batch.get_model_worker_batch()
        return ForwardBatch.init_new(batch, self.mr, **release_shape.accepted(  # the keyword: 0.5.16+
            ForwardBatch.init_new, return_hidden_states_before_norm=False))

    def result(self, logits_output, fb, batch, graph: bool):
        """``forward_batch_generation``'s sampling and result: SGLang's ``ModelRunner.sample`` (its ``Sampler``: every
        request greedy) where the release's result processing is driven (results.py), else the argmax (the
        sampler's ``temperature 0``, re-stated) in a ``SimpleNamespace`` of the fields the re-stated lines read."""
        if not self.results_why:
            return result_processing.generation_result(
                logits_output, self.mr.sample(logits_output, fb), batch, graph, self.sc)
        next_ids = logits_output.next_token_logits.argmax(dim=-1).to(torch.int64)
        return types.SimpleNamespace(next_draft_input=None, has_sampled_token_ids=True, next_token_ids=next_ids)

    def finish_round(self, batch, result) -> list:
        """The sampled tokens relayed (``_relay_forward_payload``) and the batch's result processed: SGLang's
        ``process_batch_result`` (results.py), else re-stated (module doc); returns the requests that finished."""
        sc, sl = self.sc, self.sl
        release_shape.relay(sc, batch, result)
        if not self.results_why:
            was = {id(r) for r in batch.reqs if r.finished()}
            result_processing.process(sc, batch, result)
            sc.last_batch = batch  # event_loop_normal's last line
            return [r for r in batch.reqs if r.finished() and id(r) not in was]
        done = []
        toks = result.next_token_ids.tolist()
        for req, tok in zip(batch.reqs, toks):
            if batch.forward_mode.is_extend():
                if release_shape.middle_chunks(req) > 0:  # a chunk of a prefill that is not done: no token
                    release_shape.middle_chunk_done(req)
                    continue
                req.output_ids.append(tok)
                release_shape.update_finish_state(req)
                if not req.finished():
                    sl.checkpoint_kv_cache(req, self.tree)
            else:
                req.output_ids.append(tok)
                release_shape.update_finish_state(req, 1)
            if req.finished():
                sl.release_kv_cache(req, self.tree)
                done.append(req)
        sc.last_batch = batch
        return done

    def busy(self) -> bool:
        sc = self.sc
        return bool(sc.waiting_queue) or not sc.running_batch.is_empty() or sc.chunked_req is not None or (
            sc.last_batch is not None and any(not r.finished() for r in sc.last_batch.reqs))


__all__ = ["CLOCK", "Server", "describe", "load"]
