"""``targets/sglang_engine/scheduler_release.py``: each release shape of the scheduler loop, found by what the release
has (no SGLang import: stand-ins with the shape's names and signatures). Each test fails on the code before the
shape was adapted (the release was refused, or the call raised a ``TypeError`` / ``AttributeError``)."""

import sys
import types
from importlib import import_module

import pytest

release = import_module("fuzzrunner.targets.sglang_engine.scheduler_release")
RC = "sglang.srt.runtime_context"


class _Batch:
    req_pool_indices = "indices"


def test_the_loop_takes_each_releases_get_next_batch_to_run():
    """0.5.16+: ``get_next_batch_to_run(running_batch, last_batch)`` returns a plan; 0.5.13 - 0.5.15:
    ``get_next_batch_to_run()`` sets ``self.running_batch`` and returns the batch (before: a ``TypeError``, "takes 1
    positional argument but 3 were given")."""
    plan = types.SimpleNamespace(running_batch="merged", batch_to_run="b")

    class New:
        running_batch, last_batch = "running", "last"

        def get_next_batch_to_run(self, running_batch, last_batch):
            assert (running_batch, last_batch) == ("running", "last")
            return plan

    class Old:
        running_batch, last_batch = "running", "last"

        def get_next_batch_to_run(self):
            self.running_batch = "merged"
            return "b"
    new, old = New(), Old()
    assert release.next_batch(new) == release.next_batch(old) == "b"
    assert new.running_batch == old.running_batch == "merged"
    assert new.cur_batch_for_debug == old.cur_batch == "b"


def test_the_sampled_tokens_are_relayed_as_each_release_relays_them():
    """0.5.19+ ``_relay_forward_payload(batch, future_indices, result)``, 0.5.16 - 0.5.18 ``(future_indices,
    result)``, 0.5.13 - 0.5.15 none: ``run_batch`` stashes the token ids in the future map itself."""
    calls = []
    result = types.SimpleNamespace(next_token_ids="ids")

    class V19:
        future_map = "the relay's"

        def _relay_forward_payload(self, batch, future_indices, batch_result):
            calls.append(("19", future_indices, batch_result.next_token_ids))

    class V16:
        future_map = "the relay's"

        def _relay_forward_payload(self, future_indices, batch_result):
            calls.append(("16", future_indices, batch_result.next_token_ids))

    class V13:
        future_map = types.SimpleNamespace(stash=lambda idx, ids: calls.append(("13", idx, ids)))
    for sc in (V19(), V16(), V13()):
        release.relay(sc, _Batch(), result)
    assert calls == [("19", "indices", "ids"), ("16", "indices", "ids"), ("13", "indices", "ids")]


def _server_args_module(monkeypatch, sa):
    mod = types.ModuleType("sglang.srt.server_args")
    mod.get_global_server_args = lambda: sa
    monkeypatch.setitem(sys.modules, "sglang.srt.server_args", mod)


def test_before_the_runtime_context_the_knobs_and_widths_come_from_the_server_args(monkeypatch):
    """0.5.12 - 0.5.13 have no ``sglang.srt.runtime_context`` (the path failed to import there): the scheduler reads
    its knobs from its ``ServerArgs``, the runner one rank's widths, and ``pp_max_micro_batch_size``'s default is
    assigned on the global ``ServerArgs``."""
    monkeypatch.setitem(sys.modules, RC, None)
    sa = types.SimpleNamespace(max_running_requests=3, max_loras_per_batch=2, pp_max_micro_batch_size=None)
    _server_args_module(monkeypatch, sa)
    assert release.knob_source(sa) == (sa, sa)
    assert release.one_rank_widths().tp_size == 1 and release.one_rank_widths().pp_size == 1
    release.default_micro_batch(3)
    assert sa.pp_max_micro_batch_size == 3
    release.default_micro_batch(5)  # set already: kept, as the scheduler keeps a configured value
    assert sa.pp_max_micro_batch_size == 3


class _Overridable(types.SimpleNamespace):
    """0.5.16's published ``ServerArgs``: a bare write raises, ``override(source, **fields)`` writes."""

    def __setattr__(self, k, v):
        if getattr(self, "_frozen", False):
            raise AttributeError(f"bare write of {k}")
        super().__setattr__(k, v)

    def override(self, source, **fields):
        object.__setattr__(self, "source", source)
        for k, v in fields.items():
            object.__setattr__(self, k, v)


def _runtime_context(monkeypatch, **attrs):
    mod = types.ModuleType(RC)
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, RC, mod)
    return mod


def test_the_micro_batch_default_is_set_where_each_release_keeps_it(monkeypatch):
    """0.5.16 (a runtime context without config bags): an override of the published ``ServerArgs`` (a bare write
    raises there); 0.5.17+: a runtime-context override; 0.5.14 - 0.5.15: an assignment on the published one."""
    sa = _Overridable(pp_max_micro_batch_size=None)
    object.__setattr__(sa, "_frozen", True)
    parallel = types.SimpleNamespace(tp_size=1)
    _runtime_context(monkeypatch, get_context=lambda: types.SimpleNamespace(), get_parallel=lambda: parallel,
                     get_server_args=lambda: sa)
    release.default_micro_batch(4)
    assert (sa.pp_max_micro_batch_size, sa.source) == (4, release.MICRO_BATCH_SOURCE)
    assert release.knob_source(sa) == (sa, sa)  # no get_schedule: Scheduler.__init__ reads its ServerArgs
    assert release.one_rank_widths() is parallel

    overrides = []
    bags = types.SimpleNamespace(pp_max_micro_batch_size=None)
    ctx = types.SimpleNamespace(override=lambda source, **kw: overrides.append((source, kw)))
    _runtime_context(monkeypatch, get_context=lambda: ctx, get_parallel=lambda: bags,
                     get_schedule=lambda: "schedule", get_lora=lambda: "lora")
    release.default_micro_batch(2)
    assert overrides == [(release.MICRO_BATCH_SOURCE, {"pp_max_micro_batch_size": 2})]
    assert release.knob_source(None) == ("schedule", "lora")

    plain = types.SimpleNamespace(pp_max_micro_batch_size=0)
    _runtime_context(monkeypatch, get_context=lambda: types.SimpleNamespace(), get_parallel=lambda: parallel)
    _server_args_module(monkeypatch, plain)  # 0.5.14: no get_server_args in the runtime context
    release.default_micro_batch(6)
    assert plain.pp_max_micro_batch_size == 6


def test_constructors_get_the_fields_their_release_declares():
    """``SchedulerDPAttnAdapter`` takes ``model_runner`` from 0.5.17 only, ``create_future_map``
    ``needs_confidence_relay`` from 0.5.16 only (before: a ``TypeError`` on 0.5.13 - 0.5.16)."""
    def create_future_map(device, req_to_token_pool, needs_cpu_seq_lens=True):
        return needs_cpu_seq_lens
    got = release.accepted(create_future_map, needs_cpu_seq_lens=True, needs_confidence_relay=False)
    assert got == {"needs_cpu_seq_lens": True}
    with pytest.raises(TypeError):
        create_future_map("cpu", None, needs_cpu_seq_lens=True, needs_confidence_relay=False)


def test_0_5_12s_loop_relays_through_output_ids_and_names_its_request_fields_its_way():
    """0.5.12 has no ``FutureMap`` in its non-overlap loop (``run_batch`` sets ``batch.output_ids``; before, the path
    did not import there: no ``resolve_forward_inputs``), keeps token ids in lists (an ``array`` prompt raised "can
    only append array (not list) to array"), checks a request's finish with ``check_finished`` and counts its
    chunks in ``is_chunked``."""
    from array import array

    class Batch:
        req_pool_indices, input_ids = "indices", "kept"
    sc, batch = types.SimpleNamespace(future_map=None), Batch()
    release.relay(sc, batch, types.SimpleNamespace(next_token_ids="ids"))
    assert (batch.output_ids, batch.input_ids) == ("ids", "kept")  # prepare_for_decode takes output_ids

    class Req12:
        def __init__(self, rid, text, origin_input_ids):
            self.origin_input_ids, self.output_ids, self.is_chunked, self.checked = origin_input_ids, [], 1, []

        def check_finished(self, new_accepted_len=1):
            self.checked.append(new_accepted_len)

    class Req13:
        def __init__(self, rid, text, origin_input_ids):
            self.output_ids = array("q")
    assert release.token_ids(Req12)([1, 2]) == [1, 2]
    assert release.token_ids(Req13)([1, 2]) == array("q", [1, 2])
    req = Req12("r", "", [1])
    release.update_finish_state(req)
    release.update_finish_state(req, 1)
    assert req.checked == [1, 1]
    assert release.middle_chunks(req) == 1
    release.middle_chunk_done(req)
    assert release.middle_chunks(req) == 0


def test_0_5_12s_drainer_future_map_and_dp_attention_hooks_are_made_where_it_makes_them(monkeypatch):
    """0.5.12 makes its ``LoRADrainer`` in ``Scheduler.__init__`` (no ``init_lora_drainer``), has no
    ``create_future_map`` and no ``SchedulerDPAttnAdapter`` (a mixin's methods)."""
    made = []
    drainer_module = types.ModuleType("sglang.srt.lora.lora_drainer")
    drainer_module.LoRADrainer = lambda slots, threshold: made.append((slots, threshold)) or "drainer"
    monkeypatch.setitem(sys.modules, "sglang.srt.lora.lora_drainer", drainer_module)
    monkeypatch.setitem(sys.modules, "sglang.srt.managers.scheduler_components.dp_attn", None)
    sc = types.SimpleNamespace(spec_algorithm=types.SimpleNamespace())
    release.init_lora_drainer(sc, types.SimpleNamespace(max_loras_per_batch=3, lora_drain_wait_threshold=1.0))
    assert (sc.lora_drainer, made) == ("drainer", [(3, 1.0)])
    release.init_lora_drainer(sc, types.SimpleNamespace(max_loras_per_batch=3, lora_drain_wait_threshold=0.0))
    assert sc.lora_drainer is None  # off: no drainer, as __init__'s else branch
    assert release.future_map(sc, "cpu", None) is None
    assert release.dp_attn_adapter(model_runner=None) is None


def test_an_unfinished_request_is_checkpointed_as_each_release_does_it():
    """``checkpoint_kv_cache`` 0.5.22+, ``maybe_cache_unfinished_req`` 0.5.11 - 0.5.21, the tree cache's own
    ``cache_unfinished_req`` 0.5.10 (whose ``mem_cache/common.py`` has neither: reading it failed the whole engine's
    import there)."""
    calls = []
    tree = types.SimpleNamespace(cache_unfinished_req=lambda req: calls.append(("tree", req)))
    new = types.SimpleNamespace(checkpoint_kv_cache="ck", maybe_cache_unfinished_req="maybe")
    assert release.checkpoint(new) == "ck"
    assert release.checkpoint(types.SimpleNamespace(maybe_cache_unfinished_req="maybe")) == "maybe"
    release.checkpoint(types.SimpleNamespace(release_kv_cache="only"))("r", tree)
    assert calls == [("tree", "r")]


class _SchedulerOf056:
    """0.5.5 - 0.5.6's ``Scheduler.__init__``: the set-up lines later releases moved into ``init_running_status`` /
    ``init_chunked_prefill`` / ``init_schedule_policy`` are blocks of ``__init__`` (``scheduler.py:430-502`` in
    0.5.6), each under its comment."""

    def __init__(self, server_args):
        self.server_args = server_args
        self.tree_cache = object()  # what runs first in __init__ is not taken

        # Init running status
        self.waiting_queue = []
        self.last_batch = None

        # Init chunked prefill
        self.chunked_prefill_size = server_args.chunked_prefill_size
        if self.chunked_prefill_size <= 0:  # -1 means disable
            self.chunked_prefill_size = None
        self.chunked_req = None

        # Init the grammar backend for constrained generation
        self.grammar_backend = object()

        # Init schedule policy and new token estimation
        self.policy = ("policy", self.schedule_policy)
        self.new_token_ratio = [r for r in (0.7,) if self.schedule_policy]  # a comprehension sees `self`

        # Init watchdog thread
        self.watchdog = object()


def test_before_the_set_up_methods_the_same_lines_of_the_releases_init_run_on_the_scheduler_object():
    """0.5.5 - 0.5.6 have no ``init_running_status`` / ``init_chunked_prefill`` / ``init_schedule_policy`` (before:
    refused, "lacks ..., init_chunked_prefill, init_schedule_policy, ..."): the block of ``Scheduler.__init__`` under
    each one's comment runs on the object, and nothing else of ``__init__``; a release with the method runs it."""
    import types
    sc = types.SimpleNamespace(server_args=types.SimpleNamespace(chunked_prefill_size=-1), schedule_policy="fcfs")
    for m in release.INIT_BLOCKS:
        assert release.has_init_step(_SchedulerOf056, m)
        release.init_step(sc, _SchedulerOf056, m)
    assert (sc.waiting_queue, sc.last_batch, sc.chunked_prefill_size, sc.chunked_req) == ([], None, None, None)
    assert sc.policy == ("policy", "fcfs") and sc.new_token_ratio == [0.7]
    assert not hasattr(sc, "grammar_backend") and not hasattr(sc, "watchdog") and not hasattr(sc, "tree_cache")
    calls = []
    later = types.SimpleNamespace(init_running_status=lambda: calls.append("own"))
    release.init_step(later, type("Scheduler", (), {}), "init_running_status")
    assert calls == ["own"]
    assert not release.has_init_step(type("Scheduler", (), {}), "init_chunked_prefill")


def test_the_requests_queue_entry_is_stamped_as_each_release_stamps_it():
    """0.5.10+: ``time_stats.set_wait_queue_entry_time(ts)``; before, ``TimeStats`` (``metrics/collector.py``) is a
    dataclass the scheduler writes (``req.time_stats.wait_queue_entry_time = ...``; before: the path imported
    ``observability.req_time_stats`` to refuse 0.5.9, whose served steps failed with an ``AttributeError``)."""
    import types

    class New:
        def set_wait_queue_entry_time(self, ts=None):
            self.wait_queue_entry_time = ("set", ts)
    new = types.SimpleNamespace(time_stats=New())
    old = types.SimpleNamespace(time_stats=types.SimpleNamespace(wait_queue_entry_time=0.0))
    release.stamp_queue_entry(new, 1001.0)
    release.stamp_queue_entry(old, 1001.0)
    assert new.time_stats.wait_queue_entry_time == ("set", 1001.0)
    assert old.time_stats.wait_queue_entry_time == 1001.0


def test_0_5_5s_tree_cache_release_and_metrics_are_taken_its_way(monkeypatch):
    """0.5.5 has no ``CacheInitParams`` (``ChunkCache(req_to_token_pool=, token_to_kv_pool_allocator=, page_size=)``)
    and no ``release_kv_cache`` (result processing calls ``tree_cache.cache_finished_req(req)``); 0.5.5 - 0.5.6 ask
    ``current_scheduler_metrics_enabled()`` as a method, 0.5.7 - 0.5.9 read it as an attribute."""
    import types
    monkeypatch.setitem(sys.modules, "sglang.srt.mem_cache.cache_init_params", None)

    class ChunkCache:
        def __init__(self, req_to_token_pool, token_to_kv_pool_allocator, page_size):
            self.args = (req_to_token_pool, token_to_kv_pool_allocator, page_size)
    tree = release.make_tree_cache((ChunkCache, {}), disable=True, req_to_token_pool="req", token_to_kv_pool_allocator="kv",
                                   page_size=1, chunked_prefill_size=None)
    assert tree.args == ("req", "kv", 1)
    done = []
    tree.cache_finished_req = done.append
    release.release(None)("r", tree)
    assert done == ["r"]
    method = type("Scheduler", (), {"current_scheduler_metrics_enabled": lambda self: True})
    sc, sc7 = types.SimpleNamespace(), types.SimpleNamespace()
    release.metrics_off(sc, method)
    release.metrics_off(sc7, type("Scheduler", (), {}))
    assert sc.current_scheduler_metrics_enabled() is False and sc7.current_scheduler_metrics_enabled is False
