"""SGLang's result processing where it is the scheduler's own mixin (``SchedulerOutputProcessorMixin``,
``managers/scheduler_output_processor_mixin.py``: 0.5.5 - 0.5.12.post1, before the release moved it into
``SchedulerBatchResultProcessor``): ``Scheduler.process_batch_result`` then the mixin's
``process_batch_result_prefill`` / ``_decode`` (the token appended, ``check_finished``, the input and output logprobs
stored by ``add_logprob_return_values`` / ``add_input_logprob_return_values``, the KV released or cached,
``stream_output``), run as methods of the scheduler object ``scheduler.Server`` builds (results.py builds the rest).

The scheduler object gets the methods of the scheduler's own mixins that these call: the output processor mixin, the
metrics mixin (``init_metrics`` makes the stats and counters the methods read and update, metrics off) and, where the
release has it, the runtime checker mixin (``get_pool_stats``: the loads a stream carries, ``get_load`` /
``get_loads``, read from SGLang's CPU pools). What the mixins only log or report (``report_prefill_stats``,
``log_decode_stats`` ...) is recorded (``results.Recorder``), as the 0.5.14+ path records its metrics reporter's
calls; the detokenizer's and tokenizer's sockets are recorders too.

Around them, ``run_batch``'s own lines (``run_batch_lines``): its first statements (the forward counter, the batch's
forward iteration) and its copy of the per-request extend and logprob-start lengths into the result (the block under
"# These 2 values are needed for processing the output"), each taken from the release's ``Scheduler.run_batch``
source and run on the scheduler object, as ``scheduler_release.init_step`` runs ``__init__``'s blocks.
"""

from __future__ import annotations

import collections
import importlib
import inspect
import textwrap

from . import scheduler_release

# what the mixins call that only logs or reports metrics (metrics off: each records its call; the release's names)
METRICS = ("report_prefill_stats", "report_decode_stats", "log_batch_result_stats", "update_device_timer",
           "log_decode_stats", "log_decode_stats_every_iteration", "update_spec_metrics")
# the scheduler's mixins whose methods the result processing runs, each found by a method it defines
MIXINS = ("process_batch_result_prefill",  # SchedulerOutputProcessorMixin
          "init_metrics",  # SchedulerMetricsMixin: init_metrics, get_load(s), the counters' methods
          "_get_token_info")  # SchedulerRuntimeCheckerMixin: the pool stats get_load(s) read (get_pool_stats 0.5.10+)
# run_batch's copy of the per-request lengths into the result: the block under this comment, up to its ``ret = ``
COPY_HEAD = "# These 2 values are needed for processing the output"


def is_mixin(cls) -> bool:
    """Whether the release's result processing is the scheduler's own mixin (no ``SchedulerBatchResultProcessor``)."""
    return hasattr(cls, "process_batch_result_prefill") and not hasattr(cls, "init_batch_result_processor")


def methods(cls) -> dict:
    """The functions of the scheduler's mixins (``MIXINS``) the release has, by name."""
    out: dict = {}
    for marker in MIXINS:
        owner = next((k for k in cls.__mro__ if marker in vars(k)), None)
        if owner is not None:
            out.update({n: f for n, f in vars(owner).items() if inspect.isfunction(f)})
    return out


def build(sc, cls, recorder) -> None:
    """The mixin's methods bound on the scheduler object, and what they read that ``scheduler.Server`` did not set:
    ``Scheduler.__init__``'s lines for them (the stream interval, the health check's queue, the worker's names, a
    dense model's pool kinds), ``init_metrics``' stats and counters; ``cls``: the release's ``Scheduler``;
    ``recorder(name, methods)``: a recording endpoint."""
    for name, fn in methods(cls).items():
        setattr(type(sc), name, fn)  # the shape's class (scheduler._shape): made for this object
    sa = sc.server_args
    sc.is_generation = True
    sc.stream_interval = sa.stream_interval
    sc.return_health_check_ct = 0  # no health check pending (0.5.5 - 0.5.9 count them ...)
    sc.return_health_check_ipcs = collections.deque()  # (... later releases queue their sockets)
    sc.model_worker, sc.draft_worker = sc.tp_worker, None
    sc.is_hybrid_ssm = False  # a dense model (the worker info of Scheduler.__init__)
    sc.enable_fpm = False
    sc.metrics_collector = None  # metrics off: init_metrics makes none
    # Scheduler.__init__'s lines that init_metrics reads (0.5.5 - 0.5.9): no KV events (no --kv-events-config)
    sc.enable_kv_cache_events = False
    sc.enable_metrics_for_all_schedulers = getattr(sa, "enable_metrics_for_all_schedulers", False)
    init = sc.init_metrics
    init(**{k: v for k, v in {"tp_rank": 0, "pp_rank": 0, "dp_rank": None}.items()
            if k in inspect.signature(init).parameters})
    # init_metrics turns the prefill and decode stats on for attention-TP rank 0 (0.5.7 - 0.5.9: whatever
    # --enable-metrics says); the scheduler path keeps them off (scheduler_release.metrics_off: a log line and gauges)
    scheduler_release.metrics_off(sc, cls)
    metrics = recorder("the scheduler's metrics", METRICS)
    for name in METRICS:
        if hasattr(cls, name):
            setattr(sc, name, getattr(metrics, name))
    sc.metrics_recorder = metrics


def _body(fn) -> list:
    """The lines of ``fn``'s body, after its signature and docstring, dedented to the body's indent."""
    import ast
    src = textwrap.dedent(inspect.getsource(fn))
    node = ast.parse(src).body[0]
    first = node.body[1] if isinstance(node.body[0], ast.Expr) and isinstance(
        getattr(node.body[0], "value", None), ast.Constant) else node.body[0]
    lines = src.splitlines()[first.lineno - 1:]
    return textwrap.dedent("\n".join(lines)).splitlines()


def run_batch_lines(cls) -> tuple[str, str]:
    """``(head, copy)``: the first statements of the release's ``run_batch`` (up to its first blank line: the forward
    counter, ``batch.forward_iter`` where the release stamps it) and its length copy (``COPY_HEAD``'s block, up to the
    ``ret = batch_result`` after it), each dedented; ``copy`` names ``batch`` and ``batch_result``."""
    body = _body(cls.run_batch)
    head = body[: next(i for i, ln in enumerate(body) if not ln.strip())]
    start = next(i for i, ln in enumerate(body) if ln.strip().startswith(COPY_HEAD))
    end = next(i for i in range(start, len(body)) if body[i].strip().startswith("ret = batch_result"))
    return "\n".join(head), textwrap.dedent("\n".join(body[start:end]))


def run_lines(sc, cls, source: str, label: str, **names) -> dict:
    """Run ``source`` (lines of the release's ``Scheduler.run_batch``, ``cls``) on the scheduler object, in the
    scheduler module's namespace; the namespace after (the locals the lines set: 0.5.5's lengths)."""
    module = importlib.import_module(cls.__module__)
    ns = dict(vars(module), self=sc, **names)
    exec(compile(source, f"<{cls.__module__}.Scheduler.run_batch: {label}>", "exec"), ns)  # noqa: S102
    return ns


__all__ = ["METRICS", "build", "is_mixin", "methods", "run_batch_lines", "run_lines"]
