"""The MoE block of the engine target's model: vLLM's ``FusedMoE`` and its ``FusedMoEWithLoRA``, as shipped.

A case with ``config["moe"] = {"experts": E, "top_k": k}`` gets a Mixtral-shaped sparse block beside the dense MLP
(``model.layers.0.block_sparse_moe``): a ``GateLinear`` router gate and the experts that vLLM's
``FusedMoEFactory`` builds (a ``MoERunner`` over ``RoutedExperts``, checkpoint names ``w1``/``w2``/``w3`` as
Mixtral's), with vLLM's ``CPURouter`` (softmax top-k, renormalized: plain torch, vLLM's own routing code for
its CPU platform). The LoRA manager wraps the experts in ``FusedMoEWithLoRA`` (``from_layer``,
``create_lora_weights``; adapters packed by ``PackedLoRALayerWeights.pack_moe``, loaded by ``set_lora`` /
``reset_lora``); its forward is the base layer's, whose Triton experts (``TritonExperts.apply``, vLLM's
unquantized LoRA backend) add the LoRA through ``PunicaWrapperGPU.add_lora_w13`` / ``add_lora_w2`` ->
``add_lora_fused_moe`` -> the fused-MoE LoRA Triton kernels (in Triton's interpreter on the CPU).

What the release needs compiled code for, and how each is answered (docs/vllm.md, the component table):

* ``torch.ops._C.silu_and_mul`` (the gated activation, ``apply_moe_activation``): registered where ``vllm._C``
  is absent, as vLLM's own native form, ``SiluAndMul.forward_native`` (``model_executor/layers/activation.py``);
* ``torch.ops._moe_C.moe_sum`` (the top-k reduction, ``TritonExperts.moe_sum``): registered where absent,
  re-stated as ``output = input.sum(dim=1)``: vLLM's ``moe_sum_kernel`` (csrc/moe/moe_align_sum_kernels.cu)
  sums the ``topk`` rows of each token (no expert map: the target has no expert parallelism);
* ``moe_align_block_size`` (``torch.ops._moe_C``): re-stated where absent (``align``), for 0.17 - 0.19, whose
  modular Triton experts align every batch; from 0.20 the base experts take the naive path below and never call it;
* ``moe_lora_align_block_size`` (``torch.ops._moe_C``): not answered. vLLM skips it (and from 0.20 the base
  align) where a batch is sparse enough (its own naive block assignment: base ``tokens * top_k * 4 <= experts``,
  ``_prepare_expert_assignment``; LoRA ``tokens * top_k * 8 <= experts * max_loras`` and not fully sharded,
  ``PunicaWrapperGPU.add_lora_w13``), so the expert counts are 64 and 128 and the MoE layer runs only on the
  batches where vLLM takes both naive paths (``naive``); fully sharded LoRA (always the sorted path) is not
  drawn with a MoE block;
* the kernel launch shapes: vLLM's ``override_config`` (its API for a fixed fused-MoE config; the lookup of
  tuned configs asks the platform for a device name, which the CPU cannot answer);
* on the CPU, the Triton experts' device check (0.34's kernel oracle asks ``TritonExperts._supports_current_device``,
  ``current_platform.is_cuda_alike()``; the CPU platform says no, and the LoRA backend is refused): the
  ``triton_moe`` module alone sees vLLM's platform with that one answer yes (Triton runs there, in its
  interpreter; ``is_cuda`` stays no, so no CUDA-only branch is taken), as ``vllm_lora`` answers the MoE LoRA
  op's compute-unit count;
* on the CPU, 0.17 - 0.19's unquantized MoE method: it binds ``TritonExperts`` only on a CUDA-like platform at
  import and its backend oracle picks by platform alone; those two modules see what a CUDA platform without
  FlashInfer answers (``_CudaForMoEMethod``: the Triton backend, as on a GPU);
* the workspace: vLLM's ``init_workspace_manager`` (as ``GPUModelRunner.__init__`` calls it); on the CPU its
  buffer is made once up front (growing it calls ``torch.accelerator.empty_cache()``, which raises there).

The base output of a row is vLLM's own: a twin of the block's experts, built by the same factory with the same
weights and never wrapped (``twin``), run on the same input and router logits. The float64 reference of an
adapter's row is the whole block from the PEFT weights (``reference``).

A block of ``"format": "3d"`` (``FORMATS``) sits in a model flagged ``is_3d_moe_weight`` (model.ARCH_3D): vLLM's
manager then wraps the experts in ``FusedMoE3DWithLoRA`` and its adapters are in PEFT's stacked 3D layout
(adapters.py); the forward, oracles and reference are the same.
"""

from __future__ import annotations

import torch

from .vllm_env import PlatformView

LAYER = "experts"                           # the runtime module name (a layer a step can run)
BLOCK = "model.layers.0.block_sparse_moe"   # Mixtral's name for the sparse block
PATH = f"{BLOCK}.experts"
EXPERTS = (64, 128)
TOP_K = (1, 2)
# the expert adapters' format: "2d" (per-expert w1/w2/w3, FusedMoEWithLoRA) or "3d" (stacked gate_up / down, as PEFT
# saves a LoRA of 3D expert parameters: a model flagged is_3d_moe_weight, FusedMoE3DWithLoRA; model.ARCH_3D)
FORMATS = ("2d", "3d")
# the LoRA layer vLLM's manager wraps the experts in, per format (what `targets` / `doctor` say is driven)
LAYERS = {"2d": "FusedMoEWithLoRA", "3d": "FusedMoE3DWithLoRA"}
# campaign devices that draw a MoE block (cases.py): cuda since scripts/gpu/vllm_engine_moe.py passed on an H100
# (2026-12-07: fault-free silent, fused_moe_swaps_gate_up and activation_keeps_missing_modules caught)
DEVICES = ("cpu", "cuda")
# campaign devices that draw the 3D format: cuda since scripts/gpu/vllm_engine_moe3d.py passed on an H100 (2026-12-07:
# fault-free silent; activation_keeps_missing_modules, fused_moe_3d_swaps_gate_up, set_lora_keeps_old_weights caught)
DEVICES_3D = ("cpu", "cuda")
PROJS = ("w1", "w2", "w3")                  # Mixtral's checkpoint names: gate, down, up
# the fused-MoE kernels' launch shapes on the CPU: one block covers the small M, few programs
LAUNCH = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1, "SPLIT_K": 1,
          "num_warps": 4, "num_stages": 2}
WORKSPACE_BYTES = 1 << 22
# The block's input scale. vLLM stores the gated activation's input and output in the model's dtype between its
# kernels (two float16 roundings the float64 reference does not make): at unit scale an adapter's intermediates
# reach 20 - 60 and a small output element errs by up to 0.04 (a clean campaign's case, seed 0), past float16's
# tolerance (0.01 + 0.01 * |expected|); at half scale with the expert LoRA weights at half the dense modules'
# scale, the values stay O(1).
INPUT_SCALE = 0.5

_DONE: dict = {}


def intermediate(c: dict) -> int:
    return c["hidden"]


def shapes(c: dict) -> dict[str, tuple[int, int]]:
    """(out, in) of each expert projection."""
    h, i = c["hidden"], intermediate(c)
    return {"w1": (i, h), "w2": (h, i), "w3": (i, h)}


def naive(c: dict, rows: int) -> bool:
    """vLLM takes its naive block assignment for both the base experts and the LoRA (no align op)."""
    m = c["moe"]
    return (rows * m["top_k"] * 4 <= m["experts"] and rows * m["top_k"] * 8 <= m["experts"] * c["max_loras"]
            and not c["fully_sharded_loras"])


# -- the process ---------------------------------------------------------------------------------------
def unavailable() -> str | None:
    """Why this vLLM cannot build the block as the target does, or None. Every piece is found, not assumed by
    version: the experts' builder (``builder``: ``FusedMoEFactory`` 0.28 on, ``FusedMoE`` before), their router
    (``router``: ``CPURouter`` 0.31 on, else the builder's default ``FusedTopKRouter``), the module holding their
    weights (``weights_of``), the model's expert mapping (``model_mapping``) and the Triton experts' module
    (``triton_experts_module``). Driven here: 0.17 - 0.34 (0.17 - 0.19: the decorator-based ``FusedMoEWithLoRA``,
    their unquantized MoE method seeing a CUDA platform on the CPU, ``cpu_platform``); 0.15 - 0.16 have no
    ``GateLinear``."""
    try:
        import vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method as method
        from vllm.lora.layers import FusedMoEWithLoRA  # noqa: F401
        from vllm.model_executor.layers.fused_moe import override_config  # noqa: F401
        from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear  # noqa: F401
        from vllm.v1.worker.workspace import init_workspace_manager  # noqa: F401
    except ImportError as e:
        return (f"no MoE block on this vLLM ({str(e).splitlines()[0].split(' from ')[0][:80]}): moe cases need "
                f"FusedMoEWithLoRA over vLLM's Triton experts, GateLinear, override_config and the workspace manager "
                f"(0.20 or later)")
    if "TritonExperts" in vars(method) and method.TritonExperts is None and not _CUDA_LIKE_METHOD:
        return ("no MoE block on this vLLM on this platform: its unquantized MoE method binds TritonExperts only "
                "on a CUDA-like platform (unquantized_fused_moe_method.py, at import) and picks its kernel by "
                "platform alone, with no LoRA branch (oracle/unquantized.py; 0.20 on: TritonExperts for LoRA "
                "whatever the platform), so the CPU gets no Triton experts to wrap")
    return None


# 0.17 - 0.19 on the CPU: their unquantized MoE method sees a CUDA platform (cpu_platform); off only to show the
# refusal it replaced (tests)
_CUDA_LIKE_METHOD = True


def router():
    """vLLM's ``CPURouter`` class (0.31 on: softmax top-k in plain torch, vLLM's routing for its CPU platform), or None
    (0.28 - 0.30: the factory's default router, ``FusedTopKRouter``, whose compiled ``_moe_C::topk_softmax`` is
    answered by ``compiled_ops``)."""
    try:
        from vllm.model_executor.layers.fused_moe.router.cpu_router import CPURouter
    except ImportError:
        return None
    return CPURouter



def known_flags() -> dict[str, bool]:
    """R1 and M1 (known.py) by the code this process imported (a patched tree's too): ``pack_moe`` scales by
    ``lora_alpha / rank`` instead of the adapters' own ``scaling`` (R1, as ``source_facts``), ``add_lora_fused_moe``
    launches without looking at the no-LoRA flag (M1)."""
    import inspect
    import re

    from vllm.lora.lora_weights import PackedLoRALayerWeights
    from vllm.lora.punica_wrapper.punica_gpu import PunicaWrapperGPU
    pack = inspect.getsource(PackedLoRALayerWeights.pack_moe) if hasattr(PackedLoRALayerWeights, "pack_moe") else ""
    add = inspect.getsource(PunicaWrapperGPU.add_lora_fused_moe)
    return {"moe_drops_rslora": bool(pack) and not re.search(r"\w\.scaling\b", pack),
            "moe_ignores_no_lora": "no_lora" not in add}


def _missing(namespace: str, op: str) -> bool:
    try:
        getattr(getattr(torch.ops, namespace), op)
    except (AttributeError, RuntimeError):
        return True
    return False


def compiled_ops() -> list[str]:
    """Register what the fused-MoE path calls in ``vllm._C`` where it is absent (once per process): see the
    module's doc. Returns what was registered."""
    if "ops" in _DONE:
        return _DONE["ops"]
    from vllm.model_executor.layers.activation import SiluAndMul
    done, libs = [], []
    if _missing("_C", "silu_and_mul"):
        lib = torch.library.Library("_C", "FRAGMENT")
        lib.define("silu_and_mul(Tensor! out, Tensor input) -> ()")

        def silu_and_mul(out, input):
            out.copy_(SiluAndMul.forward_native(input))
        lib.impl("silu_and_mul", silu_and_mul, "CompositeExplicitAutograd")
        libs.append(lib)
        done.append("_C::silu_and_mul")
    if _missing("_moe_C", "moe_sum"):
        lib = torch.library.Library("_moe_C", "FRAGMENT")
        lib.define("moe_sum(Tensor input, Tensor! output, Tensor? topk_ids=None, Tensor? expert_map=None) -> ()")

        def moe_sum(input, output, topk_ids=None, expert_map=None):
            assert expert_map is None, "the engine target has no expert parallelism"
            output.copy_(input.sum(dim=1))
        lib.impl("moe_sum", moe_sum, "CompositeExplicitAutograd")
        libs.append(lib)
        done.append("_moe_C::moe_sum")
    if router() is None and _missing("_moe_C", "topk_softmax"):
        done.append(_topk_softmax(libs))
    if _missing("_moe_C", "moe_align_block_size"):
        done.append(_moe_align_block_size(libs))
    _DONE["ops"], _DONE["libs"] = done, libs  # a Library object unregisters its ops when collected
    return done


def _topk_softmax(libs: list) -> str:
    """``_moe_C::topk_softmax`` (0.28 - 0.30's default router), re-stated where ``vllm._C`` is absent, with the schema
    of the release's own wrapper (``vllm._custom_ops.topk_softmax``: its arguments are passed positionally):
    csrc/moe/topk_softmax_kernels.cu takes the softmax of each row's gating logits in float32, its top-k experts
    (largest first), renormalizes their weights when asked, and writes each (token, k)'s source row
    ``k * num_tokens + token``; the padding mask and score correction are not drawn (asserted)."""
    import inspect

    from vllm import _custom_ops
    names = list(inspect.signature(_custom_ops.topk_softmax).parameters)
    types = {"topk_weights": "Tensor!", "topk_ids": "Tensor!", "token_expert_indices": "Tensor!",
             "gating_output": "Tensor", "renormalize": "bool", "e_score_correction_bias": "Tensor?",
             "is_padding": "Tensor?"}
    lib = torch.library.Library("_moe_C", "FRAGMENT")
    lib.define(f"topk_softmax({', '.join(f'{types[n]} {n}' for n in names)}) -> ()")

    def topk_softmax(topk_weights, topk_ids, token_expert_indices, gating_output, renormalize=False, *rest):
        assert all(r is None for r in rest), "the engine target draws no score correction or padding mask"
        k, tokens = topk_weights.size(1), gating_output.size(0)
        w, ids = torch.topk(torch.softmax(gating_output.float(), dim=-1), k=k, dim=-1)
        if renormalize:
            w = w / w.sum(dim=-1, keepdim=True)
        topk_weights.copy_(w)
        topk_ids.copy_(ids)
        token_expert_indices.copy_(torch.arange(k, device=ids.device)[None, :] * tokens
                                   + torch.arange(tokens, device=ids.device)[:, None])
    lib.impl("topk_softmax", topk_softmax, "CompositeExplicitAutograd")
    libs.append(lib)
    return "_moe_C::topk_softmax"


def align(topk_ids: torch.Tensor, num_experts: int, block_size: int, sorted_token_ids: torch.Tensor,
          experts_ids: torch.Tensor, num_tokens_post_pad: torch.Tensor) -> None:
    """``_moe_C::moe_align_block_size`` re-stated (csrc/moe/moe_align_sum_kernels.cu; the release's own docstring,
    ``fused_moe/moe_align_block_size.py``, gives its example): each expert's (token, k) entries, as indices into
    ``topk_ids.flatten()``, laid out expert by expert, each expert's run padded to a multiple of ``block_size`` with the
    sentinel ``topk_ids.numel()``; ``experts_ids[b]`` the expert of block b; ``num_tokens_post_pad`` the padded total.
    The kernel orders an expert's entries by atomics (any order: each entry's product is its own); here in order.
    Blocks past the total are left as the kernel leaves them to its readers (the fused-MoE kernel stops there)."""
    flat = topk_ids.flatten().long()
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    order = torch.argsort(flat, stable=True)  # the entries expert by expert, each expert's in order
    by_expert = flat[order]
    within = torch.arange(flat.numel(), device=flat.device) - (torch.cumsum(counts, 0) - counts)[by_expert]
    sorted_token_ids.fill_(flat.numel())
    sorted_token_ids[(torch.cumsum(padded, 0) - padded)[by_expert] + within] = order.to(sorted_token_ids.dtype)
    blocks = torch.repeat_interleave(torch.arange(num_experts, device=flat.device), padded // block_size)
    experts_ids[:blocks.numel()] = blocks.to(experts_ids.dtype)
    num_tokens_post_pad.fill_(int(padded.sum()))


def _moe_align_block_size(libs: list) -> str:
    """``_moe_C::moe_align_block_size`` where ``vllm._C`` is absent (``align``): 0.17 - 0.19's modular
    ``TritonExperts.apply`` aligns every batch (no naive branch there); the schema of the release's wrapper
    (``vllm._custom_ops.moe_align_block_size``, positional); no expert map (asserted: one rank)."""
    lib = torch.library.Library("_moe_C", "FRAGMENT")
    lib.define("moe_align_block_size(Tensor topk_ids, int num_experts, int block_size, Tensor! sorted_token_ids, "
               "Tensor! experts_ids, Tensor! num_tokens_post_pad, Tensor? maybe_expert_map=None) -> ()")

    def moe_align_block_size(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad,
                             maybe_expert_map=None):
        assert maybe_expert_map is None, "the engine target has no expert parallelism"
        align(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad)
    lib.impl("moe_align_block_size", moe_align_block_size, "CompositeExplicitAutograd")
    libs.append(lib)
    return "_moe_C::moe_align_block_size"


class _TritonOnCpu(PlatformView):
    """vLLM's platform for ``fused_moe/experts/triton_moe.py`` on the CPU: CUDA-like for the Triton experts'
    device check only (see the module's doc)."""

    @staticmethod
    def is_cuda_alike() -> bool:
        return True


def triton_experts_module():
    """The module of vLLM's ``TritonExperts``: ``fused_moe/experts/triton_moe.py`` (0.21 on), else
    ``fused_moe/fused_moe.py`` (0.20 and before)."""
    import importlib
    try:
        return importlib.import_module("vllm.model_executor.layers.fused_moe.experts.triton_moe")
    except ImportError:
        return importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe")


class _CudaForMoEMethod(PlatformView):
    """vLLM's platform for 0.17 - 0.19's ``unquantized_fused_moe_method`` and ``oracle/unquantized`` modules on the
    CPU: what a CUDA platform without FlashInfer answers them (``is_cuda`` / ``is_cuda_alike`` yes, ``is_cpu`` no,
    no compute capability 9.0), so that the method takes the Triton backend and the modular ``TritonExperts``
    kernel, as it does on a GPU (``select_unquantized_moe_backend``: TRITON on CUDA without FlashInfer), instead of
    no backend at all (the no-GPU platform is neither: ``UnboundLocalError``). Every other module keeps the real
    platform."""

    @staticmethod
    def is_cuda_alike() -> bool:
        return True

    @staticmethod
    def is_cuda() -> bool:
        return True

    @staticmethod
    def is_cpu() -> bool:
        return False

    @staticmethod
    def has_device_capability(*args, **kwargs) -> bool:
        return False


def _cuda_like_moe_method() -> bool:
    """0.17 - 0.19 (an unquantized MoE method that bound ``TritonExperts = None`` at import, the platform not being
    CUDA-like): its module and its backend oracle see ``_CudaForMoEMethod``, and the Triton experts it would have
    imported are bound as that import binds them (``from .fused_moe import TritonExperts``, ``from
    .fused_batched_moe import BatchedTritonExperts``). Returns whether this release needed it."""
    import importlib
    method = importlib.import_module("vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method")
    if "TritonExperts" not in vars(method) or (method.TritonExperts is not None
                                               and not isinstance(method.current_platform, _CudaForMoEMethod)):
        return False
    oracle = importlib.import_module("vllm.model_executor.layers.fused_moe.oracle.unquantized")
    for mod in (method, oracle):
        if not isinstance(mod.current_platform, _CudaForMoEMethod):
            mod.current_platform = _CudaForMoEMethod(mod.current_platform)
    if method.TritonExperts is None:
        method.TritonExperts = importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe").TritonExperts
        method.BatchedTritonExperts = importlib.import_module(
            "vllm.model_executor.layers.fused_moe.fused_batched_moe").BatchedTritonExperts
    return True


def cpu_platform() -> None:
    """On the CPU, once per process: the Triton experts module's platform answers its device check; on 0.17 - 0.19
    the unquantized MoE method sees a CUDA platform (``_cuda_like_moe_method``)."""
    triton_moe = triton_experts_module()
    if not isinstance(triton_moe.current_platform, _TritonOnCpu):
        triton_moe.current_platform = _TritonOnCpu(triton_moe.current_platform)
    if _CUDA_LIKE_METHOD:
        _cuda_like_moe_method()


def workspace(device: torch.device) -> None:
    """vLLM's workspace manager, as its model runner makes it (once per process)."""
    from vllm.v1.worker import workspace as ws
    if ws.is_workspace_manager_initialized():
        return
    ws.init_workspace_manager(device)
    if device.type == "cpu":
        mgr = ws.current_workspace_manager()
        mgr._current_workspaces = [torch.empty(WORKSPACE_BYTES, dtype=torch.uint8) for _ in mgr._current_workspaces]


# -- the block ------------------------------------------------------------------------------------------
def builder():
    """What the release's Mixtral calls to make its experts: ``FusedMoEFactory`` (0.28 on) or ``FusedMoE``."""
    import vllm.model_executor.layers.fused_moe as fm
    return getattr(fm, "FusedMoEFactory", None) or fm.FusedMoE


def experts(hf, prefix: str):
    """vLLM's MoE experts (``FusedMoEFactory``, Mixtral's arguments, vLLM's CPU router where the release has one, else
    the factory's own default)."""
    import inspect
    make = builder()
    m, cpu_router = hf.fuzzrunner_moe, router()
    kw = dict(num_experts=m["experts"], top_k=m["top_k"], hidden_size=hf.hidden_size,
              intermediate_size=hf.hidden_size, renormalize=True, prefix=prefix)
    takes = inspect.signature(make).parameters
    if "ckpt_names" in takes:
        kw["ckpt_names"] = PROJS
    if cpu_router is not None:
        kw["router"] = cpu_router(top_k=m["top_k"], global_num_experts=m["experts"], renormalize=True)
    return make(**kw)


def model_mapping():
    """The expert mapping a model class defines where the release's experts do not define their own (before 0.28:
    ``get_moe_expert_mapping`` asks the model, as the LoRA manager's packing does), as the release's Mixtral
    writes it (``get_expert_mapping``: ``fused_moe_make_expert_params_mapping``, or
    ``FusedMoE.make_expert_params_mapping``
    where the release has no such function); None where the experts carry it (0.28 on: ``RoutedExperts``)."""
    import vllm.model_executor.layers.fused_moe.layer as layer
    routed = getattr(layer, "RoutedExperts", None)
    if routed is not None and hasattr(routed, "get_expert_mapping"):
        return None
    make = getattr(layer, "fused_moe_make_expert_params_mapping", None) or layer.FusedMoE.make_expert_params_mapping

    def get_expert_mapping(self) -> list[tuple[str, str, int, str]]:
        gate, down, up = PROJS
        return make(self, ckpt_gate_proj_name=gate, ckpt_down_proj_name=down, ckpt_up_proj_name=up,
                    num_experts=self.config.fuzzrunner_moe["experts"], num_redundant_experts=0)
    return get_expert_mapping


def gate_wrappable() -> bool:
    """Whether this vLLM's LoRA manager can wrap a ``GateLinear``: 0.19's ``GateLinearWithLoRA``, or from 0.20 a
    ``ReplicatedLinearWithLoRA`` that takes any ``ReplicatedLinear`` subclass (``isinstance``). 0.17 - 0.18 take
    ``type(source_layer) is ReplicatedLinear`` only, and the manager asserts on the unwrapped ``GateLinear``
    (``register_module``: "must be a BaseLayerWithLoRA instance"): there the block's gate is a ``ReplicatedLinear``, as
    their Mixtral builds it (no adapter targets it)."""
    import inspect

    import vllm.lora.layers as lora_layers
    return hasattr(lora_layers, "GateLinearWithLoRA") or "isinstance(" in inspect.getsource(
        lora_layers.ReplicatedLinearWithLoRA.can_replace_layer)


def block(hf):
    """The sparse block: ``gate`` (vLLM's ``GateLinear``, or a ``ReplicatedLinear`` where the release's LoRA cannot wrap
    a ``GateLinear``: ``gate_wrappable``) and ``experts``."""
    from torch import nn
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear
    b = nn.Module()
    if gate_wrappable():
        b.gate = GateLinear(hf.hidden_size, hf.fuzzrunner_moe["experts"], prefix=f"{BLOCK}.gate")
    else:
        from vllm.model_executor.layers.linear import ReplicatedLinear
        b.gate = ReplicatedLinear(hf.hidden_size, hf.fuzzrunner_moe["experts"], bias=False, prefix=f"{BLOCK}.gate")
    b.experts = experts(hf, f"{BLOCK}.experts")
    return b


def finish_loading(model, vllm_config, device) -> None:
    """What vLLM's loader does after the weights are in (``process_weights_after_loading``): the experts'
    kernel is chosen there."""
    from vllm.model_executor.model_loader.utils import process_weights_after_loading
    process_weights_after_loading(model, vllm_config.model_config, device)


_TWINS = [0]


def twin(model, vllm_config, device):
    """The experts again, with the same weights, never wrapped by the LoRA manager: the base output. Made from
    ``model`` before the LoRA manager wraps it."""
    from vllm.config import set_current_vllm_config
    hf = vllm_config.model_config.hf_config
    _TWINS[0] += 1  # each MoE layer registers its name with the config; one name per twin
    with set_current_vllm_config(vllm_config), torch.device(device):
        old = torch.get_default_dtype()
        torch.set_default_dtype(vllm_config.model_config.dtype)
        try:
            t = experts(hf, f"fuzzrunner_base_twin_{_TWINS[0]}.experts")
        finally:
            torch.set_default_dtype(old)
    src = dict(model.get_submodule(PATH).named_parameters())
    with torch.no_grad():
        for name, p in t.named_parameters():
            p.copy_(src[name])
    from vllm.model_executor.model_loader.utils import process_weights_after_loading
    process_weights_after_loading(t, vllm_config.model_config, device)
    return t


def run(layer, x: torch.Tensor, logits: torch.Tensor, vllm_config) -> torch.Tensor:
    """``layer(x, router_logits)`` as a model's forward calls it: inside vLLM's forward context, with the
    target's kernel launch shapes."""
    from vllm.forward_context import set_forward_context
    from vllm.model_executor.layers.fused_moe import override_config
    with set_forward_context(None, vllm_config, num_tokens=x.size(0)), override_config(dict(LAUNCH)):
        return layer(x, logits)


# -- the reference ------------------------------------------------------------------------------------------
def routing(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [T, k], float64 weights [T, k]): the top-k of the router logits, softmax over them (renormalized).
    The top-k is taken on the same tensor in its own dtype, as vLLM's router takes it, so that equal logits
    pick the same experts."""
    vals, ids = torch.topk(logits, k=top_k, dim=-1, sorted=False)
    return ids, torch.softmax(vals.double(), dim=-1)


def weights_of(layer):
    """The module holding the experts' weights and quant method: the ``MoERunner``'s ``routed_experts`` (0.24 on) or
    the ``FusedMoE`` layer itself (before); through a LoRA wrapper's ``base_layer``."""
    base = getattr(layer, "base_layer", layer)
    return getattr(base, "routed_experts", base)


def expert_base(layer) -> tuple[torch.Tensor, torch.Tensor]:
    """(w13 [E, 2I, H], w2 [E, H, I]) of vLLM's experts, float64."""
    inner = weights_of(layer)
    return inner.w13_weight.detach().cpu().double(), inner.w2_weight.detach().cpu().double()


def reference(x: torch.Tensor, logits: torch.Tensor, top_k: int, w13: torch.Tensor, w2: torch.Tensor,
              lora: dict | None, scale: float) -> torch.Tensor:
    """[T, H] float64: ``sum_k w_k * (W2_e + s B2 A2) (silu(g) * u)`` with ``g = (W1_e + s B1 A1) x`` and
    ``u = (W3_e + s B3 A3) x`` for ``e`` the row's k-th expert; ``lora`` None: the base. ``lora`` maps each
    projection to (A [E, r, in], B [E, out, r]) from the PEFT weights."""
    ids, weights = routing(logits.detach().cpu(), top_k)
    xs = x.detach().cpu().double()
    i = w2.size(-1)
    out = torch.zeros(xs.size(0), w2.size(1), dtype=torch.float64)
    for t in range(xs.size(0)):
        for k in range(top_k):
            e = int(ids[t, k])
            w1, w3, wd = w13[e, :i], w13[e, i:], w2[e]
            if lora is not None:
                w1 = w1 + scale * lora["w1"][1][e].double() @ lora["w1"][0][e].double()
                w3 = w3 + scale * lora["w3"][1][e].double() @ lora["w3"][0][e].double()
                wd = wd + scale * lora["w2"][1][e].double() @ lora["w2"][0][e].double()
            g, u = w1 @ xs[t], w3 @ xs[t]
            out[t] += weights[t, k] * (wd @ (torch.nn.functional.silu(g) * u))
    return out
