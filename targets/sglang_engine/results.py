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

Shapes (found by what the release has): 0.5.16+ a ``SchedulerBatchResultProcessor`` made by the scheduler's own
``init_batch_result_processor`` (with ``init_output_streamer``'s streamer); where a release has neither, its result
processing is not driven here and ``scheduler.Server`` keeps its re-stated lines (docs/sglang.md says why).
"""

from __future__ import annotations

import collections
import inspect
import time
import types


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
                 "_maybe_clear_mm_inputs", "maybe_send_health_check_signal")
# the ModelRunner's: the sampling forward_batch_generation calls
RUNNER_METHODS = ("sample", "_preprocess_logits", "maybe_update_ngram_token_table")  # the last: 0.5.13 - 0.5.15


def supported(cls) -> str:
    """Why the release's result processing is not driven here ("" where it is)."""
    lacking = [m for m in ("process_batch_result", "init_batch_result_processor", "init_output_streamer")
               if not hasattr(cls, m)]
    if lacking:
        return (f"its Scheduler has no {', '.join(lacking)} (the result processing is a mixin of the scheduler "
                f"before 0.5.13, scheduler_output_processor_mixin.py: not adapted here)")
    if "load_inquirer" in inspect.getsource(cls.init_output_streamer):
        return ("its output streamer reads the load inquirer's loads for every stream (output_streamer.py:147 in "
                "0.5.13), whose pool-stats observer reads the server's whole memory layout: not built here")
    return ""


def set_up(sc, model_runner) -> str:
    """The scheduler's result processing built (``build``) where the release's shape is adapted (``sc``'s class holds
    the release's own methods, scheduler._shape); why not, else ""."""
    why = supported(type(sc))
    if not why:
        build(sc, model_runner)
    return why


def build(sc, model_runner) -> None:
    """The scheduler's result-processing objects, made by its own ``init_*`` methods, with recording endpoints."""
    sc.is_generation = True
    sc.metrics_collector = None  # metrics off (--enable-metrics not set): no collector is made
    sc.metrics_reporter = Recorder("the metrics reporter", METRICS, num_generated_tokens=0, forward_ct_decode=0)
    sc.load_publisher = Recorder("the load publisher", LOAD)
    sc.load_snapshot_writer = None  # no load snapshot file (publish_load_snapshot returns None)
    # handed to the load publisher (a recorder, which does not call it); a call raises
    sc.load_inquirer.get_loads = refused("the load inquirer's get_loads")
    sc.ipc_channels = types.SimpleNamespace(send_to_detokenizer=Recorder("the detokenizer's socket", DETOKENIZER),
                                            send_to_tokenizer=Recorder("the tokenizer's socket", TOKENIZER))
    sc.rust_server = None
    sc.return_health_check_ipcs = []  # no health check pending
    sc.draft_worker = None
    sc.model_worker = sc.tp_worker
    sc.enable_fpm = False
    # init_load_inquirer's step counters (_record_step_counters reads and updates them; scheduler.py:2580-2590 in
    # 0.5.23); the inquirer itself is not made (its pool-stats observer reads the server's whole memory layout)
    sc.total_prefill_uncached_tokens = sc.total_prefill_busy_us = 0
    sc.decode_moment_totals = [0.0] * 6
    sc._prev_step = sc._prev_prefill_end_ts = sc._pause_started_at = None
    sc._sched_idled = False
    sc._pause_intervals = collections.deque()
    sc.abort_request = refused("the scheduler's abort_request")  # nothing is aborted here (no grammar, no timeout)
    sc.init_output_streamer()
    sc.init_batch_result_processor()
    model_runner.sampler = _sampler()
    for k in ("sampling_observer", "watermark_state"):
        setattr(model_runner, k, None)


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
    """``run_batch``'s first lines: the batch stamped with its forward iteration and launch time (the result
    processing's step counters read them; ``scheduler.py:4620-4631`` in 0.5.23)."""
    sc.forward_ct += 1
    batch.forward_iter, batch.launch_ts = sc.forward_ct, time.monotonic()
    batch.after_idle_gap, sc._sched_idled = sc._sched_idled, False
    if batch.extend_num_tokens:
        sc.processed_tokens_counter += batch.extend_num_tokens


def generation_result(logits_output, next_token_ids, batch, graph: bool):
    """``GenerationBatchResult`` as ``forward_batch_generation`` returns it, with ``run_batch``'s lines after the
    forward (the per-request lengths the output processing reads: ``scheduler.py:4885-4897`` in 0.5.23)."""
    from sglang.srt.managers.utils import GenerationBatchResult
    result = GenerationBatchResult(logits_output=logits_output, can_run_cuda_graph=graph)
    result.next_token_ids = next_token_ids
    if batch.return_logprob or batch.return_hidden_states:
        result.extend_input_len_per_req = list(batch.extend_lens) if batch.forward_mode.is_extend() else None
    if batch.return_logprob:
        result.extend_logprob_start_len_per_req = batch.extend_logprob_start_lens
    return result


def process(sc, batch, result) -> None:
    """SGLang's ``Scheduler.process_batch_result`` of the batch."""
    sc.process_batch_result(batch, result)


__all__ = ["Recorder", "build", "generation_result", "launch", "process", "refused", "set_up", "supported"]
