"""Planted faults of the scheduler path (scheduler.py): each a change of one SGLang object of the case, made with
``unittest.mock.patch.object`` for the server's life (the session's objects die with the case)."""

from __future__ import annotations

from unittest import mock

from . import results as result_processing
from .scheduler import admission_name, prefill_loop

SERVER_FAULTS = {
    "init_new_fetches_one":
        "ForwardBatch.init_new fetches only the first request's adapter into the pool (fetch_new_loras of "
        "{lora_ids[0]} instead of set(lora_ids); 0.5.5 - 0.5.7, where prepare_lora_batch loads the batch's adapters "
        "itself, the pool's prepare_lora_batch of that one): a batch whose other adapters are not resident reaches "
        "the batch info's slot lookup without them.",
    "admission_ignores_running_batch":
        "the admission loop leaves the running batch's adapters out of running_loras (_get_new_batch_prefill_raw's "
        "first LoRA line): can_schedule_lora_req admits a new adapter while the running batch already fills the "
        "slots, and the next decode batch needs more than --max-loras-per-batch.",
    "drain_never_cleared":
        "LoRADrainer._update_fully_drained_loras does nothing: an adapter marked draining stays draining after its "
        "requests finished, and its later requests (more new tokens than the stale remaining budget) are never "
        "admitted.",
    "radix_key_without_lora":
        "each request's radix key is made without its LoRA id (Req.extra_key as if Req.__init__ had not appended "
        "lora_id): with the radix cache on, match_prefix hands a request the cached K/V of a prompt prefix another "
        "adapter's request (or the base model's) computed.",
    "radix_key_without_extra_key":
        "each request's radix key is made without the user's own extra_key (Req.extra_key as its lora_id alone, the "
        "key GenerateReqInput.extra_key carried dropped): with the radix cache on, match_prefix hands a request the "
        "cached K/V of a prompt prefix that a request of its adapter computed under another user's key.",
    "retract_keeps_kv":
        "ScheduleBatch.retract_decode frees none of the KV slots it releases (the allocator's free skipped while it "
        "runs): the retracted requests' slots stay allocated after they are requeued, and the KV pool never comes "
        "back whole.",
    "logprob_cursor_not_advanced":
        "the scheduler's prefill result processing does not move its logprob cursor past a request's input logprobs "
        "(SchedulerBatchResultProcessor._apply_prefill_logprobs returning the cursor it was given; 0.5.5 - "
        "0.5.12.post1, SchedulerOutputProcessorMixin.process_batch_result_prefill without its logprob_pt += "
        "num_input_logprobs): each later request of the batch stores the input logprobs of the rows before its own "
        "(where the result processing is driven: results.py).",
}


def unavailable(sl, version: str) -> dict:
    """{fault: why} for the scheduler faults this release's scheduler has no place for (``sl``: scheduler.load's
    path; None: not driven, faults.unavailable says so): 0.5.10 - 0.5.11 check a request's adapter inline (no
    admission method to plant ``admission_ignores_running`` on; ``admission_ignores_running_batch`` goes on the
    check's ``validate_lora_batch`` call) and have no ``LoRADrainer``."""
    if sl is None:
        return {}
    out = {}
    if admission_name(sl.Scheduler) is None:
        out["admission_ignores_running"] = (
            f"SGLang {version}'s scheduler checks a request's adapter inline (no can_schedule_lora_req): the check "
            f"of the request's own adapter alone has no call to plant on")
    if not sl.drainer:
        out["drain_never_cleared"] = f"SGLang {version} has no LoRADrainer (--lora-drain-wait-threshold: 0.5.12+)"
    if sl.radix_cache is None:
        out["radix_key_without_lora"] = f"SGLang {version}'s radix cache is not driven: {sl.radix_why}"
        out["radix_key_without_extra_key"] = out["radix_key_without_lora"]
    if not sl.results:
        out["logprob_cursor_not_advanced"] = (f"SGLang {version}'s result processing is not driven here "
                                               f"({result_processing.supported(sl.Scheduler)})")
    return out


def plant_server(server, faults: set) -> None:
    sc, mgr = server.sc, server.s.mgr
    admit = admission_name(type(sc))  # can_schedule_lora_req, or its older name; None: inline (0.5.10 - 0.5.11)
    # admission_ignores_running (faults.FAULTS): the frontend's fault, here on SGLang's own admission check
    if "admission_ignores_running" in faults and admit is not None:
        _patch(server, sc, admit, _own_only(getattr(sc, admit)))
    if "admission_ignores_running_batch" in faults:
        if admit is not None:
            _patch(server, sc, admit, _without_running_batch(sc, admit))
        else:
            _inline_without_running_batch(server, sc, mgr)
    if "init_new_fetches_one" in faults:
        _fetch_first_only(server, mgr)
    if "drain_never_cleared" in faults and getattr(sc, "lora_drainer", None) is not None:
        _patch(server, sc.lora_drainer, "_update_fully_drained_loras", lambda running_reqs: None)
    if "radix_key_without_lora" in faults:
        _patch(server, server, "submit", _key_without_lora(server.submit))
    if "radix_key_without_extra_key" in faults:
        _patch(server, server, "submit", _key_without_user_key(server.submit))
    if "retract_keeps_kv" in faults:
        _retract_keeps_kv(server)
    if "logprob_cursor_not_advanced" in faults and not server.results_why:
        if hasattr(sc, "batch_result_processor"):  # 0.5.13+
            _cursor_not_advanced(server, type(sc.batch_result_processor))
        else:  # 0.5.5 - 0.5.12.post1: the scheduler's own mixin (results_mixin.py)
            _mixin_cursor_not_advanced(server, sc)


def _patch(server, obj, name: str, new) -> None:
    p = mock.patch.object(obj, name, new)
    p.start()
    server.patches.append(p)


def _key_without_lora(submit):
    """``Server.submit`` whose request's ``extra_key`` lacks the lora_id ``Req.__init__`` appended to it."""
    def submit_without_lora_key(rid, tokens, max_new, lora_id, *rest, **kw):  # rest: the release's other arguments
        req = submit(rid, tokens, max_new, lora_id, *rest, **kw)
        if lora_id is not None and req.extra_key is not None and req.extra_key.endswith(lora_id):
            req.extra_key = req.extra_key[: -len(lora_id)] or None
        return req
    return submit_without_lora_key


def _key_without_user_key(submit):
    """``Server.submit`` whose request's ``extra_key`` is its lora_id alone (the user's key dropped)."""
    def submit_without_user_key(rid, tokens, max_new, lora_id, *rest, **kw):
        req = submit(rid, tokens, max_new, lora_id, *rest, **kw)
        req.extra_key = lora_id
        return req
    return submit_without_user_key


def _retract_keeps_kv(server) -> None:
    """``ScheduleBatch.retract_decode`` with the KV allocator's ``free`` a no-op while it runs (for the server's
    life: the class is patched, ``close()`` stops it)."""
    cls, alloc = server.sl.ScheduleBatch, server.alloc
    original = cls.retract_decode

    def retract_decode(self, *args, **kwargs):
        with mock.patch.object(alloc, "free", lambda *a, **k: None):
            return original(self, *args, **kwargs)
    _patch(server, cls, "retract_decode", retract_decode)


def _own_only(original):
    def can_schedule_lora_req(req, running_loras):
        return original(req, set())
    return can_schedule_lora_req


def _without_running_batch(sc, admit: str):
    original = getattr(sc, admit)

    def can_schedule_lora_req(req, running_loras):
        running = {r.lora_id for r in sc.running_batch.reqs if not r.finished()}
        return original(req, set(running_loras) - running)
    return can_schedule_lora_req


def _inline_without_running_batch(server, sc, mgr) -> None:
    """0.5.5 - 0.5.11's inline check, ``validate_lora_batch({req.lora_id} | running_loras)`` (0.5.8 - 0.5.11; before,
    the worker's ``can_run_lora_batch`` of the running batch's, the new batch's and the request's adapters, which asks
    the manager's ``validate_lora_batch``), with the running batch's adapters left out of the set: the same fault as
    on the method, for the loop's call only (``_get_new_batch_prefill_raw``, or ``get_new_batch_prefill`` where the
    loop is inline there, 0.5.5 - 0.5.7)."""
    original = mgr.validate_lora_batch
    loop = prefill_loop(type(sc))
    raw = getattr(sc, loop)

    def validate_lora_batch(lora_ids):
        running = {r.lora_id for r in sc.running_batch.reqs if not r.finished()}
        return original(set(lora_ids) - running)

    def get_new_batch_prefill_raw(*args, **kwargs):
        with mock.patch.object(mgr, "validate_lora_batch", validate_lora_batch):
            return raw(*args, **kwargs)
    _patch(server, sc, loop, get_new_batch_prefill_raw)


def _cursor_not_advanced(server, cls) -> None:
    """``_apply_prefill_logprobs`` stores the request's values from the cursor it is given and hands that cursor back
    unmoved. The processor is a frozen slots dataclass: the method is replaced on its class, for the server's life
    (``close()`` stops it)."""
    original = cls._apply_prefill_logprobs

    def apply(self, **kwargs):
        original(self, **kwargs)
        return kwargs["logprob_pt"]
    _patch(server, cls, "_apply_prefill_logprobs", apply)


def _mixin_cursor_not_advanced(server, sc) -> None:
    """The mixin's prefill loop (``process_batch_result_prefill``) without its ``logprob_pt += num_input_logprobs``:
    every ``add_input_logprob_return_values`` of the batch reads its slice from the cursor's start, 0."""
    import inspect
    original = sc.add_input_logprob_return_values
    sig = inspect.signature(original)
    cursor = next(p for p in sig.parameters if p in ("logprob_pt", "pt"))

    def add_input_logprob_return_values(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.arguments[cursor] = 0
        return original(*bound.args, **bound.kwargs)
    _patch(server, sc, "add_input_logprob_return_values", add_input_logprob_return_values)


def _fetch_first_only(server, mgr) -> None:
    real = server.forward_batch
    if hasattr(mgr, "fetch_new_loras"):  # 0.5.8+: init_new fetches the batch's adapters, then prepares
        obj, name = mgr, "fetch_new_loras"
    else:  # 0.5.5 - 0.5.7: the manager's prepare_lora_batch loads them (the pool's prepare_lora_batch(cur_uids=))
        obj, name = mgr.memory_pool, "prepare_lora_batch"
    original = getattr(obj, name)

    def fetch(first, *args, **kwargs):
        if name == "prepare_lora_batch":
            kwargs["cur_uids"] = first & set(kwargs["cur_uids"])
            return original(*args, **kwargs)
        return original(first & set(args[0]), *args[1:], **kwargs)

    def forward_batch(batch):
        first = {batch.reqs[0].lora_id} if batch.reqs else set()
        with mock.patch.object(obj, name, lambda *a, **k: fetch(first, *a, **k)):
            return real(batch)
    _patch(server, server, "forward_batch", forward_batch)
