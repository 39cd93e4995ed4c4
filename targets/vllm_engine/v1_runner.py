"""The V1 model runner's LoRA inputs (``gpu_model_runner.py``, vLLM up to 0.33), as shipped, for ``vllm_engine``.

A case with ``"runner": "v1"`` runs its steps the way ``GPUModelRunner`` runs them, with vLLM's own objects:

* the persistent batch: vLLM's ``InputBatch`` (``v1/worker/gpu_input_batch.py``), made as ``GPUModelRunner.__init__``
  makes it (vLLM's ``build_logitsprocs``; one KV-cache group of placeholder blocks), on the CPU with ``device=cpu``;
  pinned memory is off as for the whole target (``vllm_env.unpin_host_memory``: vLLM's ``PIN_MEMORY``, which the
  InputBatch reads by module, as vLLM's ``CPUModelRunner`` runs it). Each step updates it as ``_update_states`` does:
  finished requests ``remove_request``-ed, live requests the step does not schedule removed too (their cached
  ``CachedRequestState`` kept: they come back as resumed requests), new and resumed ones ``add_request``-ed into
  the lowest free index, ``condense()``, the attention backend's reorder when the case draws a
  ``reorder_threshold`` (vLLM's ``reorder_batch_to_split_decodes_and_prefills``: ``swap_states``), then
  ``refresh_metadata()``;
* the LoRA inputs: the mixin's own ``set_active_loras(input_batch, num_scheduled_tokens, num_sampled_tokens)``
  (``InputBatch.make_lora_inputs`` -> ``_set_active_loras``), with the arrays ``_prepare_inputs`` makes (in the
  batch's order; 1 + drafts sampled rows per request under speculative decoding);
* the graph: vLLM's ``CudagraphDispatcher`` (``v1/cudagraph_dispatcher.py``) with the case's ``cudagraph_mode``,
  capture sizes and ``cudagraph_specialize_lora``, its keys initialized as ``initialize_cudagraph_keys`` does, each
  key captured after the worker's profile run as ``capture_model`` captures it (``_dummy_run(desc.num_tokens,
  uniform_decode=desc.uniform, remove_lora=False, num_active_loras=desc.num_active_loras)`` ->
  ``maybe_dummy_run_with_lora``; then ``maybe_remove_all_loras``), and each step dispatched as
  ``_determine_batch_execution_and_padding`` dispatches it (``num_active_loras = len(lora_id_to_lora_request)``,
  ``_is_uniform_decode``). A step that gets a graph replays it: the layers run on the graph's padded rows with the
  host decisions its capture froze (the no-LoRA flag, the kernels' grid z: ``vllm_lora``'s ``api.frozen``); the
  logits processor runs outside the graph, as vLLM runs it.

Re-stated, each a few lines: the dummy-run request split (``_dummy_run``'s), the dispatcher's
``uniform_decode_query_len`` and the capture sizes (set on vLLM's ``CompilationConfig``: vLLM's CPU platform turns
graphs off, and a draft model is not built), the logits rows (the last 1 + drafts rows of each request: the
runner's ``_calc_spec_decode_metadata`` needs its GPU input buffers), and the warm-up runs before each capture
(the same mapping as the capture, left out).

Prompt logprobs: vLLM's own ``GPUModelRunner._get_prompt_logprobs_dict`` after each step's forward, as
``_bookkeeping_sync`` calls it (v1_prompt_logprobs.py).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from fuzzrunner.errors import InvalidCase, UnsupportedCase

from . import v1_prompt_logprobs
from .runner import Session

BLOCK = 16        # the placeholder KV-cache block size (CacheConfig.DEFAULT_BLOCK_SIZE)
MAX_MODEL_LEN = 64  # vllm_env.configs'


MISSING: list[str] = []  # why the last find() found no V1 runner (the target's description says it)


def find() -> SimpleNamespace | None:
    """vLLM's V1-runner pieces, or None where the release has no V1 runner (0.34 and later) or it does not import
    here (MISSING says which: a V1 runner that fails to import is not the same as none)."""
    MISSING.clear()
    try:
        from vllm.config import CUDAGraphMode
        from vllm.sampling_params import SamplingParams
        from vllm.v1.attention.backends.utils import reorder_batch_to_split_decodes_and_prefills
        from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
        from vllm.v1.sample.logits_processor import build_logitsprocs
        from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError as e:
        try:
            present = importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") is not None
        except ImportError:
            present = False
        MISSING.append(f"the V1 runner does not import here: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                       if present else "this vLLM tree has no vllm/v1/worker/gpu_model_runner.py (removed in 0.34)")
        return None
    return SimpleNamespace(InputBatch=InputBatch, CachedRequestState=CachedRequestState,
                           build_logitsprocs=build_logitsprocs, SamplingParams=SamplingParams,
                           CudagraphDispatcher=CudagraphDispatcher, CUDAGraphMode=CUDAGraphMode,
                           reorder=reorder_batch_to_split_decodes_and_prefills,
                           is_uniform_decode=GPUModelRunner._is_uniform_decode,
                           prompt_logprobs=v1_prompt_logprobs.find(GPUModelRunner),
                           dummy_batch=dummy_batch(GPUModelRunner))


def dummy_batch(runner_class) -> SimpleNamespace:
    """The V1 runner's runtime dummy batch as the release runs it: ``Worker.execute_dummy_batch`` (read from
    ``gpu_worker.py``'s source: the module imports GPU-only code) calls ``_dummy_run(1, uniform_decode=True)`` up to
    0.18, ``_dummy_run(uniform_decode_query_len, uniform_decode=True)`` from 0.19 (``uniform``), with no LoRA argument
    of its own, so ``_dummy_run`` hands the mixin's ``maybe_dummy_run_with_lora`` its defaults (``lora``, read from its
    signature: ``remove_lora=True, num_active_loras=0`` on 0.16 - 0.33; ``activate_lora=False`` before)."""
    origin = importlib.util.find_spec("vllm.v1.worker.gpu_worker").origin
    text = Path(origin).read_text() if origin else ""
    body = text.split("def execute_dummy_batch", 1)[-1].split("\n    def ", 1)[0] if text else ""
    params = inspect.signature(runner_class._dummy_run).parameters
    lora = {n: params[n].default for n in ("remove_lora", "num_active_loras", "activate_lora") if n in params}
    return SimpleNamespace(uniform="uniform_decode_query_len" in body, lora=lora,
                           passes_lora="lora" in body)  # a release that passes LoRA arguments: not read yet


def split(num_tokens: int, max_reqs: int, uniform_query_len: int | None) -> np.ndarray:
    """``GPUModelRunner._dummy_run``'s requests: ``uniform_query_len`` tokens each (a uniform decode batch), else
    ``min(num_tokens, max_reqs)`` requests of ``num_tokens // num_reqs``, the remainder on the last."""
    if uniform_query_len:
        reqs = min(max_reqs, -(-num_tokens // uniform_query_len))
        out = [uniform_query_len] * reqs
        if num_tokens % uniform_query_len:
            out[-1] = num_tokens % uniform_query_len
    else:
        reqs = min(num_tokens, max_reqs)
        out = [num_tokens // reqs] * reqs
        out[-1] += num_tokens % reqs
    return np.array(out, dtype=np.int32)


def input_batch_kwargs(cls, *, max_num_reqs: int, max_num_batched_tokens: int, device, vocab_size: int,
                       num_spec_tokens: int, logitsprocs) -> dict:
    """The keywords ``GPUModelRunner.__init__`` makes its ``InputBatch`` with, in the shape of ``cls.__init__`` (one
    KV-cache group of placeholder blocks; no pinned memory: the target's host memory is never pinned). The shapes,
    read from the releases' ``gpu_input_batch.py``:

    * 0.12 - 0.14: ``pin_memory``, ``kernel_block_sizes``, ``is_spec_decode`` + ``num_speculative_tokens``;
    * 0.17: ``pin_memory``, ``kernel_block_sizes``, ``max_num_blocks_per_req`` (optional), ``is_spec_decode``;
    * 0.21 - 0.22: ``pin_memory``, ``kernel_block_sizes``, ``num_spec_tokens``;
    * 0.24: ``kernel_block_sizes`` (``pin_memory`` gone: the batch reads ``PIN_MEMORY``);
    * 0.28 - 0.31: ``kernel_block_sizes``, ``max_num_blocks_per_req`` required;
    * 0.33: ``kernel_block_sizes`` gone.

    A required parameter none of these names (a release not read yet) is refused in one line."""
    params = inspect.signature(cls.__init__).parameters
    offered = {"max_num_reqs": max_num_reqs, "max_model_len": MAX_MODEL_LEN,
               "max_num_batched_tokens": max_num_batched_tokens, "device": device, "pin_memory": False,
               "vocab_size": vocab_size, "block_sizes": [BLOCK], "kernel_block_sizes": [BLOCK],
               "max_num_blocks_per_req": [-(-MAX_MODEL_LEN // BLOCK)], "logitsprocs": logitsprocs,
               "logitsprocs_need_output_token_ids": False, "is_pooling_model": False,
               "num_spec_tokens": num_spec_tokens, "is_spec_decode": num_spec_tokens > 0,
               "num_speculative_tokens": num_spec_tokens}
    unknown = [n for n, p in params.items() if n != "self" and n not in offered and p.default is p.empty
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if unknown:
        raise UnsupportedCase(f"runner 'v1': this vLLM's InputBatch requires {', '.join(unknown)}; the target fills "
                              f"only what GPUModelRunner passes in 0.12 - 0.33 (v1_runner.input_batch_kwargs): use "
                              f"runner 'v2'.")
    return {n: v for n, v in offered.items() if n in params}


def round_sizes_for_spec_decode(cc, uniform_decode_query_len: int, tensor_parallel_size: int) -> None:
    """``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode`` as the V1 runner calls it: up to 0.31 with the
    tensor-parallel size too (sequence parallelism's rounding), from 0.33 without."""
    takes_tp = "tensor_parallel_size" in inspect.signature(cc.adjust_cudagraph_sizes_for_spec_decode).parameters
    cc.adjust_cudagraph_sizes_for_spec_decode(uniform_decode_query_len, *([tensor_parallel_size] if takes_tp else []))


class V1Session(Session):
    """``Session`` with the V1 runner's persistent batch, LoRA inputs and graph dispatch (see the module's doc)."""

    def __init__(self, case, ctx, found: dict):
        v1 = found.get("v1")
        if v1 is None:
            raise UnsupportedCase(f"runner 'v1': vLLM {found['api'].version} has no V1 model runner "
                                  f"(vllm/v1/worker/gpu_input_batch.py); use runner 'v2'.")
        self.v1 = v1
        super().__init__(case, ctx, found)  # the model, the manager, the V1 profile run (profile_run below)
        c = self.c
        self.q = 1 + c["num_speculative_tokens"]  # uniform_decode_query_len
        import torch
        self.batch = v1.InputBatch(**input_batch_kwargs(
            v1.InputBatch, max_num_reqs=c["max_num_seqs"], max_num_batched_tokens=c["max_num_batched_tokens"],
            device=self.device, vocab_size=c["vocab"], num_spec_tokens=c["num_speculative_tokens"],
            logitsprocs=v1.build_logitsprocs(self.cfg, self.device, False, False, ())))
        self.cached: dict = {}  # request id -> CachedRequestState (GPUModelRunner.requests)
        # the V1 runner's own prompt logprobs (v1_prompt_logprobs.py) where lm_head runs, not the V2 runner's worker
        self.prompts = v1_prompt_logprobs.V1Prompts(self, v1.prompt_logprobs) if "lm_head" in c["layers"] else None
        self._torch = torch
        self.meta = self._token_meta()
        self.dispatcher = self._dispatcher()
        self.graphs: dict = {}
        self.capture_model()

    # -- start-up -----------------------------------------------------------------------------------
    def profile_run(self) -> None:
        """``profile_run`` -> ``_dummy_run(max_num_tokens, is_profile=True)``: no adapter (num_active_loras=0),
        every dummy adapter removed after (its forward left out, as the V2 session's)."""
        c = self.c
        per = split(c["max_num_batched_tokens"], c["max_num_seqs"], None)
        with self.runner.maybe_dummy_run_with_lora(self.cfg.lora_config, per, np.ones_like(per), remove_lora=True,
                                                   num_active_loras=0):
            pass

    def _token_meta(self):
        for module in self.model.modules():
            wrapper = getattr(module, "punica_wrapper", None)
            if wrapper is not None:
                return wrapper.token_mapping_meta
        raise InvalidCase("runner 'v1': no LoRA layer was made (target_modules wraps none of the layers).")

    def _dispatcher(self):
        v1, c = self.v1, self.c
        mode = v1.CUDAGraphMode[c.get("cudagraph_mode", "NONE")]
        cc = self.cfg.compilation_config
        cc.cudagraph_specialize_lora = bool(c.get("cudagraph_specialize_lora", True))
        sizes = sorted(c.get("cudagraph_capture_sizes") or [1])
        cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = sizes, sizes[-1]
        if mode.decode_mode() == v1.CUDAGraphMode.FULL and self.q > 1:  # CompilationConfig's V1-runner rounding
            round_sizes_for_spec_decode(cc, self.q, self.cfg.parallel_config.tensor_parallel_size)
        d = v1.CudagraphDispatcher(self.cfg)
        d.uniform_decode_query_len = self.q  # vLLM reads it from the speculative config (no draft model here)
        d.initialize_cudagraph_keys(mode, self.q)
        return d

    def capture_model(self) -> None:
        """``capture_model``: each key of ``get_capture_descs()`` captured through ``_dummy_run`` (remove_lora=False),
        the host decisions of its LoRA launches recorded (what the graph freezes), then every adapter removed."""
        lora = self.cfg.lora_config
        for mode, descs in self.dispatcher.get_capture_descs():
            for desc in descs:
                per = split(desc.num_tokens, self.c["max_num_seqs"], self.q if desc.uniform else None)
                with self.runner.maybe_dummy_run_with_lora(lora, per, np.ones_like(per), remove_lora=False,
                                                           num_active_loras=desc.num_active_loras):
                    self.graphs[(mode, desc)] = self._frozen()
        self.runner.maybe_remove_all_loras(lora)

    def _frozen(self) -> tuple[bool, int | None]:
        """The no-LoRA flag and the grid z the kernels would launch with now (``api.grid_z``: a CPU tensor from 0.17,
        0.16's Python int, ``max_loras + 1`` computed in ``meta_args`` without ``specialize_active_lora``)."""
        m = self.meta
        return bool(m.no_lora_flag_cpu.item()), self.found["api"].grid_z(m, 1, self.c["specialize_active_lora"])

    # -- steps ------------------------------------------------------------------------------------------
    def _cached(self, r: dict):
        state = self.cached.get(r["id"])
        if state is None:
            prompt, params = (self.prompts.add(r) if self.prompts else
                              ([0] * int(r.get("prompt", r["tokens"])), self.v1.SamplingParams()))
            state = self.v1.CachedRequestState(
                req_id=r["id"], prompt_token_ids=prompt, mm_features=[],
                sampling_params=params, generator=None, block_ids=([],), num_computed_tokens=0,
                output_token_ids=[], lora_request=self.lora_request_of(r))
            self.cached[r["id"]] = state
            self.live[r["id"]] = (-1, r["lora"])
        return state

    def update_states(self, op) -> dict[str, int]:
        """``_update_states``: the persistent batch after the scheduler's output (see the module's doc)."""
        b = self.batch
        for rid in op.get("finish", []):
            self.cached.pop(rid, None)
            self.live.pop(rid, None)
            b.remove_request(rid)
            if self.prompts:
                self.prompts.remove(rid)
        tokens = {r["id"]: r["tokens"] for r in op["reqs"]}
        for rid in list(b.req_id_to_index):
            if rid not in tokens:
                b.remove_request(rid)  # unscheduled: out of the batch, its state kept
        to_add = []
        for r in op["reqs"]:
            state = self._cached(r)
            if r["id"] in b.req_id_to_index:
                b.num_computed_tokens_cpu[b.req_id_to_index[r["id"]]] = state.num_computed_tokens
            else:
                to_add.append(state)
        if len(b.req_id_to_index) + len(to_add) > self.c["max_num_seqs"]:
            raise InvalidCase(f"step: {len(b.req_id_to_index) + len(to_add)} requests in the batch, more than "
                              f"max_num_seqs={self.c['max_num_seqs']}.")
        for state in to_add:
            b.add_request(state)
        b.condense()
        if self.c.get("reorder_threshold"):
            self.v1.reorder(b, SimpleNamespace(num_scheduled_tokens=tokens),
                            decode_threshold=self.c["reorder_threshold"])
        b.refresh_metadata()
        return tokens

    def step(self, op) -> None:
        tokens = self.update_states(op)
        drafts = {r["id"]: r.get("drafts", 0) for r in op["reqs"]}
        ids = list(self.batch.req_ids)
        sched = np.array([tokens[i] for i in ids], dtype=np.int32)
        sampled = (np.array([1 + drafts[i] for i in ids], dtype=np.int32) if self.c["num_speculative_tokens"]
                   else np.ones(len(ids), dtype=np.int32))
        self.runner.set_active_loras(self.batch, sched, sampled)
        n = int(sched.sum())
        uniform = self.v1.is_uniform_decode(max_num_scheduled_tokens=int(sched.max()),
                                            uniform_decode_query_len=self.q, num_tokens=n, num_reqs=len(ids))
        k = len(self.batch.lora_id_to_lora_request)
        mode, desc = self.dispatcher.dispatch(num_tokens=n, uniform_decode=uniform, has_lora=k > 0,
                                              num_active_loras=k)
        order = [self.live[i][1] for i in ids]  # each request's own adapter: the case's, never vLLM's
        rows = [a for a, t in zip(order, sched) for _ in range(int(t))]
        ends = np.cumsum(sched)
        logits_rows = [(int(e) - j, a) for e, s, a in zip(ends, sampled, order) for j in range(int(s), 0, -1)]
        # prompt logprobs: vLLM's _get_prompt_logprobs_dict after the forward, outside any graph (v1_prompt_logprobs.py)
        prompts = functools.partial(self.prompts.run, ids=ids, sched=sched, adapters=order) if self.prompts else []
        if mode == self.v1.CUDAGraphMode.NONE:
            self.forward("step", rows, 0, op.get("seed", 0), logits_rows, prompts)
        else:
            flag, z = self.graphs[(mode, desc)]
            with self.found["api"].frozen(self.meta, flag, z, self.c["specialize_active_lora"]):
                self.forward("replay", rows, desc.num_tokens - n, op.get("seed", 0), logits_rows, prompts)
        if self.prompts:
            self.prompts.step_done(ids, sched)
        for i in ids:
            self.cached[i].num_computed_tokens += tokens[i]

    def _check(self, label: str, out, base, delta, rows: list[int]) -> None:
        """``Session._check``, and in a graph replay the padding rows too: their mapping entries are no request's,
        so they must get no adapter (the base output exactly: ``<label>.pad_rows``). vLLM discards their outputs;
        an adapter there means a kernel read a slot index the step never wrote (stale metadata)."""
        super()._check(label, out, base, delta, rows)
        if self.compare and label.startswith("replay.") and out.shape[0] > len(rows):
            self.ctx.compare(f"{label}.pad_rows", out[len(rows):].detach().cpu(),
                             base[len(rows):].detach().cpu().double(), self._torch.float32)

    def dummy_run(self, op) -> None:
        """``execute_dummy_batch`` -> ``_dummy_run(n, uniform_decode=True)`` as the release runs it (``dummy_batch``:
        n = ``uniform_decode_query_len`` from 0.19, 1 before; the mixin's ``maybe_dummy_run_with_lora`` with
        ``_dummy_run``'s LoRA defaults: on 0.16 - 0.33 its dummy adapters registered, none mapped, every adapter
        removed after). Its outputs are discarded by vLLM: not compared; E1 would show as the V2 runner's does."""
        how = self.v1.dummy_batch
        if how.passes_lora:
            raise UnsupportedCase("dummy_run: this vLLM's execute_dummy_batch passes LoRA arguments to _dummy_run, "
                                  "which v1_runner.dummy_batch does not read yet; use runner 'v2'.")
        n = self.q if how.uniform else 1
        per = split(n, self.c["max_num_seqs"], self.q)
        takes = inspect.signature(self.runner.maybe_dummy_run_with_lora).parameters
        with self.runner.maybe_dummy_run_with_lora(self.cfg.lora_config, per, np.ones_like(per),
                                                   **{k: v for k, v in how.lora.items() if k in takes}):
            self.forward("dummy_run", [0] * n, 0, op.get("seed", 0), logits_rows=[(n - 1, 0)],
                         prompt_rows=[], compare=False)
