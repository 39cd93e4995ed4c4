"""SGLang's own result processing of a batch the scheduler ran: ``Scheduler.process_batch_result`` (then the
release's ``process_batch_result_prefill`` / ``_decode``: append the sampled token, update the finish state, store
the input and output logprobs, release a finished request's KV or checkpoint an unfinished one's, stream the
output), on the scheduler object ``scheduler.Server`` builds, with a ``GenerationBatchResult`` built as
``TpModelWorker.forward_batch_generation`` builds it: the logits output of the target's model through SGLang's
``LogitsProcessor`` (runner.Session.forward), the next token ids from SGLang's own ``Sampler`` through
``ModelRunner.sample`` (every request greedy, ``temperature 0``: the sampler's ``is_all_greedy`` argmax, and the
output logprobs its ``log_softmax`` gives), then ``run_batch``'s lines after the forward (the tokens relayed, the
per-request extend and logprob-start lengths copied).

What the result processing sends out is answered by objects that record it (``Recorder``): the detokenizer's socket
(``stream_output``'s ``BatchTokenIDOutput`` s, the output a user would read), the metrics reporter (metrics off:
its log and gauge calls), the router's load publisher. A recorder answers only the methods it is declared with; any
other attribute raises (a call SGLang makes that the harness did not foresee is a target error, not a silent no-op).

Shapes (found by what the release has, ``shape``): ``processor``, 0.5.13+: a ``SchedulerBatchResultProcessor`` made by
the scheduler's own ``init_batch_result_processor`` (with ``init_output_streamer``'s streamer; where the streamer
reads the load inquirer's loads for every stream, 0.5.13, the inquirer and its pool-stats observer are made by the
scheduler's own ``init_pool_stats_observer`` / ``init_load_inquirer`` over SGLang's CPU pools); ``mixin``, 0.5.5 -
0.5.12.post1: the scheduler's own ``SchedulerOutputProcessorMixin`` (results_mixin.py). A release of neither shape
keeps ``scheduler.Server``'s re-stated lines (``supported`` says why).
"""

from __future__ import annotations

import collections
import inspect
import time
import types

from . import results_mixin


class Recorder:
    """An endpoint the scheduler sends to: each call of a declared method is recorded ``(method, args, kwargs)`` and
    answered None (what the real endpoint returns: a socket's ``send_output``, a reporter's log call); any other
    attribute raises AttributeError naming the endpoint; ``counters`` are plain attributes the scheduler updates."""

    def __init__(self, name: str, methods: tuple, **counters):
        self._name, self._methods, self.calls = name, frozenset(methods), []
        self.__dict__.update(counters)  # the endpoint's own counters the scheduler adds to (read back as numbers)

    def __getattr__(self, attr):
        if attr.startswith("_") or attr not in self._methods:
            raise AttributeError(f"{self._name} has no {attr!r} here (the harness records only "
                                 f"{sorted(self._methods)}: SGLang called what the scheduler object was not built for)")

        def record(*args, **kwargs):
            self.calls.append((attr, args, kwargs))
        return record

    def sent(self, method: str) -> list:
        return [args for m, args, _ in self.calls if m == method]


def refused(what: str):
    """A callable the scheduler is handed but should not call on these cases: a call raises, naming it."""
    def call(*args, **kwargs):
        raise RuntimeError(f"{what} was called ({args}, {kwargs}): the harness built no such object for these cases")
    return call


# what the server's scheduler sends each batch's results to, and the calls it makes of them (0.5.23)
DETOKENIZER = ("send_output", "send_pyobj")
TOKENIZER = ("send_output", "send_pyobj")
METRICS = ("report_prefill_stats", "report_decode_stats", "log_batch_result_stats", "update_device_timer",
           "record_scheduler_active", "record_scheduler_idle", "update_spec_metrics", "snapshot_spec_decode_metrics")
LOAD = ("publish_load_stat",)


# the Scheduler's methods the result processing runs (process_batch_result's own calls) and is set up with
SCHED_METHODS = ("process_batch_result", "init_output_streamer", "get_output_streamer_class",
                 "init_batch_result_processor", "publish_load_snapshot", "_record_step_counters",
                 "_maybe_clear_mm_inputs", "maybe_send_health_check_signal",
                 "init_pool_stats_observer", "init_load_inquirer")  # the last two: 0.5.13's streamer reads loads
# the ModelRunner's: the sampling forward_batch_generation calls
RUNNER_METHODS = ("sample", "_preprocess_logits", "maybe_update_ngram_token_table")  # the last: 0.5.13 - 0.5.15


def shape(cls) -> str:
    """The release's result processing (module doc): ``processor``, ``mixin``, or "" (neither: not driven)."""
    if all(hasattr(cls, m) for m in ("process_batch_result", "init_batch_result_processor", "init_output_streamer")):
        return "processor"
    return "mixin" if hasattr(cls, "process_batch_result") and results_mixin.is_mixin(cls) else ""


def supported(cls) -> str:
    """Why the release's result processing is not driven here ("" where it is)."""
    if shape(cls):
        return ""
    lacking = [m for m in ("process_batch_result", "init_batch_result_processor", "init_output_streamer",
                           "process_batch_result_prefill") if not hasattr(cls, m)]
    return (f"its Scheduler has no {', '.join(lacking)} (neither a SchedulerBatchResultProcessor nor the "
            f"scheduler's SchedulerOutputProcessorMixin: not adapted here)")


def streams_loads(cls) -> bool:
    """Whether the release's output streamer reads the load inquirer's loads for every stream (0.5.13:
    ``output_streamer.py:147``), so the inquirer must be SGLang's own (``_load_inquirer``)."""
    return "load_inquirer" in inspect.getsource(cls.init_output_streamer)


def set_up(sc, model_runner) -> str:
    """The scheduler's result processing built (``build``) where the release's shape is adapted (``sc``'s class holds
    the release's own methods, scheduler._shape); why not, else ""."""
    from sglang.srt.managers.scheduler import Scheduler
    why = supported(Scheduler)
    if not why:
        build(sc, model_runner)
    return why


def build(sc, model_runner) -> None:
    """The scheduler's result-processing objects, made by its own ``init_*`` methods, with recording endpoints: its
    sockets, metrics and load publisher (module doc); the model runner's ``Sampler``."""
    cls = _release()
    sc.is_generation = True
    sc.metrics_collector = None  # metrics off (--enable-metrics not set): no collector is made
    sc.draft_worker = None
    sc.model_worker = sc.tp_worker
    sc.enable_fpm = False
    sc.abort_request = refused("the scheduler's abort_request")  # nothing is aborted here (no grammar, no timeout)
    # the detokenizer's and tokenizer's sockets: the ipc channels' (0.5.13+), the scheduler's own before
    sc.ipc_channels = types.SimpleNamespace(send_to_detokenizer=Recorder("the detokenizer's socket", DETOKENIZER),
                                            send_to_tokenizer=Recorder("the tokenizer's socket", TOKENIZER))
    if shape(cls) == "mixin":
        sc.send_to_detokenizer = sc.ipc_channels.send_to_detokenizer
        sc.send_to_tokenizer = sc.ipc_channels.send_to_tokenizer
        results_mixin.build(sc, cls, Recorder)
    else:
        _processor(sc, cls)
    model_runner.sampler = _sampler()
    for k in ("sampling_observer", "watermark_state"):
        setattr(model_runner, k, None)


def _release():
    """The release's ``Scheduler`` (the class whose methods the scheduler object holds)."""
    from sglang.srt.managers.scheduler import Scheduler
    return Scheduler


def _processor(sc, cls) -> None:
    """``SchedulerBatchResultProcessor`` and its streamer, made by the scheduler's own ``init_batch_result_processor``
    / ``init_output_streamer``; where the streamer reads the loads (0.5.13), the load inquirer too."""
    # metrics off: the reporter's calls recorded; its stats (metrics_reporter.py's SchedulerStats) the loads read
    from sglang.srt.observability.metrics_collector import SchedulerStats
    sc.metrics_reporter = Recorder("the metrics reporter", METRICS, num_generated_tokens=0, forward_ct_decode=0,
                                   stats=SchedulerStats(), spec_total_num_accept_tokens=0,
                                   spec_total_num_forward_ct=0)
    sc.load_publisher = Recorder("the load publisher", LOAD)
    sc.load_snapshot_writer = None  # no load snapshot file (publish_load_snapshot returns None)
    sc.rust_server = None
    sc.return_health_check_ipcs = []  # no health check pending
    if streams_loads(cls):
        _load_inquirer(sc)
    else:  # handed to the load publisher (a recorder, which does not call it); a call raises
        sc.load_inquirer.get_loads = refused("the load inquirer's get_loads")
    # init_load_inquirer's step counters (_record_step_counters reads and updates them; scheduler.py:2580-2590 in
    # 0.5.23); the inquirer itself is not made there (nothing of these releases' result processing reads its loads)
    sc.total_prefill_uncached_tokens = sc.total_prefill_busy_us = 0
    sc.decode_moment_totals = [0.0] * 6
    sc._prev_step = sc._prev_prefill_end_ts = sc._pause_started_at = None
    sc._sched_idled = False
    sc._pause_intervals = collections.deque()
    sc.init_output_streamer()
    sc.init_batch_result_processor()


def _load_inquirer(sc) -> None:
    """The scheduler's ``SchedulerLoadInquirer`` and its ``SchedulerPoolStatsObserver``, made by its own
    ``init_pool_stats_observer`` / ``init_load_inquirer`` over SGLang's CPU pools, with ``Scheduler.__init__``'s
    lines for what they read: a dense model's pool kinds (the KV build result's: no hybrid SWA or SSM pool, no
    per-layer token counts) and the session controller (``SessionController(self.tree_cache)``)."""
    from sglang.srt.session.session_controller import SessionController
    sc.is_hybrid_ssm = False
    sc.full_tokens_per_layer = sc.swa_tokens_per_layer = None
    sc.session_controller = SessionController(sc.tree_cache)
    for k in ("disagg_prefill_bootstrap_queue", "disagg_prefill_inflight_queue", "disagg_decode_prealloc_queue",
              "disagg_decode_transfer_queue"):  # read only where disaggregation is on (none here)
        setattr(sc, k, None)
    sc.init_pool_stats_observer()
    sc.init_load_inquirer()


def _sampler():
    """The model runner's ``Sampler`` (``ModelRunner.__init__`` makes it). It keeps the TP group's ``device_group`` for
    its token sync (``SYNC_TOKEN_IDS_ACROSS_TP`` or grammars: neither here); where the parallel groups are SGLang's
    test fixture (0.5.22+: no process group), it is made in the fixture's ``parallel_scope`` with a group of one rank
    whose ``device_group`` is None (a sync would fail on it, not pass silently); before, api.py set up a real one-rank
    gloo group."""
    from sglang.srt.layers.sampler import Sampler
    try:
        from sglang.test.parallel_groups import parallel_scope
    except ImportError:
        return Sampler()
    with parallel_scope(tp_group=types.SimpleNamespace(rank_in_group=0, world_size=1, device_group=None)):
        return Sampler()


def launch(sc, batch) -> None:
    """``run_batch``'s first lines. Where the result processing keeps step counters (``_record_step_counters``,
    0.5.14+) the batch stamped with its forward iteration and launch time, re-stated (``scheduler.py:4620-4631`` in
    0.5.23); before, the release's own first statements of ``run_batch`` (the forward counter, the batch's forward
    iteration where the release stamps it: results_mixin.run_batch_lines)."""
    cls = _release()
    if not hasattr(cls, "_record_step_counters"):
        results_mixin.run_lines(sc, cls, results_mixin.run_batch_lines(cls)[0], "its first lines", batch=batch)
        return
    sc.forward_ct += 1
    batch.forward_iter, batch.launch_ts = sc.forward_ct, time.monotonic()
    batch.after_idle_gap, sc._sched_idled = sc._sched_idled, False
    if batch.extend_num_tokens:
        sc.processed_tokens_counter += batch.extend_num_tokens


def generation_result(logits_output, next_token_ids, batch, graph: bool, sc=None):
    """``GenerationBatchResult`` as ``forward_batch_generation`` returns it, with ``run_batch``'s lines after the
    forward (the per-request lengths the output processing reads): re-stated where the release keeps step counters
    (``scheduler.py:4885-4897`` in 0.5.23); before, the release's own block (results_mixin.run_batch_lines)."""
    import importlib
    cls = _release()
    result = importlib.import_module(cls.__module__).GenerationBatchResult(logits_output=logits_output,
                                                                          can_run_cuda_graph=graph)
    result.next_token_ids = next_token_ids
    if not hasattr(cls, "_record_step_counters"):
        ns = results_mixin.run_lines(sc, cls, results_mixin.run_batch_lines(cls)[1], "the lengths' copy",
                                     batch=batch, batch_result=result)
        for k in ("extend_input_len_per_req", "extend_logprob_start_len_per_req"):
            if k in ns:  # 0.5.5: the block sets locals, which run_batch's next lines hand to GenerationBatchResult
                setattr(result, k, ns[k])
        return result
    if batch.return_logprob or batch.return_hidden_states:
        result.extend_input_len_per_req = list(batch.extend_lens) if batch.forward_mode.is_extend() else None
    if batch.return_logprob:
        result.extend_logprob_start_len_per_req = batch.extend_logprob_start_lens
    return result


def process(sc, batch, result) -> None:
    """SGLang's ``Scheduler.process_batch_result`` of the batch."""
    sc.process_batch_result(batch, result)


__all__ = ["Recorder", "build", "generation_result", "launch", "process", "refused", "set_up", "shape",
           "streams_loads", "supported"]
