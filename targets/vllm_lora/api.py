"""The installed vLLM's LoRA pieces behind one interface, adapted per API generation.

Generations, told apart by signature (not by version string, so patch releases just work):

* ``g1`` (vLLM 0.8 – 0.1x): ``LoRAKernelMeta.make(max_loras, max_num_tokens, device)``,
  ``meta_args(token_nums)`` gives 6 tensors, the ops take no ``num_active_loras``: grid z is
  always ``max_loras + 1``; ``PunicaWrapperGPU(..., max_loras=)``.
* ``g2`` (0.17 – 0.33): ``make(..., captured_lora_counts)``, ``meta_args(token_nums,
  specialize_active_lora)`` gives 7, the ops take ``num_active_loras`` (a CPU tensor that sets
  grid z); ``PunicaWrapperGPU(..., lora_config=)``.

Releases without ``vllm.lora.ops.triton_ops.LoRAKernelMeta`` are refused with one line.
"""

from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from fuzzrunner import tracking
from fuzzrunner.errors import HarnessError


def opaque_op():
    """Around a call of vLLM's registered custom ops (``torch.ops.vllm.lora_*``, also inside the punica
    wrapper): the shadow oracle's torch-level hook sees such an op as one call that reads every tensor
    argument in full (e.g. ``token_lora_mapping[:M]``, which no kernel reads, and the ``torch.empty``
    buffer the op zeroes itself), a false alarm. What the op really reads is what its Triton kernels
    load, and the interpreter hook still checks every one of those loads inside this block."""
    return tracking.quiet()


@dataclass
class VllmApi:
    version: str
    generation: str
    ops: Any                     # vllm.lora.ops.triton_ops
    shrink_mod: Any              # lora_shrink_op (holds _lora_shrink)
    expand_mod: Any
    utils: Any                   # triton_ops.utils (pointer caches, configs)
    punica_cls: Any = None       # PunicaWrapperGPU, where importable
    fused_moe: Any = None        # fused_moe_lora, where the release has it
    found: list = field(default_factory=list)
    protocol: str = "lora_warmup"  # how this release's V2 model runner programs LoRA for dummy runs

    # -- metadata ---------------------------------------------------------------------
    def make_meta(self, max_loras: int, max_num_tokens: int, device, captured: list[int]):
        if self.generation == "g1":
            return self.ops.LoRAKernelMeta.make(max_loras, max_num_tokens, device=device)
        return self.ops.LoRAKernelMeta.make(max_loras, max_num_tokens, device=device,
                                            captured_lora_counts=captured)

    def meta_args(self, meta, M: int, specialize: bool) -> tuple:
        if self.generation == "g1":
            return meta.meta_args(M)
        return meta.meta_args(M, specialize)

    def make_punica(self, max_loras: int, max_tokens: int, max_batches: int, device, specialize: bool):
        cfg = SimpleNamespace(max_loras=max_loras, specialize_active_lora=specialize)
        return self.punica_cls(max_tokens, max_batches, device, max_loras=max_loras, lora_config=cfg)

    # -- launches ---------------------------------------------------------------------
    def shrink(self, public: bool, x, weights: list, out, meta_args: tuple, scale: float) -> None:
        if public:
            with opaque_op():
                self.ops.lora_shrink(x, weights, out, *meta_args, scale)
        else:
            self.shrink_mod._lora_shrink(x, weights, out, *meta_args, scale)

    def expand(self, public: bool, x, weights: list, y, meta_args: tuple, add_inputs: bool = True) -> None:
        if public:
            with opaque_op():
                self.ops.lora_expand(x, weights, y, *meta_args, offset_start=0, add_inputs=add_inputs)
        else:
            self.expand_mod._lora_expand(x, weights, y, *meta_args, offset_start=0, add_inputs=add_inputs)

    def clear_pointer_caches(self) -> None:
        """vLLM's tests clear these between cases: they are keyed by data_ptr() and never invalidated."""
        self.utils._LORA_A_PTR_DICT.clear()
        self.utils._LORA_B_PTR_DICT.clear()

    @property
    def has_grid_control(self) -> bool:
        return self.generation == "g2"


def _cpu_configs(utils, original):
    """On the CPU: vLLM's own config dicts with split_k=1 and blocks that cover a small case.

    Only the launch shape changes (what vLLM otherwise reads from tuned JSON files); the kernels,
    the metadata and every host-side check are vLLM's. Interpreted, each program costs ~5 ms:
    vLLM's small-batch default (split_k=64) makes ~200 programs per shrink.
    """
    def configs(op_type, *args, **kwargs):
        cfg = dict(original(op_type, *args, **kwargs))
        if op_type == "shrink":
            cfg.update(block_m=16, block_n=16, block_k=64, split_k=1)
        elif op_type == "expand":
            cfg.update(block_m=16, block_n=64, block_k=16)
        return cfg
    return configs


PROTOCOLS = {
    "no_mapping": "V2 runner dummy runs launch the LoRA ops with no mapping programmed "
                  "('FIXME(woosuk): Fix warmup for LoRA'; vLLM 0.17 - 0.21)",
    "zero_mapping": "V2 runner dummy runs program a zero mapping, then force the flags (#43139; 0.22 - 0.23)",
    "lora_warmup": "dummy runs map dummy adapters through maybe_dummy_run_with_lora (#35536 in V2 from 0.24; "
                   "the V1 runner, and the V2 runner of 0.12)",
}


def runner_protocol() -> str:
    """Read (not import: it pulls the whole engine) the installed V2 model runner's dummy-run code."""
    import importlib.util
    spec = importlib.util.find_spec("vllm.v1.worker.gpu.model_runner")
    if spec is None or not spec.origin:
        return "lora_warmup"
    with open(spec.origin, encoding="utf-8") as f:
        src = f.read()
    if "Fix warmup for LoRA" in src:
        return "no_mapping"
    if "maybe_dummy_run_with_lora" in src:
        return "lora_warmup"
    if "set_adapter_mapping" in src and "no_lora_flag_cpu[0] = False" in src:
        return "zero_mapping"
    return "lora_warmup"


def load(device: str) -> VllmApi:
    notes = []
    import vllm
    version = getattr(vllm, "__version__", "?")
    try:
        import vllm.lora.ops.triton_ops as ops
        from vllm.lora.ops.triton_ops import lora_expand_op, lora_shrink_op, utils
    except ImportError as e:
        raise HarnessError(f"vLLM {version} has no vllm.lora.ops.triton_ops ({e}); the vllm_lora target "
                           f"supports the releases with LoRAKernelMeta (0.8 and later, tested 0.12 - 0.33).") from None
    if not hasattr(ops, "LoRAKernelMeta"):
        raise HarnessError(f"vLLM {version} has no LoRAKernelMeta; the vllm_lora target supports 0.8 and later.")
    params = inspect.signature(ops.LoRAKernelMeta.meta_args).parameters
    generation = "g2" if "specialize_active_lora" in params else "g1"
    api = VllmApi(version, generation, ops, lora_shrink_op, lora_expand_op, utils)
    api.protocol = runner_protocol()
    api.found = ["LoRAKernelMeta", "lora_shrink", "_lora_shrink", "lora_expand", "_lora_expand"]
    if hasattr(ops, "fused_moe_lora"):
        api.fused_moe = ops.fused_moe_lora
        api.found.append("fused_moe_lora (not driven yet)")
    try:
        from vllm.lora.punica_wrapper.punica_gpu import PunicaWrapperGPU
        api.punica_cls = PunicaWrapperGPU
        api.found.append("PunicaWrapperGPU")
    except Exception as e:  # noqa: BLE001 - any import failure just leaves the wrapper out
        notes.append(f"PunicaWrapperGPU not importable: {type(e).__name__}: {str(e)[:120]}")
    if device == "cpu":
        for mod in (lora_shrink_op, lora_expand_op):
            mod.get_lora_op_configs = _cpu_configs(utils, utils.get_lora_op_configs)
        notes.append("CPU launch shapes: split_k=1, small blocks")
        h2d = getattr(utils, "async_tensor_h2d", None)
        if h2d is not None:
            # vLLM pins host memory when its platform says pinning is available; the platform probe finds
            # no platform here and says yes, but a CPU-only torch cannot pin (vLLM's own CPU platform says no).
            home = sys.modules[h2d.__module__]
            if hasattr(home, "PIN_MEMORY"):
                home.PIN_MEMORY = False
            if "pin_memory" in inspect.signature(h2d).parameters:
                utils.async_tensor_h2d = functools.partial(h2d, pin_memory=False)
            notes.append("CPU: pointer tables built without pinned memory")
    if device == "cuda":
        from vllm.platforms import current_platform
        notes.append(f"platform {type(current_platform).__name__}")
    api.found += notes
    api.found.append(f"dummy-run protocol {api.protocol}: {PROTOCOLS[api.protocol]}")
    return api
