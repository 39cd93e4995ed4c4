"""SGLang's LoRA state machine across releases: what differs between API generations, found by what the release
has (signatures and attributes, never its version string), and each call made the way that release's own
model runner and scheduler make it.

Generations (docs/sglang.md has the per-release facts, ``scripts/sglang_api_facts.sh`` reads them from wheels):

* ``e0`` (0.5.5 - 0.5.7): ``LoRAManager(tp_size=, tp_rank=)``; ``prepare_lora_batch`` also loads the batch's
  adapters into the pool (no ``fetch_new_loras``);
* ``e1`` (0.5.8 - 0.5.13.post1): ``fetch_new_loras`` before ``prepare_lora_batch`` (as ``ForwardBatch.init_new``
  calls them);
* ``e2`` (0.5.14 - 0.5.21): the configuration is published into a runtime context;
* ``e3`` (0.5.22, 0.5.23): no ``tp_size`` / ``tp_rank`` (the manager reads the parallel context); SGLang's own
  test fixture for parallel groups without a process group (``sglang.test.parallel_groups``).

Independent of the generation, each found on its own: the decode graph's batch-info initializer
(``init_cuda_graph_batch_info(bs)``, ``(bs, num_tokens)`` from 0.5.5.post3, ``init_decode_cuda_graph_batch_info``
in 0.5.23), embedding / lm_head buffers in the pool (0.5.6.post2+: ``modules``), and whether
``unload_lora_adapter`` frees the adapter's pool slot (``LoRAMemoryPool.remove_lora``, 0.5.16+).

Where SGLang's test fixture is missing, the parallel state is set up as ``ModelRunner.init_torch_distributed``
sets it up, for a world of one (``init_distributed_environment``, ``initialize_model_parallel``,
``initialize_dp_attention``; gloo on the CPU), once per process; every case then publishes its ``ServerArgs`` as
``ModelRunner.__init__`` does (``set_global_server_args_for_scheduler``, a runtime-context publish from 0.5.14).
"""

from __future__ import annotations

import inspect
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

ALL_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head")


@dataclass
class EngineAPI:
    version: str
    manager_params: frozenset          # LoRAManager.__init__'s parameters
    fixture: Any = None                # sglang.test.parallel_groups.publish, where the release ships it
    publish_args: Any = None           # set_global_server_args_for_scheduler
    runtime_context: bool = False      # sglang.srt.runtime_context exists
    fetch: bool = False                # LoRAManager.fetch_new_loras exists
    graph_init: str = ""               # init_decode_cuda_graph_batch_info | init_cuda_graph_batch_info(bs, n) | (bs)
    modules: tuple = ALL_MODULES[:4]   # --lora-target-modules this release's pool has buffers for
    unload_frees_slot: bool = False    # LoRAMemoryPool.remove_lora exists
    lm_head_passes: bool = False       # ParallelLMHeadWithLoRA.set_lm_head_pass (per-pass logprob routing) exists
    server_fields: frozenset = frozenset()
    backends: tuple = ("triton", "csgmv")  # --lora-backend values drawn: the release's drivable ones (backends.py)
    _distributed: bool = field(default=False, repr=False)

    @property
    def generation(self) -> str:
        if self.fixture is not None and "tp_size" not in self.manager_params:
            return "e3"
        if self.runtime_context:
            return "e2"
        return "e1" if self.fetch else "e0"

    def found(self) -> list[str]:
        return [f"API generation {self.generation}",
                "configuration: " + ("runtime context (SGLang's parallel_groups fixture)" if self.fixture else
                                     "runtime context publish + a world-of-one process group" if self.runtime_context
                                     else "global server args + a world-of-one process group"),
                "adapter loading: " + ("fetch_new_loras, then prepare_lora_batch" if self.fetch else
                                       "prepare_lora_batch (loads the batch's adapters itself)"),
                f"decode graph batch info: {self.graph_init}",
                f"LoRA target modules: {', '.join(self.modules)}",
                f"LoRA backends drawn: {', '.join(self.backends)}",
                "unload: " + ("frees the pool slot (remove_lora)" if self.unload_frees_slot else
                              "leaves the pool (no remove_lora)")]

    # -- start-up, as the server does it ------------------------------------------------------------------
    def server_args(self, cls, **kw):
        """``ServerArgs`` of this release, with the knobs it has (a knob it lacks is dropped, never invented)."""
        return cls(**{k: v for k, v in kw.items() if k in self.server_fields})

    def publish(self, server_args, device: str, hf_config) -> None:
        if self.fixture is not None:
            self.fixture(server_args, role="scheduler")
            return
        self.publish_args(server_args)
        if not self._distributed:
            self._init_distributed(server_args, device)

    def _init_distributed(self, server_args, device: str) -> None:
        """``ModelRunner.init_torch_distributed`` for a world of one (once per process: groups outlive cases)."""
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
        from sglang.srt.layers.dp_attention import initialize_dp_attention
        init_file = os.path.join(tempfile.mkdtemp(prefix="sglang_engine-dist-"), "init")
        init_distributed_environment(backend="gloo" if device == "cpu" else "nccl", world_size=1, rank=0,
                                     local_rank=0, distributed_init_method=f"file://{init_file}")
        # 0.5.21+ read the widths (and the DP-attention topology) from the runtime context the publish filled: their
        # initialize_model_parallel has no tensor_model_parallel_size, their initialize_dp_attention no model_config
        mp = inspect.signature(initialize_model_parallel).parameters
        initialize_model_parallel(**({"tensor_model_parallel_size": 1} if "tensor_model_parallel_size" in mp else {}))
        if "model_config" in inspect.signature(initialize_dp_attention).parameters:
            initialize_dp_attention(server_args, ModelConfig.from_server_args(server_args))
        else:
            initialize_dp_attention(server_args)
        self._distributed = True

    def manager(self, cls, **kw):
        """``LoRAManager(...)`` as this release's ``ModelRunner.init_lora_manager`` calls it."""
        if "tp_size" in self.manager_params:
            kw.update(tp_size=1, tp_rank=0)
        return cls(**{k: v for k, v in kw.items() if k in self.manager_params})

    def init_graph(self, mgr, max_bs: int) -> None:
        """The decode graph runner's set-up before capture (``CudaGraphRunner.__init__``)."""
        if self.graph_init == "init_decode_cuda_graph_batch_info":
            mgr.init_decode_cuda_graph_batch_info(max_bs, 1)
        elif self.graph_init == "init_cuda_graph_batch_info(bs, n)":
            mgr.init_cuda_graph_batch_info(max_bs, 1)
        else:
            mgr.init_cuda_graph_batch_info(max_bs)

    # -- a batch: ForwardBatch.init_new's LoRA part --------------------------------------------------------
    def prepare(self, mgr, fb) -> None:
        if self.fetch:
            mgr.fetch_new_loras(set(fb.lora_ids))
        mgr.prepare_lora_batch(fb)


def _scheduler_publish(sa):
    """How the release's scheduler process publishes its ``ServerArgs``: ``runtime_context.publish(role="scheduler",
    ranks=SpawnRanks(...))`` with the launcher's placement where the release has ``SpawnRanks`` (0.5.21+: without
    it every rank read fails, "parallel name 'tp_rank' has not been written in this process"), else the
    ``set_global_server_args_for_scheduler`` shim."""
    try:
        from sglang.srt.runtime_context import SpawnRanks, publish
    except ImportError:
        return getattr(sa, "set_global_server_args_for_scheduler", None)
    # run_scheduler_process of a world of one: WORLD rank 0, no data-parallel controller, device 0
    return lambda server_args: publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=0))


def load(version: str) -> EngineAPI:
    """The release's generation, from what its modules have (imported already: boot.load)."""
    from sglang.srt import server_args as sa
    from sglang.srt.lora.lora_manager import LoRAManager
    from sglang.srt.lora.mem_pool import LoRAMemoryPool
    try:
        from sglang.test.parallel_groups import publish as fixture
    except ImportError:
        fixture = None
    try:
        import sglang.srt.runtime_context  # noqa: F401
        runtime_context = True
    except ImportError:
        runtime_context = False
    if hasattr(LoRAManager, "init_decode_cuda_graph_batch_info"):
        graph_init = "init_decode_cuda_graph_batch_info"
    elif len(inspect.signature(LoRAManager.init_cuda_graph_batch_info).parameters) > 2:
        graph_init = "init_cuda_graph_batch_info(bs, n)"
    else:
        graph_init = "init_cuda_graph_batch_info(bs)"
    embeddings = hasattr(LoRAMemoryPool, "get_embedding_lora_A_shape")
    from sglang.srt.lora import layers

    from . import backends
    lm_head_layer = getattr(layers, "ParallelLMHeadWithLoRA", None)
    return EngineAPI(
        version=version, manager_params=frozenset(inspect.signature(LoRAManager.__init__).parameters),
        fixture=fixture, publish_args=_scheduler_publish(sa),
        runtime_context=runtime_context, fetch=hasattr(LoRAManager, "fetch_new_loras"), graph_init=graph_init,
        modules=ALL_MODULES if embeddings else ALL_MODULES[:4],
        unload_frees_slot=hasattr(LoRAMemoryPool, "remove_lora"),
        lm_head_passes=hasattr(lm_head_layer, "set_lm_head_pass"),
        server_fields=frozenset(inspect.signature(sa.ServerArgs).parameters), backends=backends.drivable())


__all__ = ["ALL_MODULES", "EngineAPI", "load"]
