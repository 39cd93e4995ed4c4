"""The V2 model runner's CUDA graphs with LoRA (``vllm/v1/worker/gpu/``, vLLM 0.24 and later), as shipped, for
``vllm_engine``.

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
  after the hook (``vllm_lora``'s ``api.frozen`` plays it back);
* each step's graph, as ``execute_model`` chooses it: ``get_num_active_loras_for_dispatch(lora_config, lora_state,
  req_ids, dummy_run=False)`` (``lora_utils.py``), then ``dispatch_cg_and_sync_dp`` (``dp_utils.py``; one
  data-parallel rank: ``CudaGraphManager.dispatch`` -> ``_resolve_effective_loras``). A step given a graph runs
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
answered None while the manager is made (no graph is captured). Dummy runs stay eager (their outputs are not
compared).
"""

from __future__ import annotations

import contextlib
import inspect
from types import SimpleNamespace
from unittest import mock

from fuzzrunner.errors import InvalidCase

from .runner import Session
from .vllm_env import PlatformView


def find() -> SimpleNamespace | None:
    """vLLM's V2-runner graph pieces with LoRA capture cases (#35536: 0.24 and later), or None (``MISSING`` says
    why: a release without them, or a tree where they do not import, e.g. a GPU machine's carried tree without a
    module the graph manager imports: the rest of the target runs without V2 graph cases)."""
    try:
        from vllm.config import CUDAGraphMode
        from vllm.v1.worker.gpu import cudagraph_utils
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.lora_utils import (
            create_lora_capture_hook,
            get_lora_capture_cases,
            get_num_active_loras_for_dispatch,
        )
    except Exception as e:  # noqa: BLE001 - ImportError, or what a carried tree's platform raises at import
        MISSING[:] = [f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"]
        return None
    try:  # the uniform decode count: 0.28 and later (its prefill argument named per release); 0.24 in cudagraph_utils
        from vllm.v1.worker.utils import get_uniform_decode_token_count as uniform
    except ImportError:
        uniform = getattr(cudagraph_utils, "get_uniform_token_count", None)
    return SimpleNamespace(
        CUDAGraphMode=CUDAGraphMode, module=cudagraph_utils,
        Manager=getattr(cudagraph_utils, "ModelCudaGraphManager", cudagraph_utils.CudaGraphManager),
        dispatch=dispatch_cg_and_sync_dp, capture_hook=create_lora_capture_hook, capture_cases=get_lora_capture_cases,
        active_loras=get_num_active_loras_for_dispatch, uniform=uniform)


MISSING: list[str] = []  # why find() found no V2 graph pieces


class _NoGraphPool(PlatformView):
    """vLLM's platform for the manager's making only: no graph pool (no graph is captured here)."""

    @staticmethod
    def get_global_graph_pool() -> None:
        return None


class V2GraphSession(Session):
    """``Session`` with the V2 runner's CUDA-graph capture and dispatch (see the module's doc)."""

    def __init__(self, case, ctx, found: dict):
        g = found.get("v2_graphs")
        if g is None:
            raise InvalidCase(f"cudagraph_mode {case.config.get('cudagraph_mode')!r} in a V2-runner case: vLLM "
                              f"{found['api'].version}'s V2 runner has no LoRA capture cases (get_lora_capture_cases "
                              f"in vllm/v1/worker/gpu/lora_utils.py, 0.24 and later); use cudagraph_mode 'NONE'.")
        self.g = g
        super().__init__(case, ctx, found)  # the model, the manager, the start-up profile run
        self.q = 1 + self.c["num_speculative_tokens"]
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
        """vLLM's config reads the case's draft count (its speculative config's, which needs a draft model)."""
        cls = type(self.cfg)
        with mock.patch.object(cls, "num_speculative_tokens", property(lambda _: self.q - 1)):
            yield

    def _manager(self):
        g, c, cc = self.g, self.c, self.cfg.compilation_config
        mode = g.CUDAGraphMode[c["cudagraph_mode"]]
        cc.cudagraph_specialize_lora = bool(c.get("cudagraph_specialize_lora", True))
        cc.cudagraph_mode = mode
        sizes = c.get("cudagraph_capture_sizes")  # None: vLLM's default sizes
        cc.cudagraph_capture_sizes = None if sizes is None else sorted(sizes)
        cc.max_cudagraph_capture_size = None  # vLLM's _set_cudagraph_sizes sets it from the sizes
        kw: dict = {"lora_capture_cases": g.capture_cases(self.cfg.lora_config, cc)}
        with self._drafts(), mock.patch.object(g.module, "current_platform", _NoGraphPool(g.module.current_platform)):
            self.cfg._set_cudagraph_sizes()  # vLLM's resolution of the sizes, as for a server's --compilation-config
            if "decode_query_lens" in inspect.signature(g.Manager.__init__).parameters:  # 0.34
                kw["decode_query_lens"] = self.cfg.get_decode_cudagraph_query_lens(self.q)
            else:
                kw["decode_query_len"] = self.q
            return g.Manager(self.cfg, self.device, mode, **kw)

    # -- start-up -----------------------------------------------------------------------------------
    def capture_model(self) -> None:
        """``capture_model``'s LoRA path: the dummy adapters registered, the capture hook per descriptor, the host
        decisions of its LoRA launches recorded (what the graph freezes); every adapter removed after."""
        lora, m = self.cfg.lora_config, self.manager
        hook = self.g.capture_hook(lora, self.runner)
        with self.runner.maybe_setup_dummy_loras(lora):
            for mode in (self.g.CUDAGraphMode.PIECEWISE, self.g.CUDAGraphMode.FULL):
                for desc in m._capture_descs.get(mode, []):
                    hook(desc.num_active_loras, desc.num_reqs or min(desc.num_tokens, m.max_num_reqs),
                         desc.num_tokens)
                    self.graphs[desc] = self._frozen()
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
        uniform = None
        if g.uniform is not None:
            last = list(inspect.signature(g.uniform).parameters)[3:]  # has_prefill (0.28), decode_graph_eligible
            extra = {} if not last else {last[0]: prefill if last[0] == "has_prefill" else not prefill}
            uniform = g.uniform(len(reqs), n, longest, **extra)
        k = g.active_loras(self.cfg.lora_config, self.lora_state, [r["id"] for r in reqs], False)
        kw = {"num_active_loras": k}
        if "max_query_len" in inspect.signature(g.dispatch).parameters:
            kw["max_query_len"] = None if prefill else longest
        desc, _ = g.dispatch(self.manager, len(reqs), n, uniform, 1, 0, **kw)
        return desc, n

    def forward_step(self, op, reqs: list[dict], new: set[str], rows, logits_rows, prompt_rows) -> None:
        desc, n = self.dispatch(reqs, new)
        seed = op.get("seed", 0)
        self.forward("step", rows, 0, seed, logits_rows, prompt_rows)  # eager (the graph's padding is the dispatch's)
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
