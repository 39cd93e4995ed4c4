"""vLLM's process-wide state for the engine target, and the vLLM objects each case builds.

Once per process (``prepare``, at load): ``LoRARequest`` hashed by id (``_hash_by_id``: replays); the tiny
model class registered in vLLM's own ``ModelRegistry``
(vLLM's API for out-of-tree models: its ``ModelConfig`` inspects it in-process instead of in a
subprocess).

Once per process and device (``on_device``, by the first run, with the run's device): on the CPU, the
platform's answer to ``get_punica_wrapper`` (``PunicaWrapperGPU``, what vLLM's CUDA platform answers: its
Triton ops run in the interpreter) for ``punica_selector`` only, and pinned host memory off (``PIN_MEMORY``
of every loaded vLLM module: vLLM pins when its platform probe says it may, which the no-GPU probe does, but
a CPU-only torch cannot pin).

Once per worker process (``distributed``, lazily, never in the zygote that forks workers): vLLM's
distributed state on one rank, gloo on the CPU (nccl on a GPU), tensor-parallel size 1, as vLLM's
LoRA tests set it up (``init_distributed_environment`` + ``initialize_model_parallel``).

Per case (``configs``): vLLM's own ``VllmConfig`` built from ``ModelConfig`` (the case's config.json),
``LoRAConfig`` (every LoRA knob the case draws) and ``SchedulerConfig``, so that vLLM applies and
validates the knobs as it does for a server (``lora_dtype="auto"`` becomes the model's dtype,
``max_cpu_loras`` defaults to ``max_loras``...).
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from typing import Any

from .model import ARCH, model_classes

_STATE: dict[str, Any] = {}


class PlatformView:
    """vLLM's ``current_platform`` as one module sees it: the real platform, but for the methods a subclass
    answers (each subclass says for which module and why)."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)


class _PunicaPlatform(PlatformView):
    """vLLM's platform for ``punica_selector`` only, on the CPU: it names ``PunicaWrapperGPU`` as the CUDA
    platform does (the unspecified platform raises NotImplementedError)."""

    @staticmethod
    def get_punica_wrapper() -> str:
        return "vllm.lora.punica_wrapper.punica_gpu.PunicaWrapperGPU"


def _hash_by_id(request) -> int:
    """``LoRARequest``'s hash by its adapter id alone. vLLM hashes its name too (a str: randomized per process by
    PYTHONHASHSEED), and iterates sets of requests (``maybe_setup_dummy_loras``, ``_apply_adapters``): the
    order adapters are added, evicted and activated in, so which slot each lands in, changed from one process
    to the next and a finding would not replay. Equal requests still hash equal (same name and id); the order
    is now one of those vLLM can take, the same in every process."""
    return hash(request.lora_int_id)


def _no_pinning() -> bool:
    """What vLLM's own CPU platform answers to ``is_pin_memory_available``."""
    return False


def unpin_host_memory() -> list[str]:
    """``PIN_MEMORY = False`` in every loaded vLLM module that bound it (each imports the flag by value),
    ``is_pin_memory_available`` answered False where a module imported it by name, and
    ``async_tensor_h2d(..., pin_memory=PIN_MEMORY)``'s default, bound when it was defined (0.22's
    ``convert_mapping`` copies the mapping through it: "pin_memory=True requires a CUDA ... backend")."""
    done = []
    for name, mod in list(sys.modules.items()):
        if name.startswith("vllm") and getattr(mod, "PIN_MEMORY", None) is True:
            mod.PIN_MEMORY = False
            done.append(name)
        if name.startswith("vllm") and callable(getattr(mod, "is_pin_memory_available", None)):
            mod.is_pin_memory_available = _no_pinning  # releases up to 0.2x ask it at each call (lora_weights.py)
            done.append(f"{name}.is_pin_memory_available")
        h2d = getattr(mod, "async_tensor_h2d", None) if name.startswith("vllm") else None
        if h2d is not None and getattr(h2d, "__defaults__", None) == (True,):
            h2d.__defaults__ = (False,)
            done.append(f"{name}.async_tensor_h2d")
    return done


def on_device(device: str) -> None:
    """What a run on ``device`` needs of the process (once per device; see the module's doc)."""
    if _STATE.get(("device", device)):
        return
    if device == "cpu":
        import vllm.lora.punica_wrapper.punica_selector as selector
        if not isinstance(selector.current_platform, _PunicaPlatform):
            selector.current_platform = _PunicaPlatform(selector.current_platform)
        unpin_host_memory()
    _STATE[("device", device)] = True


def prepare() -> dict:
    """Import the engine pieces of vLLM and adapt the process (once); the classes and functions found."""
    if "found" in _STATE:
        return _STATE["found"]
    import vllm.lora.punica_wrapper.punica_selector  # noqa: F401 - the manager's wrapper choice, patched by on_device
    from vllm.lora.request import LoRARequest
    from vllm.lora.worker_manager import LRUCacheWorkerLoRAManager
    from vllm.model_executor.models import ModelRegistry
    from vllm.v1.worker.lora_model_runner_mixin import LoRAModelRunnerMixin

    found: dict[str, Any] = {"LoRARequest": LoRARequest, "LRUCacheWorkerLoRAManager": LRUCacheWorkerLoRAManager,
                             "LoRAModelRunnerMixin": LoRAModelRunnerMixin}
    class EngineRunner(LoRAModelRunnerMixin):
        """The model runner as far as LoRA goes: vLLM's own mixin (``load_lora_model``, ``_set_active_loras``,
        ``add_lora``..., ``maybe_dummy_run_with_lora``), with the one attribute it reads."""

        def __init__(self, lora_config):
            self.lora_config = lora_config

    found["runner_class"] = EngineRunner
    LoRARequest.__hash__ = _hash_by_id
    classes = model_classes()
    for arch, cls in classes.items():
        ModelRegistry.register_model(arch, cls)
    found["model_class"], found["model_classes"] = classes[ARCH], classes
    try:
        from vllm.v1.worker.gpu.lora_utils import LoraState
        found["LoraState"] = LoraState
        found["make_lora_inputs_takes_num_logits"] = (
            "num_logits" in inspect.signature(LoraState.make_lora_inputs).parameters)
    except ImportError:
        found["LoraState"] = None
    try:
        from vllm.v1.worker.gpu.model_runner import sort_batch_req_ids
        found["sort_batch_req_ids"] = sort_batch_req_ids
    except ImportError:
        found["sort_batch_req_ids"] = None
    from . import moe, prompt_logprobs, v1_runner
    found["prompt_logprobs"] = prompt_logprobs.find()  # the V2 runner's PromptLogprobsWorker, or None
    found["moe_unavailable"] = moe.unavailable()  # why no MoE block (FusedMoEFactory, CPURouter: 0.31 on), or None
    found["v1"] = v1_runner.find()  # the V1 runner's InputBatch and dispatcher (up to 0.33), or None
    from . import v2_graphs
    found["v2_graphs"] = v2_graphs.find()  # the V2 runner's graph manager in this release's shape, or None
    _STATE["found"] = found
    return found


def distributed(device: str) -> None:
    """vLLM's distributed state on one rank, once per process (as vLLM's LoRA tests' ``dist_init``)."""
    if _STATE.get("distributed"):
        return
    import torch
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    if not torch.distributed.is_initialized():
        path = os.path.join(tempfile.mkdtemp(prefix="fuzzrunner-vllm-dist-"), "init")
        with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device=device))):
            ps.init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"file://{path}",
                                            local_rank=0, backend="gloo" if device == "cpu" else "nccl")
            ps.initialize_model_parallel(1, 1)
    _STATE["distributed"] = True


def configs(c: dict, model_dir: str, device: str):
    """vLLM's ``VllmConfig`` for a case (vLLM validates and applies the LoRA knobs as for a server)."""
    import torch
    from vllm.config import DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.config.lora import LoRAConfig
    model = ModelConfig(model=model_dir, tokenizer=model_dir, skip_tokenizer_init=True, max_model_len=64,
                        dtype=c.get("dtype", "float16"))
    lora_kw = {"max_loras": c["max_loras"], "max_lora_rank": c["max_lora_rank"], "max_cpu_loras": c["max_cpu_loras"],
               "lora_dtype": c["lora_dtype"], "fully_sharded_loras": c["fully_sharded_loras"],
               "specialize_active_lora": c["specialize_active_lora"], "target_modules": c.get("target_modules")}
    known = set(inspect.signature(LoRAConfig).parameters)
    lora = LoRAConfig(**{k: v for k, v in lora_kw.items() if k in known})
    sched = SchedulerConfig(max_num_seqs=c["max_num_seqs"], max_num_batched_tokens=c["max_num_batched_tokens"],
                            max_model_len=64, is_encoder_decoder=False)
    cfg = VllmConfig(model_config=model, lora_config=lora, scheduler_config=sched,
                     device_config=DeviceConfig(device=device))
    assert isinstance(cfg.lora_config.lora_dtype, torch.dtype)
    return cfg
