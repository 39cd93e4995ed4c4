"""vLLM's serving layer's adapter API, as shipped, over the engine target's runner (serving_cases.py draws the ops).

What the API server makes (``init_app_state``): vLLM's own ``OpenAIServingModels(engine_client=...,
base_model_paths=[BaseModelPath(...)], lora_modules=None)``, whose ``load_lora_adapter`` / ``unload_lora_adapter``
take vLLM's own ``LoadLoRAAdapterRequest`` / ``UnloadLoRAAdapterRequest`` (its ``lora_requests``, id counter,
``_check_load_lora_adapter_request``, per-name locks), and the request path's own ``_check_model`` /
``_maybe_get_adapters`` (the base class of every ``OpenAIServing*`` handler, called unbound on a stand-in that holds
the ``models`` and no request logger) that turns a client's ``model`` into the ``LoRARequest`` the engine gets.

The engine client (``AsyncLLM``) is re-stated: its ``add_lora`` / ``remove_lora`` / ``list_loras`` go to
``EngineCore`` -> the executor (``collective_rpc``, whose one re-stated line is its ``lora_id > 0`` assert) ->
``Worker`` -> the model runner, each a pure pass-through; here they call the session's runner (vLLM's own
``LoRAModelRunnerMixin``) directly.

Oracles (``ctx.check``, state violations): ``serve_unload.resident``: after a successful unload the adapter's id is
neither registered in the worker (``list_loras``: its CPU cache) nor in a slot (``lora_index_to_id``)
(vllm-project/vllm#54839 says it stays: known.py's U1); ``serve.admit``: a request naming a served adapter is
admitted with that name's ``LoRARequest``, one naming an unloaded or never-loaded name is refused;
``serve_load.answer``: a load answers success where the client's view says it may (a new name, or ``load_inplace``),
an error otherwise. The numeric oracles of the steps then check that each admitted request gets exactly the delta
of the adapter its name served when it arrived (in-place reloads: the new weights, for the requests holding that id).
"""

from __future__ import annotations

import asyncio
import importlib
from types import SimpleNamespace

from fuzzrunner.errors import UnsupportedCase

from . import adapters

BASE = "base"  # the served base model's name (--served-model-name)

# each piece, by release: the first module path that has it
_WHERE = {
    "OpenAIServingModels": ("vllm.entrypoints.openai.models.serving", "vllm.entrypoints.openai.serving_models"),
    "BaseModelPath": ("vllm.entrypoints.openai.models.protocol", "vllm.entrypoints.openai.serving_models"),
    "LoadLoRAAdapterRequest": ("vllm.entrypoints.serve.lora.protocol", "vllm.entrypoints.openai.protocol"),
    "UnloadLoRAAdapterRequest": ("vllm.entrypoints.serve.lora.protocol", "vllm.entrypoints.openai.protocol"),
    "Serving": ("vllm.entrypoints.serve.engine.serving:BaseServing",
                "vllm.entrypoints.openai.engine.serving:OpenAIServing",
                "vllm.entrypoints.openai.serving_engine:OpenAIServing"),
}
_FOUND: dict = {}


def find() -> dict:
    """The serving layer's classes in this release (once), or ``{"missing": why}``."""
    if _FOUND:
        return _FOUND
    for key, places in _WHERE.items():
        for place in places:
            module, _, attr = place.partition(":")
            try:
                _FOUND[key] = getattr(importlib.import_module(module), attr or key)
                break
            except (ImportError, AttributeError) as e:
                _FOUND.setdefault("errors", []).append(f"{place}: {type(e).__name__}: {str(e)[:120]}")
        else:
            _FOUND["missing"] = f"vLLM's serving layer has no {key} here ({'; '.join(_FOUND.get('errors', [])[-2:])})"
            return _FOUND
    return _FOUND


class EngineClient:
    """``AsyncLLM`` as ``OpenAIServingModels`` uses it: its ``model_config`` and the LoRA calls, which pass straight
    to the worker's model runner (AsyncLLM -> EngineCore -> executor -> Worker -> runner: pure pass-throughs)."""

    def __init__(self, session):
        self.session = session
        self.model_config = session.cfg.model_config
        self.renderer = self.input_processor = self.processor = None  # read by the constructor, not by the LoRA API

    async def add_lora(self, lora_request) -> bool:
        assert lora_request.lora_int_id > 0, "lora_id must be greater than 0."  # the executor's assert
        return self.session.runner.add_lora(lora_request)

    async def remove_lora(self, lora_id: int) -> bool:
        assert lora_id > 0, "lora_id must be greater than 0."
        return self.session.runner.remove_lora(lora_id)

    async def list_loras(self) -> set[int]:
        return self.session.runner.list_loras()

    async def pin_lora(self, lora_id: int) -> bool:
        return self.session.runner.pin_lora(lora_id)


class Frontend:
    """The API server in front of a session (runner.Session or V1Session): serving ops here, everything else
    passed to the session; a step's requests that name a served adapter are admitted (or refused) by vLLM's
    request path before the session sees them."""

    def __init__(self, session, ctx):
        f = find()
        if "missing" in f:
            raise UnsupportedCase(f"serving: {f['missing']}.")
        self.session, self.ctx, self.f = session, ctx, f
        self.models = self._make_models()
        self.handler = f["Serving"].__new__(f["Serving"])  # the request path's stand-in: vLLM's own methods
        self.handler.models, self.handler.request_logger = self.models, None
        self.served: dict[str, int] = {}       # the client's view: name -> config adapter it serves (last success)
        self.requests: dict[str, object] = {}  # admitted request id -> its LoRARequest (None: the base model)
        self.pending_finish: list[str] = []

    def _make_models(self):
        """``OpenAIServingModels`` as ``init_app_state`` makes it, then ``init_static_loras()`` (no --lora-modules)."""
        import inspect
        f, s = self.f, self.session
        paths = [f["BaseModelPath"](name=BASE, model_path=s.cfg.model_config.model)]
        kw = {"engine_client": EngineClient(s), "base_model_paths": paths, "lora_modules": None}
        params = inspect.signature(f["OpenAIServingModels"].__init__).parameters
        if "model_config" in params:  # releases whose constructor takes the model config beside the client
            kw["model_config"] = s.cfg.model_config
        models = f["OpenAIServingModels"](**{k: v for k, v in kw.items() if k in params})
        self.run(models.init_static_loras())
        return models

    @staticmethod
    def run(coro):
        """One coroutine of the API server, on an event loop of its own (closed after: the case leaves none open;
        vLLM's per-name ``asyncio.Lock``s bind to no loop until contended, which one call at a time never is)."""
        return asyncio.run(coro)

    def __getattr__(self, name):
        return getattr(self.session, name)

    # -- the API's adapter routes ------------------------------------------------------------------------
    def serve_load(self, op) -> None:
        spec = self.session.c["adapters"][str(op["adapter"])]
        path = adapters.folder(self.session.c, spec)
        answer = self.run(self.models.load_lora_adapter(
            self.f["LoadLoRAAdapterRequest"](lora_name=op["name"], lora_path=path, load_inplace=op["inplace"])))
        ok = isinstance(answer, str)
        may = op["name"] not in self.served or op["inplace"]
        if ok != may:
            state = "served" if op["name"] in self.served else "not served"
            self.ctx.check("serve_load.answer", f"load of '{op['name']}' (inplace={op['inplace']}) answered "
                                                f"{_text(answer)!r}; the name is {state}, so the load should "
                                                f"{'succeed' if may else 'be refused'}")
        if not ok:
            return
        self.served[op["name"]] = op["adapter"]
        new = self.models.lora_requests[op["name"]]
        for rid, req in self.requests.items():  # an in-place reload: requests holding the id now get its new weights
            if req is not None and req.lora_int_id == new.lora_int_id and rid in self.session.live:
                index, _ = self.session.live[rid]
                self.session.live[rid] = (index, op["adapter"])

    def serve_unload(self, op) -> None:
        held = self.models.lora_requests.get(op["name"])
        answer = self.run(self.models.unload_lora_adapter(self.f["UnloadLoRAAdapterRequest"](lora_name=op["name"])))
        if not isinstance(answer, str):
            if op["name"] in self.served:
                self.ctx.check("serve_unload.answer", f"unload of served '{op['name']}' answered {_text(answer)!r}")
            return
        self.served.pop(op["name"], None)
        if held is None:
            return
        self.ctx.check("serve_unload.resident", resident(self.session, held.lora_int_id, op["name"]),
                       {"name": op["name"], "lora_int_id": held.lora_int_id, "path": held.lora_path})

    # -- requests ----------------------------------------------------------------------------------------
    def admit(self, op) -> dict:
        """The step as the engine gets it: new requests resolved by the request path (``_check_model``, then
        ``_maybe_get_adapters``), refused ones left out, and no more distinct adapters than ``max_loras`` (the
        scheduler's rule: a request that would bring one more waits)."""
        reqs, ids = [], {getattr(self.requests.get(r["id"]), "lora_int_id", None) for r in op["reqs"]
                         if r["id"] in self.session.live} - {None}
        for r in op["reqs"]:
            if r["id"] in self.session.live:
                reqs.append(r)
                continue
            got = self._resolve(r)
            if got is None:
                continue
            spec, req = got
            if req is not None and req.lora_int_id not in ids and len(ids) >= self.session.c["max_loras"]:
                continue
            if req is not None:
                ids.add(req.lora_int_id)
            self.requests[r["id"]] = req
            reqs.append(dict(r, lora=spec, _lora_request=req))
        return dict(op, reqs=reqs)

    def _resolve(self, r: dict) -> tuple[int, object] | None:
        """(the adapter the request gets per the client's view, its LoRARequest) or None: refused."""
        if "model" not in r:  # a base-model request (or a direct one: the case's own LoRARequest)
            return r["lora"], (self.session.request(r["lora"]) if r["lora"] else None)
        client = SimpleNamespace(model=r["model"])
        error = self.run(self.handler._check_model(client))
        served = r["model"] in self.served
        if error is not None:
            if served:
                self.ctx.check("serve.admit", f"request {r['id']!r} for served '{r['model']}' refused: {_text(error)}")
            return None
        req = self.handler._maybe_get_adapters(client)
        if not served:
            self.ctx.check("serve.admit", f"request {r['id']!r} for '{r['model']}', which is not served (never loaded "
                                          f"or unloaded), admitted with {req!r}: it reaches weights no name serves")
            return None
        return self.served[r["model"]], req

    def step(self, op) -> None:
        finish = self.pending_finish + list(op.get("finish", []))
        op = self.admit(op)
        if not op["reqs"]:  # everything refused: the engine runs no step; its finishes wait for the next one
            self.pending_finish = finish
            return
        self.pending_finish = []
        for rid in finish:
            self.requests.pop(rid, None)
        self.session.step(dict(op, finish=finish))


def resident(session, lora_int_id: int, name: str) -> list[str]:
    """What of an unloaded adapter the worker still holds: its CPU-cache registration (``list_loras``), a slot."""
    out = []
    if lora_int_id in session.runner.list_loras():
        out.append(f"'{name}' (lora_int_id {lora_int_id}) was unloaded (the API answered success) but the worker "
                   f"still lists it: list_loras() = {sorted(session.runner.list_loras())}")
    slots = list(session.runner.lora_manager._adapter_manager.lora_index_to_id)
    if lora_int_id in slots:
        out.append(f"'{name}' (lora_int_id {lora_int_id}) still holds slot {slots.index(lora_int_id)} "
                   f"(lora_index_to_id = {slots})")
    return out


def _text(answer) -> str:
    err = getattr(answer, "error", None)
    return str(getattr(err, "message", None) or getattr(answer, "message", None) or answer)[:200]
