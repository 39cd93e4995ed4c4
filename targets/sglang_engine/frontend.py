"""The adapter-management API and the scheduler's admission of LoRA requests, driven as SGLang runs them.

Where the release's tokenizer manager and scheduler import (``scripts/sglang_setup.sh``: stamp ``frontend-ok``),
a case's ops go through SGLang's own code above the ``LoRAManager``:

* ``load`` / ``unload``: the tokenizer manager's ``load_lora_adapter`` / ``unload_lora_adapter`` (its control
  mixin: ``TokenizerControlMixin``, ``TokenizerCommunicatorMixin`` in 0.5.5 - 0.5.11), with SGLang's
  ``LoRARegistry``, the update lock, ``lora_ref_cache`` and ``pending_lora_unloads`` as
  ``TokenizerManager.init_lora`` makes them: the fresh ``LoRARef``, ``--max-loaded-loras`` (0.5.12+: the least
  recently used unpinned adapter is unloaded, 0.5.6+; 0.5.5 refuses the load), the wait for in-flight requests.
  The update goes to the scheduler as one rank's reply: ``recv_req.to_ref()`` then the manager's
  ``load_lora_adapter`` / ``unload_lora_adapter`` (``Scheduler`` -> ``TpModelWorker`` -> ``ModelRunner`` each
  pass it on unchanged in every 0.5.x release; re-stated, 1 line);
* a request: ``TokenizerManager._resolve_lora_path`` (0.5.12+: an adapter unloaded or evicted is reloaded
  from ``lora_ref_cache``, then ``LoRARegistry.acquire``; before: ``acquire``, as 0.5.5's
  ``_tokenize_one_request`` calls it), and ``LoRARegistry.release`` when it finishes;
* admission: the waiting requests, in order, each admitted by SGLang's ``Scheduler.can_schedule_lora_req``
  (``_can_schedule_lora_req`` in 0.5.12 - 0.5.18) against the adapters of the batch so far; before 0.5.12 by
  ``TpModelWorker.can_run_lora_batch`` of the batch's adapters plus the request's, stopping at the first that
  does not fit (0.5.5's loop). The loop around it is ``get_new_batch_prefill``'s LoRA lines, re-stated.

The tokenizer manager and scheduler objects are not built (they open sockets and processes): their LoRA
methods run on a ``Tokenizer`` object holding exactly the attributes those methods read.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import types
import uuid


def load():
    """The release's front-end LoRA code, or ``(None, why)`` where it does not import."""
    try:
        from sglang.srt.lora.lora_registry import LoRARegistry
        from sglang.srt.managers import io_struct
        try:
            mixin = importlib.import_module("sglang.srt.managers.tokenizer_control_mixin").TokenizerControlMixin
        except ImportError:
            mixin = importlib.import_module(
                "sglang.srt.managers.tokenizer_communicator_mixin").TokenizerCommunicatorMixin
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.managers.tokenizer_manager import TokenizerManager
    except Exception as e:  # noqa: BLE001 - any import failure: the target drives the manager directly
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    admit = getattr(Scheduler, "can_schedule_lora_req", None) or getattr(Scheduler, "_can_schedule_lora_req", None)
    ns = types.SimpleNamespace(
        mixin=mixin, LoRARegistry=LoRARegistry, Load=io_struct.LoadLoRAAdapterReqInput,
        Unload=io_struct.UnloadLoRAAdapterReqInput, resolve=getattr(TokenizerManager, "_resolve_lora_path", None),
        admit=admit, evicts="lru_lora_name" in inspect.getsource(mixin.load_lora_adapter))
    return ns, ""


def describe(fe) -> list[str]:
    if fe is None:
        return []
    return [f"adapter management: SGLang's {fe.mixin.__name__}.load_lora_adapter / unload_lora_adapter, LoRARegistry"
            + ("; --max-loaded-loras evicts the least recently used unpinned adapter" if fe.evicts else
               "; --max-loaded-loras refuses loads beyond it"),
            "requests: " + ("TokenizerManager._resolve_lora_path (reloads unloaded adapters)" if fe.resolve else
                            "LoRARegistry.acquire (no implicit reload in this release)"),
            "admission: " + (f"Scheduler.{fe.admit.__name__}" if fe.admit else "can_run_lora_batch, stop at the first")]


class Frontend:
    """One server's tokenizer-manager LoRA state and its scheduler's admission, over one ``LoRAManager``."""

    def __init__(self, fe, mgr, server_args):
        self.fe, self.mgr = fe, mgr
        self.loop = asyncio.new_event_loop()
        # LoRARef's lora_id is uuid4(): drawn from a counter per server instead, so that a case replays the same
        # ids (the pool loads a batch's adapters in the order of a set of ids)
        registry_module = importlib.import_module(fe.LoRARegistry.__module__)
        ids = iter(range(1, 1 << 62))
        registry_module.uuid4 = lambda: uuid.UUID(int=next(ids))
        tok = type("Tokenizer", (fe.mixin,), {})()
        tok.server_args = server_args  # 0.5.5 - 0.5.2x read their knobs from it or from the runtime context
        tok.auto_create_handle_loop = lambda: None
        tok.lora_registry = fe.LoRARegistry(None)
        tok.lora_update_lock = asyncio.Lock()
        tok.lora_ref_cache, tok.pending_lora_unloads = {}, {}
        tok.update_lora_adapter_communicator = self._to_scheduler
        self.tok = tok
        sched = types.SimpleNamespace(lora_drainer=None, enable_lora_overlap_loading=False,
                                      tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(
                                          lora_manager=mgr)))
        self.sched = sched

    def _run(self, coro):
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout=ARRIVAL_TIMEOUT_S * 6))

    async def _to_scheduler(self, obj):
        """One rank's reply: the scheduler and model runner pass the request's ``LoRARef`` to the manager."""
        ref = obj.to_ref()
        result = (self.mgr.load_lora_adapter(ref) if isinstance(obj, self.fe.Load)
                  else self.mgr.unload_lora_adapter(ref))
        return [result]

    def close(self) -> None:
        self.loop.close()

    # -- the adapter-management API ------------------------------------------------------------------------
    def load(self, name: str, path: str, pinned: bool):
        obj = self.fe.Load(lora_name=name, lora_path=path, pinned=pinned)
        return self._run(self.fe.mixin.load_lora_adapter(self.tok, obj))

    def unload(self, name: str):
        return self._run(self.fe.mixin.unload_lora_adapter(self.tok, self.fe.Unload(lora_name=name)))

    def registered(self) -> dict:
        """name -> ``LoRARef`` of the adapters requests can use now."""
        return dict(self.tok.lora_registry._registry)

    def in_flight(self) -> dict:
        """lora_id -> requests holding it (``ConcurrentCounter._count``)."""
        return {uid: c._count for uid, c in self.tok.lora_registry._counters.items()}

    # -- requests --------------------------------------------------------------------------------------
    async def _resolve(self, name):
        """The request's ``lora_id``, as the tokenizer manager resolves it (None: no adapter)."""
        if name is None:
            return None
        req = types.SimpleNamespace(lora_path=name, lora_id=None)
        if self.fe.resolve is not None:
            await self.fe.resolve(self.tok, req)
        else:
            req.lora_id = await self.tok.lora_registry.acquire(name)
        return req.lora_id

    def serve(self, names: list, run_batch, ignore_running: bool = False) -> list[str]:
        """Requests naming ``names`` arrive together; each is resolved (its own task, as each HTTP request is:
        one may wait for another's adapter to be released), queued, admitted into batches that
        ``run_batch([(index, name, lora_id), ...])`` runs, then released. The problems a user would see:
        a request for a registered adapter refused, requests never admitted, requests that wait forever."""
        return self.loop.run_until_complete(self._serve(names, run_batch, ignore_running))

    async def _serve(self, names, run_batch, ignore_running) -> list[str]:
        waiting: list = []
        problems: list = []

        async def arrive(i, name):
            try:
                uid = await self._resolve(name)
            except ValueError as e:  # refused: fine for an adapter that is not registered (and not reloaded)
                if name in self.registered():
                    problems.append(f"request {i} for registered adapter {name!r} was refused: {str(e)[:160]}")
                return
            waiting.append((i, name, uid))

        tasks = [asyncio.ensure_future(arrive(i, n)) for i, n in enumerate(names)]
        while True:
            for _ in range(ARRIVAL_YIELDS):  # let every arriving request run until it is queued or blocked
                await asyncio.sleep(0)
            if waiting:
                await self._one_batch(waiting, run_batch, ignore_running, problems)
            elif not await _arrivals(tasks, problems):
                break
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        return problems

    async def _one_batch(self, waiting: list, run_batch, ignore_running: bool, problems: list) -> None:
        admitted = self.admit([uid for _, _, uid in waiting], ignore_running)
        if not admitted:
            problems.append(f"requests {[i for i, _, _ in waiting]} are never admitted, though each alone fits "
                            f"the pool")
            admitted = list(range(len(waiting)))
            run_batch = None
        batch = [waiting[k] for k in admitted]
        for k in sorted(admitted, reverse=True):
            del waiting[k]
        try:
            if run_batch is not None:
                run_batch(batch)
        finally:
            for _, _, uid in batch:
                await self._release(uid)

    async def _release(self, lora_id) -> None:
        if lora_id is not None:
            await self.tok.lora_registry.release(lora_id)

    def admit(self, lora_ids: list, ignore_running: bool = False) -> list:
        """Indices of the waiting requests (``lora_ids`` in queue order) the scheduler puts in one new batch."""
        batch: list = []
        running: set = set()
        for i, uid in enumerate(lora_ids):
            if self.fe.admit is not None:
                seen = set() if ignore_running else running  # ignore_running: the planted fault
                if not self.fe.admit(self.sched, types.SimpleNamespace(lora_id=uid), seen):
                    continue
            elif not self.mgr.validate_lora_batch(({uid} if ignore_running else running) | {uid}):
                break
            batch.append(i)
            running.add(uid)
        return batch


ARRIVAL_TIMEOUT_S = 5.0
ARRIVAL_YIELDS = 20


async def _arrivals(tasks: list, problems: list) -> bool:
    """Wait for a request to arrive in the queue; False when none is left, or those left wait forever."""
    pending = [t for t in tasks if not t.done()]
    if not pending:
        return False
    done, _ = await asyncio.wait(pending, timeout=ARRIVAL_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
    if done:
        return True
    problems.append(f"{len(pending)} request(s) wait forever in the tokenizer manager: no request holds an "
                    f"adapter they wait for")
    for t in pending:
        t.cancel()
    return False

__all__ = ["Frontend", "describe", "load"]
