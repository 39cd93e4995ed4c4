"""Run one ``vllm_engine`` case: vLLM's LoRA adapter manager, LoRA layers and V2-runner LoRA bookkeeping, as shipped.

The session holds what vLLM's V2 model runner holds for LoRA across steps, each object vLLM's own:

* a model of vLLM's layer classes (model.py) wrapped by vLLM's ``LoRAModelRunnerMixin.load_lora_model``:
  an ``LRUCacheWorkerLoRAManager`` over an ``LRUCacheLoRAModelManager`` that replaces each layer by its
  ``*WithLoRA`` class (``create_lora_weights``, and a ``PunicaWrapperGPU`` shared by all);
* the runner's ``LoraState`` (request index -> adapter id, request -> ``LoRARequest``);
* the request indices (``RequestState``'s free list, re-stated: its buffers need a GPU).

Ops: ``add`` / ``remove`` / ``pin`` (the runner's ``add_lora`` / ``remove_lora`` / ``pin_lora``: loading from
the PEFT folder through vLLM's loader, LRU eviction under ``max_cpu_loras`` and ``max_loras``); ``step`` (new
and finished requests, ``sort_batch_req_ids``, ``LoraState.make_lora_inputs`` with the logits rows per
request, ``_set_active_loras`` -> ``set_active_adapters`` -> ``set_adapter_mapping``, then each drawn layer's
own forward on the scheduled rows plus padding, and the logits processor on every kind of row the runner
feeds it: the sampled rows, 1 + drafts per request, and prompt-logprobs rows); ``dummy_run`` (the runner's
``maybe_dummy_run_with_lora`` around a forward, then every adapter removed, as ``_dummy_run`` does).

The float64 reference of every output row is the base layer's own output (vLLM's unwrapped layer) plus the
delta of the row's request's adapter, computed from the PEFT weights alone (adapters.py), never from vLLM's
metadata: base-model rows must equal the base output exactly, each adapter's rows their own delta.
"""

from __future__ import annotations

import functools
import inspect
import tempfile

import numpy as np
import torch

from fuzzrunner.errors import InvalidCase, UnsupportedCase

from . import adapters, dummy, faults, model, moe, prompt_logprobs, vllm_env
from .case_check import check

_MODEL_DIRS: dict[str, str] = {}


def _model_dir(c: dict) -> str:
    key = repr((c["hidden"], c["vocab"], sorted(c["layout"].items()), sorted((c.get("moe") or {}).items())))
    if key not in _MODEL_DIRS:
        _MODEL_DIRS[key] = model.write_config(c, tempfile.mkdtemp(prefix="fuzzrunner-vllm-model-"))
    return _MODEL_DIRS[key]


class _Requests(set):
    """The set of ``LoRARequest`` the runner hands ``set_active_adapters``, iterated in batch order.

    vLLM iterates a plain set, so the order the adapters are loaded and activated in (and so the slot each
    gets) follows the string hash of their names, which differs between processes (PYTHONHASHSEED): a
    finding would not replay. Any order is one vLLM can take; this one is the case's."""

    def __init__(self, items, order: list[int]):
        super().__init__(items)
        rank = {a: i for i, a in enumerate(order)}
        self._order = sorted(items, key=lambda r: rank.get(r.lora_int_id, len(rank)))

    def __iter__(self):
        return iter(self._order)


def wrapped_modules(c: dict) -> set[str]:
    """The runtime modules vLLM wraps under the deployment filter ``target_modules`` (LoRAConfig): a module
    whose name, or one of its packed sub-modules' names, is listed (vLLM's ``is_in_target_modules``)."""
    tm = c.get("target_modules")
    pack = model.packing(c["layout"])
    if c.get("moe"):
        pack[moe.LAYER] = (moe.LAYER,)
    if tm is None:
        return set(pack)
    return {m for m, subs in pack.items() if m in tm or any(s in tm for s in subs)}


class Session:
    def __init__(self, case, ctx, found: dict):
        self.c = c = check(case)
        self.ctx, self.found = ctx, found
        device = ctx.context.device  # the run's (fuzzrunner.context.Context), decided once by the front end
        self.device = torch.device(device)
        vllm_env.on_device(device)
        vllm_env.distributed(device)
        self.cfg = vllm_env.configs(c, _model_dir(c), device)
        if c.get("target_modules") is not None and getattr(self.cfg.lora_config, "target_modules", None) is None:
            self.c = c = dict(c, target_modules=None)  # a release before #34984 has no filter: every module wrapped
        self.dtype = self.cfg.model_config.dtype
        self.runner = found["runner_class"](self.cfg.lora_config)
        from vllm.config import set_current_vllm_config
        self.moe_twin = None
        if c.get("moe") and found.get("moe_unavailable"):
            raise UnsupportedCase(f"moe {c['moe']!r}: {found['moe_unavailable']}.")
        if c.get("moe"):  # vLLM's fused-MoE path: its compiled ops answered where absent, its workspace (moe.py)
            moe.compiled_ops()
            moe.workspace(self.device)
            if self.device.type == "cpu":
                moe.cpu_platform()
        with set_current_vllm_config(self.cfg):  # vLLM's layers read it when they are made
            base = model.build(found["model_classes"][model.arch(c)], self.cfg, self.device, seed=c["seed"])
            if c.get("moe"):
                self.moe_twin = moe.twin(base, self.cfg, self.device)
                moe.finish_loading(base, self.cfg, self.device)
            self.model = self.runner.load_lora_model(base, self.cfg, self.device)
        self._track_stacks()
        self.lora_state = found["LoraState"](max_num_reqs=c["max_num_seqs"])
        self.free = list(range(c["max_num_seqs"]))  # RequestState.free_indices: pop() to add, append() to remove
        self.live: dict[str, tuple[int, int]] = {}  # request id -> (request index, adapter id)
        self.pack = model.packing(c["layout"])
        self.deltas = adapters.Deltas(c, self.pack, wrapped_modules(c))
        self.compare = True
        # the V2 runner's PromptLogprobsWorker (prompt_logprobs.py), where the release has it and lm_head runs
        self.prompts = (prompt_logprobs.Prompts(self, found["prompt_logprobs"])
                        if found.get("prompt_logprobs") and "lm_head" in c["layers"] else None)
        self.profile_run()

    def _track_stacks(self) -> None:
        """Name every LoRA layer's stacked weights for the oracles. The kernels reach them through vLLM's
        pointer tables, not as arguments, so the shadow oracle would otherwise look for their storage among
        every live object at each launch (a second or more per launch with vLLM imported)."""
        for name, module in self.model.named_modules():
            if not hasattr(module, "set_lora"):
                continue
            moe_stacks = ("w13_lora_a_stacked", "w13_lora_b_stacked", "w2_lora_a_stacked", "w2_lora_b_stacked")
            # FusedMoEWithLoRA's lora_a/b_stacked are per-(slot, expert) views of these: tracked whole
            for attr in moe_stacks if hasattr(module, "w13_lora_a_stacked") else ("lora_a_stacked", "lora_b_stacked"):
                stack = getattr(module, attr, None)
                for i, t in enumerate(stack if isinstance(stack, (tuple, list)) else [stack]):
                    if t is not None:
                        self.ctx.track(t, f"{name}.{attr}[{i}]")

    # -- the runner's adapter API ---------------------------------------------------------------
    def request(self, adapter: int):
        return self.found["LoRARequest"](f"adapter-{adapter}", adapter,
                                         adapters.folder(self.c, self.c["adapters"][str(adapter)]))

    def lora_request_of(self, r: dict):
        """A new request's ``LoRARequest``: the serving layer's (serving.py admitted it) or the case's own."""
        if "_lora_request" in r:
            return r["_lora_request"]
        return self.request(r["lora"]) if r["lora"] else None

    def add(self, op) -> None:
        self.runner.add_lora(self.request(op["id"]))

    def remove(self, op) -> None:
        self.runner.remove_lora(op["id"])

    def pin(self, op) -> None:
        if op["id"] in self.runner.list_loras():  # vLLM refuses (ValueError) to pin an adapter it does not hold
            self.runner.pin_lora(op["id"])

    # -- dummy runs -----------------------------------------------------------------------------
    @staticmethod
    def split(num_tokens: int, num_reqs: int) -> list[int]:
        """The V2 runner's ``_dummy_run`` split: the remainder spread over the last requests."""
        return [num_tokens // num_reqs + (i >= num_reqs - num_tokens % num_reqs) for i in range(num_reqs)]

    def profile_run(self) -> None:
        """The worker's start-up profile run (``profile_run`` -> ``_dummy_run(max_num_tokens)``): its dummy
        LoRA mapping over every token row, then every adapter removed. Its forward is left out (a case's own
        ``dummy_run`` op forwards): it only programs what every later step finds in the buffers."""
        c = self.c
        if self.found["api"].protocol in dummy.OWN:
            dummy.startup(self)  # 0.15 - 0.23: the V2 runner's own start-up (dummy.py)
            return
        per = np.array(self.split(c["max_num_batched_tokens"], min(c["max_num_batched_tokens"], c["max_num_seqs"])),
                       dtype=np.int32)
        with self.runner.maybe_dummy_run_with_lora(self.cfg.lora_config, per, None, remove_lora=True,
                                                   num_active_loras=c["max_loras"]):
            pass

    def dummy_run(self, op) -> None:
        """A runtime dummy run (``execute_dummy_batch`` -> ``_dummy_run``): dummy adapters ids 1..max_loras (zero
        weights, or a real adapter holding that id: vLLM keeps it), then every adapter removed. Its outputs
        are discarded by vLLM, so they are not compared; the memory oracles watch it, and what it leaves
        behind meets the next steps."""
        n, reqs = op["num_tokens"], min(op["reqs"], op["num_tokens"])
        per = self.split(n, reqs)
        rows = [(sum(per[:i + 1]) - 1, 0) for i in range(reqs)]
        if self.found["api"].protocol in dummy.OWN:  # 0.15 - 0.23: no dummy adapters at run time (dummy.py)
            dummy.runtime(self, n + op.get("pad", 0), reqs)
            self.forward("dummy_run", [0] * n, op.get("pad", 0), op.get("seed", 0), rows, [], compare=False)
            return
        with self.runner.maybe_dummy_run_with_lora(self.cfg.lora_config, np.array(per, dtype=np.int32), None,
                                                   remove_lora=True, num_active_loras=self.c["max_loras"]):
            self.forward("dummy_run", [0] * n, op.get("pad", 0), op.get("seed", 0),
                         logits_rows=rows, prompt_rows=[],
                         compare=False)

    # -- real steps -------------------------------------------------------------------------------
    def _finish(self, rid: str) -> None:
        if rid in self.live:
            index, _ = self.live.pop(rid)
            self.free.append(index)
            self.lora_state.remove_request(rid)
            if self.prompts:
                self.prompts.remove(rid)

    def _new(self, r: dict) -> None:
        if not self.free:
            raise InvalidCase(f"step: request {r['id']!r} is one more than max_num_seqs={self.c['max_num_seqs']}.")
        index = self.free.pop()
        self.live[r["id"]] = (index, r["lora"])
        self.lora_state.add_request(r["id"], index, self.lora_request_of(r))
        if self.prompts:
            self.prompts.add(r, index)

    def _order(self, reqs: list[dict]) -> list[dict]:
        sort = self.found.get("sort_batch_req_ids")
        if sort is None:
            return reqs
        by_id = {r["id"]: r for r in reqs}
        args = {"num_tokens_per_req": {r["id"]: r["tokens"] for r in reqs},
                "draft_tokens": {r["id"]: [0] * r["drafts"] for r in reqs if r.get("drafts")},
                "decode_query_len": 1 + self.c["num_speculative_tokens"]}
        # by signature: (num_tokens_per_req, decode_query_len) in 0.26 - 0.27, + draft_tokens from 0.28
        names = inspect.signature(sort).parameters
        return [by_id[i] for i in sort(*(v for k, v in args.items() if k in names))]

    def step(self, op) -> None:
        for rid in op.get("finish", []):
            self._finish(rid)
        new = {r["id"] for r in op["reqs"] if r["id"] not in self.live}
        for r in op["reqs"]:
            if r["id"] in new:
                self._new(r)
        reqs = self._order(op["reqs"])
        ids = [r["id"] for r in reqs]
        idx = np.array([self.live[i][0] for i in ids], dtype=np.int32)
        tokens = np.array([r["tokens"] for r in reqs], dtype=np.int32)
        logits = np.array([1 + r.get("drafts", 0) for r in reqs], dtype=np.int32)
        args = [ids, idx, tokens] + ([logits] if self.found["make_lora_inputs_takes_num_logits"] else [])
        prompt, token, requests = self.lora_state.make_lora_inputs(*args)
        order = [self.live[i][1] for i in ids]
        self.activate((prompt, token, requests), order)
        rows = [a for a, n in zip(order, tokens) for _ in range(int(n))]
        ends = np.cumsum(tokens)
        logits_rows = [(int(e) - k, a) for e, n, a in zip(ends, logits, order) for k in range(int(n), 0, -1)]
        # prompt logprobs: vLLM's PromptLogprobsWorker after the forward, on its hidden states (prompt_logprobs.py)
        prompt_rows = functools.partial(self.prompts.run, ids=ids, idx=idx, tokens=tokens, adapters=order) \
            if self.prompts else []
        self.forward_step(op, reqs, new, rows, logits_rows, prompt_rows)
        if self.prompts:
            self.prompts.advance(idx, tokens)

    def activate(self, inputs: tuple, order: list[int]) -> None:
        """The runner's ``_set_active_loras(*lora_inputs)``; ``order``: the batch's adapters, in batch order."""
        prompt, token, requests = inputs
        self.runner._set_active_loras(prompt, token, _Requests(requests, order))

    def forward_step(self, op, reqs: list[dict], new: set[str], rows, logits_rows, prompt_rows) -> None:
        """The step's forward, on ``pad`` rows of graph padding as the case draws them (with CUDA graphs the
        dispatch's: v2_graphs.py)."""
        self.forward("step", rows, op.get("pad", 0), op.get("seed", 0), logits_rows, prompt_rows)

    # -- the forward and its reference ------------------------------------------------------------
    def module(self, name: str):
        return self.model.get_submodule(model.path(name))

    def forward(self, label: str, rows: list[int], pad: int, seed: int, logits_rows, prompt_rows,
                compare: bool = True) -> None:
        """Each drawn layer on the scheduled rows plus ``pad`` (a graph's padding: vLLM discards those rows),
        then the logits processor on the sampled rows and, through vLLM's prompt-logprobs worker, on the prompt rows
        (``prompt_rows``: ``Prompts.run`` bound to the step, or nothing)."""
        self.compare = compare
        g = torch.Generator().manual_seed(seed)
        n = len(rows) + pad
        hidden = torch.randn(n, model.dims(self.c)["hidden"], generator=g).to(self.device, self.dtype)
        for name in self.c["layers"]:
            if name == "lm_head":
                if logits_rows:
                    self.logits(f"{label}.logits", hidden, logits_rows)
                if prompt_rows:
                    prompt_rows(label, hidden)
            elif name == moe.LAYER:
                self.experts(f"{label}.{name}", rows, g)
            elif name == "embed_tokens":
                ids = torch.randint(0, self.c["vocab"], (n,), generator=g).to(self.device)
                self.embedding(f"{label}.embed_tokens", ids, rows)
            else:
                x = torch.randn(n, model.input_size(self.c, name), generator=g).to(self.device, self.dtype)
                self.linear(f"{label}.{name}", name, x, rows)

    def _check(self, label: str, out: torch.Tensor, base: torch.Tensor, delta: torch.Tensor, rows: list[int]):
        """Rows with an adapter against base + their float64 delta; base-model rows against the base output
        exactly (float32's tolerance on float16 values: equal)."""
        if not self.compare:
            self.ctx.output(label, out)
            return
        out, base = out[:len(rows)].detach().cpu(), base[:len(rows)].detach().cpu()
        lora = [m for m, a in enumerate(rows) if a]
        plain = [m for m, a in enumerate(rows) if not a]
        if lora:
            self.ctx.compare(f"{label}.adapter_rows", out[lora], base[lora].double() + delta[lora], self.dtype)
        if plain:
            self.ctx.compare(f"{label}.base_rows", out[plain], base[plain].double(), torch.float32)

    def _delta(self, rows: list[int], fn) -> torch.Tensor:
        return torch.cat([fn(a, m) for m, a in enumerate(rows)]) if rows else torch.zeros(0, 0, dtype=torch.float64)

    def linear(self, label: str, name: str, x: torch.Tensor, rows: list[int]) -> None:
        layer = self.module(name)
        out = layer(x)
        out = out[0] if isinstance(out, tuple) else out
        base = layer.base_layer(x) if hasattr(layer, "base_layer") else layer(x)
        base = base[0] if isinstance(base, tuple) else base
        xc = x.detach().cpu()
        self._check(label, out, base, self._delta(rows, lambda a, m: self.deltas.linear(name, a, xc[m:m + 1])), rows)

    def embedding(self, label: str, ids: torch.Tensor, rows: list[int]) -> None:
        layer = self.module("embed_tokens")
        out = layer(ids)
        base = layer.base_layer(ids) if hasattr(layer, "base_layer") else out
        ic = ids.cpu()
        self._check(label, out, base, self._delta(rows, lambda a, m: self.deltas.embedding(a, ic[m:m + 1])), rows)

    def experts(self, label: str, rows: list[int], g: torch.Generator) -> None:
        """The MoE block (moe.py) on the mapped rows (its LoRA kernel reads each row's slot; padding rows' entries
        are what an earlier batch left, and vLLM discards those rows), where vLLM takes its naive block
        assignment for the batch (else the align ops of ``vllm._C``: the layer is not run), and not in a graph
        replay (the MoE LoRA's no-LoRA check is a host decision a graph would freeze too). Base-model rows
        against vLLM's own experts unwrapped (the twin), exactly; an adapter's rows against the float64 block
        with that adapter's expert weights."""
        x = (moe.INPUT_SCALE * torch.randn(len(rows), model.dims(self.c)["hidden"], generator=g)).to(self.device,
                                                                                                 self.dtype)
        if not rows or not moe.naive(self.c, len(rows)) or label.startswith("replay"):
            return
        block = self.model.get_submodule(moe.BLOCK)
        gate = getattr(block.gate, "base_layer", block.gate)
        logits, _ = gate(x)
        out = moe.run(block.experts, x, logits, self.cfg)
        base = moe.run(self.moe_twin, x, logits, self.cfg)
        w13, w2 = moe.expert_base(self.moe_twin)
        k = self.c["moe"]["top_k"]

        def delta(a: int, m: int) -> torch.Tensor:
            lora, s = self.deltas.experts(a)
            if lora is None:
                return torch.zeros(1, w2.size(1), dtype=torch.float64)
            full = moe.reference(x[m:m + 1], logits[m:m + 1], k, w13, w2, lora, s)
            return full - base[m:m + 1].detach().cpu().double()
        self._check(label, out, base, self._delta(rows, delta), rows)

    def logits(self, label: str, hidden: torch.Tensor, picked: list[tuple[int, int]]) -> None:
        self.logits_of(label, hidden[[m for m, _ in picked]].contiguous(), [a for _, a in picked])

    def logits_of(self, label: str, h: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """vLLM's ``compute_logits`` on ``h`` (row m is a row of adapter ``rows[m]``, 0: none), checked; its output."""
        out = self.model.compute_logits(h)
        proc = self.model.logits_processor
        base_proc = getattr(proc, "base_layer", proc)
        base = base_proc(self.model.lm_head, h)
        hc = h.detach().cpu()
        self._check(label, out, base, self._delta(rows, lambda a, m: self.deltas.linear("lm_head", a, hc[m:m + 1])),
                    rows)
        return out


def run(case, ctx, found: dict) -> None:
    from vllm.config import set_current_vllm_config

    from . import front
    from .v1_runner import V1Session
    from .v2_graphs import V2GraphSession, graphs_drawn
    with faults.planted(case.faults, found):
        cls = V2GraphSession if graphs_drawn(case.config) else Session
        s = (V1Session if case.config.get("runner") == "v1" else cls)(case, ctx, found)
        s = front.wrap(s, ctx)  # the API server's serving layer and the scheduler's prefix cache, where drawn
        with set_current_vllm_config(s.cfg):
            for i, op in enumerate(case.ops):
                with ctx.op(i, op):
                    getattr(s, op["op"])(op)
