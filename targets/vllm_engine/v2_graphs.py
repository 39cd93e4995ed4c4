"""The V2 model runner's CUDA graphs with LoRA (``vllm/v1/worker/gpu/``), as shipped, for ``vllm_engine``, in the
shape each release has them (``find``): with LoRA capture cases (0.24 and later, #35536), and before them (the
0.17, 0.21 and 0.22 trees here: graphs keyed on the batch's shape alone, captured under ``maybe_setup_dummy_loras``
with no LoRA mapping of their own, so each freezes what the start-up left in the kernel metadata).

A V2-runner case with a ``cudagraph_mode`` other than NONE starts and steps the way the V2 ``GPUModelRunner`` does
with CUDA graphs, with vLLM's own objects and functions:

* the graph manager: vLLM's ``ModelCudaGraphManager`` (``cudagraph_utils.py``), made as ``initialize_kv_cache``
  makes it, with ``lora_capture_cases = get_lora_capture_cases(lora_config, compilation_config)`` (``lora_utils.py``)
  and the case's graph mode, capture sizes (``cudagraph_capture_sizes``, resolved by vLLM's own
  ``VllmConfig._set_cudagraph_sizes``) and ``cudagraph_specialize_lora``: its descriptors (``_init_candidates``), its
  LoRA dispatch map (``_build_lora_dispatch_map``) are vLLM's;
* the capture, as ``capture_model`` runs it: ``with maybe_setup_dummy_loras(lora_config)`` (the mixin's), then for
  each descriptor of ``_capture_descs`` (PIECEWISE first, then FULL, as ``CudaGraphManager.capture`` walks them) the
  hook ``create_lora_capture_hook(lora_config, runner)`` made by vLLM, called as ``create_forward_fn`` calls it
  (``hook(desc.num_active_loras, desc.num_reqs or min(num_tokens, max_num_reqs), num_tokens)``); what the graph
  freezes of its LoRA launches, the no-LoRA flag and the kernels' grid z, is read from vLLM's ``LoRAKernelMeta``
  after the hook (``vllm_lora``'s ``api.frozen`` plays it back). Before 0.24 there is no hook: every graph
  (``_capture_descs``; 0.17: ``cudagraph_sizes`` then ``uniform_decode_cudagraph_sizes``) freezes the metadata the
  start-up left (dummy.py: 0.22 - 0.23's forced ``num_active_loras_cpu = 1``; 0.15 - 0.21's never-prepared 0);
* each step's graph, as ``execute_model`` chooses it: ``get_num_active_loras_for_dispatch(lora_config, lora_state,
  req_ids, dummy_run=False)`` (``lora_utils.py``), then ``dispatch_cg_and_sync_dp`` (``dp_utils.py``; one
  data-parallel rank: ``CudaGraphManager.dispatch`` -> ``_resolve_effective_loras``); before 0.24 the same without
  the LoRA count, and on 0.17 ``get_cudagraph_runtime_mode`` then ``get_cudagraph_and_dp_padding``. Where a
  release's PIECEWISE capture keys its graphs without the LoRA (0.21: ``BatchDescriptor(num_tokens=num_tokens)``,
  while ``execute_model`` looks up ``has_lora=True``) no captured PIECEWISE graph is ever replayed (vLLM captures
  anew at run time, #42999's crash on a GPU): such a step runs eagerly only. A step given a graph runs
  twice: eagerly (``step.<layer>``, as with no graph) and as the replay (``replay.<layer>``: the layers on the
  graph's padded rows under the host decisions its capture froze); each against the float64 reference, so a
  replay that differs from the eager step is told apart from a wrong step. The logits processor runs outside the
  graph, as in vLLM (``compute_logits`` after the forward): in the eager run only.

Re-stated, and why: no CUDA graph exists on the CPU (``ModelCudaGraphManager.capture`` needs the model's input
buffers, attention metadata and ``torch.cuda.graph``), so the capture is the two lines of ``create_forward_fn`` that
program LoRA (the hook's call) and the host decisions are recorded instead of a graph; the hook runs once per
descriptor (vLLM runs it again for a FULL graph's second ``create_forward_fn``, with the same arguments: the same
mapping); the uniform decode count's prefill test (a request's first step is its prefill: ``gather_batch_req_state``
reads it from the runner's request states) and ``max_query_len`` (None for a batch with a prefill, as 0.31 and later
pass it; no varlen decode graphs are drawn, so it changes no choice); the graph mode as drawn (vLLM's
``resolve_cudagraph_mode_and_sizes`` would downgrade it by the attention backend's support: a backend with full
support assumed); the draft count of the case read by vLLM's config as ``num_speculative_tokens`` while the sizes and
the manager are made (vLLM reads it from a speculative config, which needs a draft model); the platform's graph pool
answered None while the manager is made (no graph is captured; 0.17's ``torch.cuda.graph_pool_handle`` too); on
0.17, each FULL graph's recorded decisions stand in its manager's ``graphs`` (what ``get_cudagraph_runtime_mode``
asks to replay rather than fall back to eager). Dummy runs stay eager (their outputs are not compared).
"""

from __future__ import annotations

import contextlib
import inspect
import re
from types import SimpleNamespace
from typing import NamedTuple
from unittest import mock

from fuzzrunner.errors import InvalidCase, UnsupportedCase

from .runner import Session
from .vllm_env import PlatformView


def find() -> SimpleNamespace | None:
    """vLLM's V2-runner graph pieces, in the shape the installed release has them (``shape``), or None (``MISSING``
    says why: a release without a V2 runner graph manager, or a tree where it does not import, e.g. a GPU machine's
    carried tree without a module the graph manager imports: the rest of the target runs without V2 graph cases).

    * ``lora_cases`` (0.24 and later, #35536): ``ModelCudaGraphManager(..., lora_capture_cases=)``, the capture hook
      ``create_lora_capture_hook`` per descriptor, ``dispatch_cg_and_sync_dp(..., num_active_loras=)``;
    * ``descriptors`` (0.18 - 0.23 trees here): ``ModelCudaGraphManager`` with ``BatchExecutionDescriptor`` and
      ``dispatch_cg_and_sync_dp`` (0.20 on; 0.18 - 0.19: the manager's own ``dispatch``, which ``execute_model`` calls
      and syncs across data-parallel ranks only when there are several: ``_manager_dispatch``), keyed on the batch's
      shape alone; ``capture_model`` captures every graph under ``maybe_setup_dummy_loras`` with no LoRA mapping of
      its own;
    * ``sizes`` (0.17 tree here): ``CudaGraphManager(vllm_config, use_aux_hidden_state_outputs, device)``, graphs
      keyed on the padded size (``get_cudagraph_runtime_mode``, ``get_cudagraph_and_dp_padding``), captured the
      same way."""
    try:
        from vllm.config import CUDAGraphMode
        from vllm.v1.worker.gpu import cudagraph_utils, dp_utils
    except Exception as e:  # noqa: BLE001 - ImportError, or what a carried tree's platform raises at import
        MISSING[:] = [f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"]
        return None
    try:
        from vllm.v1.worker.gpu import lora_utils
    except Exception:  # noqa: BLE001 - as above
        lora_utils = None
    hook = getattr(lora_utils, "create_lora_capture_hook", None)
    if hook is not None:
        shape = "lora_cases"
    elif hasattr(cudagraph_utils, "BatchExecutionDescriptor") and (
            hasattr(dp_utils, "dispatch_cg_and_sync_dp") or hasattr(cudagraph_utils.CudaGraphManager, "dispatch")):
        shape = "descriptors"
    elif hasattr(cudagraph_utils.CudaGraphManager, "get_cudagraph_runtime_mode"):
        shape = "sizes"
    else:
        MISSING[:] = [f"no V2 runner graph manager of a known shape in {cudagraph_utils.__name__}"]
        return None
    # Does a PIECEWISE graph's key (the BatchDescriptor its capture sets) name the LoRA, as execute_model's does
    # (has_lora=...)? 0.21's capture sets BatchDescriptor(num_tokens=num_tokens) alone: at run time vLLM's piecewise
    # wrapper looks up has_lora=True, misses and captures anew under the step's own mapping (on a GPU: "CUDA graphs
    # must be captured on a non-default stream", vllm-project/vllm#42999); read from the module's source, as
    # api.protocol reads the runner's.
    try:
        src = re.sub(r"\s+", "", inspect.getsource(cudagraph_utils))
    except (OSError, TypeError):
        src = ""
    keyed = bool(re.search(r"BatchDescriptor\([^)]*(has_lora|num_active_loras)=", src))
    try:  # the uniform decode count: 0.28 and later (its prefill argument named per release); 0.21 - 0.24 here
        from vllm.v1.worker.utils import get_uniform_decode_token_count as uniform
    except ImportError:
        uniform = getattr(cudagraph_utils, "get_uniform_token_count", None)
    return SimpleNamespace(
        shape=shape, CUDAGraphMode=CUDAGraphMode, module=cudagraph_utils, piecewise_keyed_on_lora=keyed,
        Manager=getattr(cudagraph_utils, "ModelCudaGraphManager", cudagraph_utils.CudaGraphManager),
        dispatch=getattr(dp_utils, "dispatch_cg_and_sync_dp", None) or (_manager_dispatch if shape == "descriptors"
                                                                         else None),
        dp_padding=getattr(dp_utils, "get_cudagraph_and_dp_padding", None),
        capture_hook=hook, capture_cases=getattr(lora_utils, "get_lora_capture_cases", None),
        active_loras=getattr(lora_utils, "get_num_active_loras_for_dispatch", None), uniform=uniform)


MISSING: list[str] = []  # why find() found no V2 graph pieces


def _manager_dispatch(manager, num_reqs: int, num_tokens: int, uniform_token_count, dp_size: int, dp_rank: int):
    """0.18 - 0.19's ``execute_model`` on one data-parallel rank, in ``dispatch_cg_and_sync_dp``'s form:
    ``cudagraph_manager.dispatch(num_reqs, num_toks, uniform_tok_count)`` (``sync_cudagraph_and_dp_padding`` runs
    only when ``dp_size > 1``)."""
    if dp_size != 1:
        raise ValueError(f"dp_size {dp_size}: the target drives one data-parallel rank (dp_size 1)")
    return manager.dispatch(num_reqs, num_tokens, uniform_token_count), None


class _NoGraphPool(PlatformView):
    """vLLM's platform for the manager's making only: no graph pool (no graph is captured here)."""

    @staticmethod
    def get_global_graph_pool() -> None:
        return None


class Graph(NamedTuple):
    """A graph of the ``sizes`` shape (vLLM keys it on its padded size and mode alone)."""
    cg_mode: object
    num_tokens: int


class V2GraphSession(Session):
    """``Session`` with the V2 runner's CUDA-graph capture and dispatch (see the module's doc)."""

    CAPTURES = True  # its capture_model holds capture_model's maybe_setup_dummy_loras (dummy.startup leaves it)

    def __init__(self, case, ctx, found: dict):
        g = found.get("v2_graphs")
        if g is None:
            raise UnsupportedCase(f"cudagraph_mode {case.config.get('cudagraph_mode')!r} in a V2-runner case: vLLM "
                                  f"{found['api'].version}'s V2 runner has no CUDA-graph manager that imports here "
                                  f"({MISSING[0] if MISSING else 'vllm/v1/worker/gpu/cudagraph_utils.py'}); use "
                                  f"cudagraph_mode 'NONE'.")
        self.g = g
        self.q = 1 + int(case.config.get("num_speculative_tokens", 0))
        super().__init__(case, ctx, found)  # the model, the manager, the start-up profile run
        self.meta = self._token_meta()
        self.manager = self._manager()
        self.graphs: dict = {}
        self.capture_model()

    def _token_meta(self):
        for module in self.model.modules():
            wrapper = getattr(module, "punica_wrapper", None)
            if wrapper is not None:
                return wrapper.token_mapping_meta
        raise InvalidCase("cudagraph_mode: no LoRA layer was made (target_modules wraps none of the layers).")

    @contextlib.contextmanager
    def _drafts(self):
        """vLLM's config reads the case's draft count (its speculative config's, which needs a draft model): through
        ``VllmConfig.num_speculative_tokens`` (0.24 on), or ``speculative_config.num_speculative_tokens`` itself
        (older shapes' ``_set_cudagraph_sizes`` and 0.17's manager)."""
        cls = type(self.cfg)
        with contextlib.ExitStack() as stack:
            if isinstance(getattr(cls, "num_speculative_tokens", None), property):
                stack.enter_context(mock.patch.object(cls, "num_speculative_tokens", property(lambda _: self.q - 1)))
            if self.g.shape != "lora_cases" and self.q > 1:
                saved = self.cfg.speculative_config
                object.__setattr__(self.cfg, "speculative_config", SimpleNamespace(num_speculative_tokens=self.q - 1))
                stack.callback(object.__setattr__, self.cfg, "speculative_config", saved)
            yield

    def _manager(self):
        g, c, cc = self.g, self.c, self.cfg.compilation_config
        mode = g.CUDAGraphMode[c["cudagraph_mode"]]
        cc.cudagraph_specialize_lora = bool(c.get("cudagraph_specialize_lora", True))
        cc.cudagraph_mode = mode
        sizes = c.get("cudagraph_capture_sizes")  # None: vLLM's default sizes
        cc.cudagraph_capture_sizes = None if sizes is None else sorted(sizes)
        cc.max_cudagraph_capture_size = None  # vLLM's _set_cudagraph_sizes sets it from the sizes
        kw: dict = {}
        if g.capture_cases is not None:
            kw["lora_capture_cases"] = g.capture_cases(self.cfg.lora_config, cc)
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._drafts())
            if hasattr(g.module, "current_platform"):  # the graph pool: the platform's (0.21 on), torch.cuda's (0.17)
                stack.enter_context(mock.patch.object(g.module, "current_platform",
                                                      _NoGraphPool(g.module.current_platform)))
            else:
                stack.enter_context(mock.patch("torch.cuda.graph_pool_handle", lambda: None))
            self.cfg._set_cudagraph_sizes()  # vLLM's resolution of the sizes, as for a server's --compilation-config
            if g.shape == "sizes":  # 0.17: the mode and draft count from the config
                return g.Manager(self.cfg, False, self.device)
            if "decode_query_lens" in inspect.signature(g.Manager.__init__).parameters:  # 0.34
                kw["decode_query_lens"] = self.cfg.get_decode_cudagraph_query_lens(self.q)
            else:
                kw["decode_query_len"] = self.q
            return g.Manager(self.cfg, self.device, mode, **kw)

    # -- start-up -----------------------------------------------------------------------------------
    def _descs(self) -> list:
        """The graphs ``capture`` captures, in its order: PIECEWISE then FULL (``descriptors``, ``lora_cases``);
        the mixed sizes then the uniform decode FULL sizes (``sizes``)."""
        m, modes = self.manager, self.g.CUDAGraphMode
        if self.g.shape != "sizes":
            return [d for mode in (modes.PIECEWISE, modes.FULL) for d in m._capture_descs.get(mode, [])]
        mixed = m.cudagraph_mode.mixed_mode()
        out = [Graph(mixed, n) for n in sorted(set(m.cudagraph_sizes.values()), reverse=True)] if mixed else []
        return out + [Graph(modes.FULL, n) for n in sorted(set(m.uniform_decode_cudagraph_sizes.values()),
                                                           reverse=True)]

    def capture_model(self) -> None:
        """``capture_model``'s LoRA path: the dummy adapters registered, then per graph (``lora_cases``) the capture
        hook's mapping, and the host decisions of its LoRA launches recorded (what the graph freezes); every adapter
        removed after. Before 0.24 nothing maps LoRA for a capture: each graph freezes what the start-up left."""
        lora, m = self.cfg.lora_config, self.manager
        hook = self.g.capture_hook(lora, self.runner) if self.g.capture_hook is not None else None
        with self.runner.maybe_setup_dummy_loras(lora):
            for desc in self._descs():
                if hook is not None:
                    hook(desc.num_active_loras, desc.num_reqs or min(desc.num_tokens, m.max_num_reqs),
                         desc.num_tokens)
                self.graphs[desc] = self._frozen()
                if self.g.shape == "sizes" and desc.cg_mode == self.g.CUDAGraphMode.FULL:
                    m.graphs[desc.num_tokens] = self.graphs[desc]  # captured: get_cudagraph_runtime_mode replays it
        m._graphs_captured = True

    def _frozen(self) -> tuple[bool, int]:
        meta = self.meta
        z = meta.num_active_loras_cpu if self.c["specialize_active_lora"] else meta.default_num_active_loras_cpu
        return bool(meta.no_lora_flag_cpu.item()), int(z.item())

    # -- steps ------------------------------------------------------------------------------------------
    def dispatch(self, reqs: list[dict], new: set[str]):
        """``execute_model``'s graph choice for a step (after its requests are added to the LoRA state)."""
        g = self.g
        tokens = [r["tokens"] for r in reqs]
        n, longest, prefill = sum(tokens), max(tokens), any(r["id"] in new for r in reqs)
        if g.shape == "sizes":  # 0.17: one data-parallel rank
            mode, size = self.manager.get_cudagraph_runtime_mode(num_reqs=len(reqs), num_tokens=n,
                                                                 max_query_len=longest)
            padded, _, synced = g.dp_padding(n, size, mode.value, 1, 0)
            return Graph(g.CUDAGraphMode(synced), padded), n
        uniform = None
        if g.uniform is not None:
            last = list(inspect.signature(g.uniform).parameters)[3:]  # has_prefill (0.28), decode_graph_eligible
            extra = {} if not last else {last[0]: prefill if last[0] == "has_prefill" else not prefill}
            uniform = g.uniform(len(reqs), n, longest, **extra)
        kw = {}
        if g.active_loras is not None:  # 0.24 on: the graph's LoRA case
            kw["num_active_loras"] = g.active_loras(self.cfg.lora_config, self.lora_state, [r["id"] for r in reqs],
                                                    False)
        if "max_query_len" in inspect.signature(g.dispatch).parameters:
            kw["max_query_len"] = None if prefill else longest
        desc, _ = g.dispatch(self.manager, len(reqs), n, uniform, 1, 0, **kw)
        return desc, n

    def forward_step(self, op, reqs: list[dict], new: set[str], rows, logits_rows, prompt_rows) -> None:
        desc, n = self.dispatch(reqs, new)
        seed = op.get("seed", 0)
        self.forward("step", rows, 0, seed, logits_rows, prompt_rows)  # eager (the graph's padding is the dispatch's)
        if desc.cg_mode == self.g.CUDAGraphMode.PIECEWISE and not self.g.piecewise_keyed_on_lora:
            return  # no captured graph is replayed: vLLM captures anew at this step (#42999, see find)
        if desc.cg_mode != self.g.CUDAGraphMode.NONE:
            flag, z = self.graphs[desc]
            with self.found["api"].frozen(self.meta, flag, z, self.c["specialize_active_lora"]):
                self.forward("replay", rows, desc.num_tokens - n, seed, [], [])

    def _check(self, label: str, out, base, delta, rows: list[int]) -> None:
        """``Session._check``, and in a replay the padding rows too: no request's, so no adapter (the base output
        exactly: ``<label>.pad_rows``); an adapter there is a kernel reading a slot index the step never wrote."""
        super()._check(label, out, base, delta, rows)
        if self.compare and label.startswith("replay.") and out.shape[0] > len(rows):
            import torch
            self.ctx.compare(f"{label}.pad_rows", out[len(rows):].detach().cpu(),
                             base[len(rows):].detach().cpu().double(), torch.float32)


def graphs_drawn(config: dict) -> bool:
    """A V2-runner case with CUDA graphs (``V2GraphSession``)."""
    return config.get("runner", "v2") == "v2" and config.get("cudagraph_mode", "NONE") != "NONE"


__all__ = ["V2GraphSession", "find", "graphs_drawn"]
