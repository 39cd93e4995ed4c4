"""``targets/sglang_engine/scheduler.py``'s feature detection: which release's ``Scheduler`` runs SGLang's own admission
loop, by the methods it has (no SGLang import: stand-in classes with the methods' names)."""

from importlib import import_module

import pytest

scheduler = import_module("fuzzrunner.targets.sglang_engine.scheduler")


def _release(*names):
    return type("Scheduler", (), {n: (lambda self: None) for n in names})


LOOP = scheduler.SCHED_METHODS + scheduler.SCHED_INIT  # the loop's methods and its set-up methods (0.5.7+)


def test_each_release_runs_its_own_name_of_the_lora_admission_check():
    """0.5.12 - 0.5.19 call it ``_can_schedule_lora_req``, 0.5.20+ ``can_schedule_lora_req``: the loop (SGLang's
    ``_get_new_batch_prefill_raw``) calls it by its release's name, so the shape must hold that one."""
    old = _release(*LOOP, "_can_schedule_lora_req", "init_lora_drainer")
    new = _release(*LOOP, "can_schedule_lora_req", "send_control_output")
    assert scheduler.admission_name(old) == "_can_schedule_lora_req"
    assert scheduler.admission_name(new) == "can_schedule_lora_req"
    assert "_can_schedule_lora_req" in scheduler.scheduler_methods(old)
    assert "init_lora_drainer" in scheduler.scheduler_methods(old)
    assert "send_control_output" not in scheduler.scheduler_methods(old)  # optional: taken where it exists
    assert scheduler.unsupported(old) == scheduler.unsupported(new) == ""


def test_a_release_without_the_admission_loop_is_refused_with_what_it_lacks():
    """A Scheduler without a method the loop runs is not driven (the target's details and ``doctor`` say why); the
    earlier path (the re-stated loop around SGLang's admission check) takes its steps."""
    pre = _release(*(m for m in LOOP if m != "get_new_batch_prefill"))
    why = scheduler.unsupported(pre)
    assert why == ("the release's Scheduler lacks get_new_batch_prefill, can_schedule_lora_req / "
                   "_can_schedule_lora_req"), why
    # a set-up method missing and no block of the same lines in its __init__ (a stand-in has no source)
    why = scheduler.unsupported(_release(*(m for m in LOOP if m != "init_running_status"), "can_schedule_lora_req"))
    assert why == "the release's Scheduler lacks init_running_status", why


def test_a_finished_request_is_released_as_its_release_releases_it():
    """0.5.22+ ``release_kv_cache(req, tree, *, checkpoint)`` (a keyword without default: the call must pass it);
    before, ``release_kv_cache(req, tree, is_insert=True)``."""
    calls = []

    def new(req, tree, *, checkpoint):
        calls.append(("new", checkpoint))

    def old(req, tree, is_insert=True):
        calls.append(("old", is_insert))
    import_module("fuzzrunner.targets.sglang_engine.scheduler_release").release(new)("r", "t")
    import_module("fuzzrunner.targets.sglang_engine.scheduler_release").release(old)("r", "t")
    assert calls == [("new", True), ("old", True)]


def test_a_release_whose_loop_calls_the_timeouts_runs_them_as_its_own_methods():
    """0.5.10 - 0.5.19's loop calls ``_abort_on_waiting_timeout`` / ``_abort_on_running_timeout`` each round (off by
    default, ``SGLANG_REQ_*_TIMEOUT`` -1: each returns at its first line). They were refused before ("whose state the
    scheduler object does not hold yet"); now they are the release's own methods on the scheduler object."""
    old = _release(*LOOP, "_can_schedule_lora_req", "_abort_on_waiting_timeout",
                   "_abort_on_running_timeout", "_should_delay_dflash_prefill_for_batching")
    assert scheduler.unsupported(old) == "", scheduler.unsupported(old)
    methods = scheduler.scheduler_methods(old)
    assert {"_abort_on_waiting_timeout", "_abort_on_running_timeout",
            "_should_delay_dflash_prefill_for_batching"} <= set(methods), methods


def test_a_release_whose_scheduler_path_does_not_import_says_which_releases_drive_it_in_one_line(monkeypatch):
    """`doctor --engines` on 0.5.11 printed "scheduler: admission loop re-stated (ImportError: cannot import name
    'resolve_forward_inputs' from 'sglang.srt.managers.overlap_utils' (/site/.../overlap_" (the error cut at 160
    characters mid-path); now the releases the path is driven on and the one name this release lacks."""
    import sys
    real = ImportError("cannot import name 'resolve_forward_inputs' from 'sglang.srt.managers.overlap_utils' "
                       "(/opt/sglang-0.5.11/site/sglang/srt/managers/overlap_utils.py)",
                       name="sglang.srt.managers.overlap_utils")
    assert scheduler._lacks(real) == "lacks sglang.srt.managers.overlap_utils.resolve_forward_inputs"
    assert scheduler._lacks(ModuleNotFoundError("No module named 'sglang.srt.runtime_context'",
                                                name="sglang.srt.runtime_context")) == \
        "lacks sglang.srt.runtime_context"
    assert scheduler._lacks(RuntimeError("boom\nmore")) == "fails to import it (RuntimeError: boom)"
    monkeypatch.delenv("FUZZRUNNER_SGLANG_SCHEDULER", raising=False)
    # the path's first import fails, whatever is importable here: with SGLang's submodules already imported by an
    # earlier test in this worker, `sglang` None alone gave an AttributeError (`__path__`), not an ImportError
    for name in [n for n in sys.modules if n.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sglang", None)
    path, why = scheduler.load()
    assert path is None
    import re
    assert re.fullmatch(rf"the scheduler path is driven on SGLang {scheduler.DRIVEN_ON} only: this release lacks "
                        r"sglang[\w.]*", why), why


class _InlineCheck:
    """0.5.10 - 0.5.11's shape: no admission method, the LoRA check inline in ``_get_new_batch_prefill_raw``."""

    def _get_new_batch_prefill_raw(self, prefill_delayer_single_pass=None):
        running_loras = {req.lora_id for req in self.running_batch.reqs}
        for req in self.waiting_queue:
            if req.lora_id not in running_loras:
                if not self.tp_worker.model_runner.lora_manager.validate_lora_batch({req.lora_id} | running_loras):
                    continue
            running_loras.add(req.lora_id)
        return running_loras


def test_a_release_with_the_lora_check_inline_runs_its_own_loop():
    """0.5.10 - 0.5.11 check a request's adapter inline (``validate_lora_batch`` in ``_get_new_batch_prefill_raw``):
    driven since the seventh stint (before: refused, "lacks can_schedule_lora_req / _can_schedule_lora_req");
    a loop without any check stays refused."""
    inline = type("Scheduler", (_InlineCheck,), {m: (lambda self: None) for m in LOOP})
    assert scheduler.inline_lora_check(inline)
    assert scheduler.unsupported(inline) == "", scheduler.unsupported(inline)
    assert scheduler.admission_name(inline) is None
    without = _release(*LOOP)  # a stand-in loop with no source: no check found
    assert "can_schedule_lora_req" in scheduler.unsupported(without)


def _admits_a1_only_when_planted(sc, mgr, seen: list, loop: str) -> None:
    """Adapters a0 (and the base model) running, a1 waiting, 2 slots: the release's loop (``sc``'s method ``loop``,
    looked up at each call: the fault may replace it) leaves a1 waiting; with ``admission_ignores_running_batch``
    planted, the check sees {a1} alone and admits it."""
    import types

    def prefill():
        return getattr(sc, loop)()
    faults = import_module("fuzzrunner.targets.sglang_engine.scheduler_faults")
    sc.waiting_queue = [types.SimpleNamespace(lora_id="a1")]
    server = types.SimpleNamespace(sc=sc, s=types.SimpleNamespace(mgr=mgr), patches=[])
    assert prefill() == {None, "a0"}  # 3 adapters for 2 slots: a1 waits
    faults.plant_server(server, {"admission_ignores_running_batch"})
    try:
        assert prefill() == {None, "a0", "a1"}  # admitted against {a1} alone
    finally:
        while server.patches:
            server.patches.pop().stop()
    assert seen == [{None, "a0", "a1"}, {"a1"}]


def test_inline_admission_fault_leaves_the_running_batchs_adapters_out_of_the_check():
    """``admission_ignores_running_batch`` on 0.5.10 - 0.5.11: the inline check's set without the running batch's
    adapters (as on the method); ``admission_ignores_running`` and ``drain_never_cleared`` have no place there."""
    import types
    faults = import_module("fuzzrunner.targets.sglang_engine.scheduler_faults")
    seen = []
    mgr = types.SimpleNamespace(validate_lora_batch=lambda ids: seen.append(set(ids)) or len(ids) <= 2)
    running = types.SimpleNamespace(reqs=[types.SimpleNamespace(lora_id=i, finished=lambda: False)
                                          for i in (None, "a0")])
    sc = _InlineCheck()
    sc.running_batch, sc.tp_worker = running, types.SimpleNamespace(model_runner=types.SimpleNamespace(
        lora_manager=mgr))
    _admits_a1_only_when_planted(sc, mgr, seen, "_get_new_batch_prefill_raw")
    assert sc._get_new_batch_prefill_raw() == {None, "a0"}  # unplanted
    sl = types.SimpleNamespace(Scheduler=_InlineCheck, drainer=False, radix_cache=(object, {}), radix_why="",
                               results=False)
    assert set(faults.unavailable(sl, "0.5.11")) == {"admission_ignores_running", "drain_never_cleared",
                                                     "logprob_cursor_not_advanced"}


def test_without_a_drainer_no_drain_threshold_is_drawn_or_passed():
    """0.5.10 - 0.5.11's ServerArgs has no ``lora_drain_wait_threshold`` (``ServerArgs(...)`` would raise): the cases
    draw none, the feature space has no drain features, the knobs pass none."""
    cases = import_module("fuzzrunner.targets.sglang_engine.cases")
    assert "drain=on" in cases.feature_space(scheduler=True)
    assert not {"drain=on", "drain=off"} & set(cases.feature_space(scheduler=True, drainer=False))
    c = {"max_running_requests": 2, "lora_drain_wait_threshold": 0.0}
    assert "lora_drain_wait_threshold" in scheduler.scheduler_knobs(c, True)
    assert "lora_drain_wait_threshold" not in scheduler.scheduler_knobs(c, True, drainer=False)


class _WorkerCheck:
    """0.5.5 - 0.5.7's shape: no ``_get_new_batch_prefill_raw``; ``get_new_batch_prefill`` holds the loop and asks the
    worker's ``can_run_lora_batch`` (``TpModelWorker``'s, which asks the manager's ``validate_lora_batch``) of the
    running batch's, the new batch's and the request's adapters (``scheduler.py:1767-1775`` in 0.5.5)."""

    def get_new_batch_prefill(self):
        lora_set = {req.lora_id for req in self.running_batch.reqs}
        can_run = []
        for req in self.waiting_queue:
            if not self.tp_worker.can_run_lora_batch(lora_set | {r.lora_id for r in can_run} | {req.lora_id}):
                break
            can_run.append(req)
        return lora_set | {r.lora_id for r in can_run}


def test_a_release_whose_loop_asks_the_worker_inline_runs_its_own_loop_and_takes_the_fault_there():
    """0.5.5 - 0.5.7 check a request's adapter through the worker's ``can_run_lora_batch``, inline in
    ``get_new_batch_prefill`` itself: driven now (before: refused, "lacks _get_new_batch_prefill_raw, ...,
    can_schedule_lora_req / _can_schedule_lora_req"), and ``admission_ignores_running_batch`` is planted on that
    loop's check (the running batch's adapters left out of the set the manager validates)."""
    import types
    cls = type("Scheduler", (_WorkerCheck,), {m: (lambda self: None) for m in LOOP if m != "get_new_batch_prefill"})
    assert scheduler.prefill_loop(cls) == "get_new_batch_prefill"
    assert scheduler.inline_lora_check(cls) and scheduler.unsupported(cls) == "", scheduler.unsupported(cls)
    seen = []
    mgr = types.SimpleNamespace(validate_lora_batch=lambda ids: seen.append(set(ids)) or len(set(ids)) <= 2)
    sc = cls()
    sc.tp_worker = types.SimpleNamespace(can_run_lora_batch=lambda ids: mgr.validate_lora_batch(ids))
    sc.running_batch = types.SimpleNamespace(reqs=[types.SimpleNamespace(lora_id=i, finished=lambda: False)
                                                   for i in (None, "a0")])
    _admits_a1_only_when_planted(sc, mgr, seen, "get_new_batch_prefill")


def test_init_new_fetches_one_is_planted_on_the_pools_load_where_prepare_lora_batch_loads_the_batch():
    """0.5.5 - 0.5.7 have no ``fetch_new_loras``: the manager's ``prepare_lora_batch`` loads the batch's adapters
    (``memory_pool.prepare_lora_batch(cur_uids=...)``, ``lora_manager.py:257-265`` in 0.5.5). The fault loads the
    first request's alone there (before: a target error, "'LoRAManager' object has no attribute
    'fetch_new_loras'"); with ``fetch_new_loras`` (0.5.8+) it stays on that call."""
    import types
    faults = import_module("fuzzrunner.targets.sglang_engine.scheduler_faults")
    loaded = []
    pool = types.SimpleNamespace(prepare_lora_batch=lambda cur_uids, lora_adapters: loaded.append(set(cur_uids)))
    mgr = types.SimpleNamespace(memory_pool=pool)
    batch = types.SimpleNamespace(reqs=[types.SimpleNamespace(lora_id=i) for i in ("a0", "a1", None)])

    def forward_batch(b):  # ForwardBatch.init_new's LoRA line in 0.5.5: the manager's prepare of the batch's ids
        mgr.memory_pool.prepare_lora_batch(cur_uids={r.lora_id for r in b.reqs}, lora_adapters={})
    server = types.SimpleNamespace(sc=types.SimpleNamespace(), s=types.SimpleNamespace(mgr=mgr), patches=[],
                                   forward_batch=forward_batch)
    faults.plant_server(server, {"init_new_fetches_one"})
    try:
        server.forward_batch(batch)
    finally:
        while server.patches:
            server.patches.pop().stop()
    server.forward_batch(batch)
    assert loaded == [{"a0"}, {"a0", "a1", None}]


def test_the_details_name_the_releases_own_lora_check_and_drainer():
    """``doctor`` / the target's details said "can_schedule_lora_req / LoRADrainer" on every release the path runs
    on; 0.5.5 - 0.5.11 have neither (the check inline in the loop, no drainer before 0.5.12)."""
    import types
    old = types.SimpleNamespace(Scheduler=type("Scheduler", (_WorkerCheck,), {}), drainer=False)
    new = types.SimpleNamespace(Scheduler=_release("can_schedule_lora_req"), drainer=True)
    assert "/ the LoRA check inline in get_new_batch_prefill over" in scheduler.describe(old)
    assert "LoRADrainer" not in scheduler.describe(old)
    assert "/ can_schedule_lora_req / LoRADrainer over" in scheduler.describe(new)


def test_the_details_name_the_radix_tree_cache_and_the_result_processing_the_release_gets():
    """``doctor --engines`` said "over its ReqToTokenPool, KV allocator and tree cache" after sglang_engine began to
    draw the radix cache on (``UnifiedRadixCache`` / ``RadixCache``) and to run SGLang's own ``process_batch_result``
    (0.5.14 - 0.5.23; new-user trial): the details line names the radix tree a case with the radix cache on gets, or
    why none, and whether the release's result processing runs, or why it is re-stated."""
    import types

    class UnifiedRadixCache:
        pass
    processing = ("process_batch_result", "init_batch_result_processor", "init_output_streamer")
    driven = types.SimpleNamespace(Scheduler=_release("can_schedule_lora_req", *processing), drainer=True,
                                   radix_cache=(UnifiedRadixCache, {}), radix_why="")
    line = scheduler.describe(driven)
    assert "UnifiedRadixCache where a case draws the radix cache on" in line, line
    assert "result processing: SGLang's process_batch_result" in line, line
    old = types.SimpleNamespace(Scheduler=_release("can_schedule_lora_req"), drainer=True, radix_cache=None,
                                radix_why="its radix cache lacks sglang.srt.mem_cache.radix_cache")
    line = scheduler.describe(old)
    assert "radix cache not driven: its radix cache lacks sglang.srt.mem_cache.radix_cache" in line, line
    assert "result processing: re-stated (its Scheduler has no process_batch_result" in line, line


def test_the_result_processings_endpoints_record_what_they_are_sent_and_refuse_the_rest():
    """The detokenizer's socket, the metrics reporter, the load publisher (results.py) record each declared call; a
    call SGLang makes that the scheduler object was not built for raises, naming it (never a silent no-op)."""
    from fuzzrunner.targets.sglang_engine import results
    sock = results.Recorder("the detokenizer's socket", results.DETOKENIZER)
    sock.send_output("out1")
    assert sock.sent("send_output") == [("out1",)]
    with pytest.raises(AttributeError, match="the detokenizer's socket has no 'recv'"):
        sock.recv()
    reporter = results.Recorder("the metrics reporter", results.METRICS, num_generated_tokens=0)
    reporter.num_generated_tokens += 3
    assert reporter.num_generated_tokens == 3
    with pytest.raises(RuntimeError, match="the scheduler's abort_request was called"):
        results.refused("the scheduler's abort_request")("r0")


def test_result_processing_is_driven_where_the_release_has_the_processor_or_the_mixin():
    """``results.supported``: the processor made by ``init_batch_result_processor`` (0.5.13+; 0.5.13's streamer reads
    the load inquirer, made by the scheduler's own init methods) and the scheduler's own output-processor mixin (0.5.5 -
    0.5.12.post1: results_mixin.py) are driven; a scheduler with neither is named as not driven. Before, the mixin
    and 0.5.13 were not driven (tests/unit/test_sglang_engine_results_mixin.py has the shapes)."""
    from fuzzrunner.targets.sglang_engine import results

    class Newer:
        def process_batch_result(self): ...
        def init_batch_result_processor(self): ...
        def init_output_streamer(self):
            self.output_streamer = dict(send_to_detokenizer=None)

    class Mixin:
        def process_batch_result(self): ...
        def process_batch_result_prefill(self): ...

    class Loads(Newer):
        def init_output_streamer(self):
            self.output_streamer = dict(load_inquirer_get_loads=None)

    class Neither:
        def process_batch_result(self): ...

    assert results.supported(Newer) == results.supported(Mixin) == results.supported(Loads) == ""
    assert "init_batch_result_processor, init_output_streamer" in results.supported(Neither)
