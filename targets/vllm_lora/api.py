"""The installed vLLM's LoRA pieces behind one interface, adapted per API generation.

Generations, told apart by signature (not by version string, so patch releases just work):

* ``g1`` (vLLM 0.8 – 0.1x): ``LoRAKernelMeta.make(max_loras, max_num_tokens, device)``,
  ``meta_args(token_nums)`` gives 6 tensors, the ops take no ``num_active_loras``: grid z is
  always ``max_loras + 1``; ``PunicaWrapperGPU(..., max_loras=)``.
* ``g2`` (0.17 – 0.33): ``make(..., captured_lora_counts)``, ``meta_args(token_nums,
  specialize_active_lora)`` gives 7, the ops take ``num_active_loras`` (a CPU tensor that sets
  grid z); ``PunicaWrapperGPU(..., lora_config=)``.

Releases without ``vllm.lora.ops.triton_ops.LoRAKernelMeta`` are refused with one line.

The other components are adapted (or left out, saying why, in ``found``) one by one:

* ``fused_moe_lora``: driven with naive block assignment (``sorted_token_ids=None``: the per-token
  path vLLM takes for small batches) by keyword, checked against the installed signature; the sorted
  path needs ``moe_lora_align_block_size``, a CUDA op of ``vllm._C``.
* ``PunicaWrapperGPU.update_metadata`` (``convert_mapping``), given a ``LoRAMapping`` of adapter ids.
* ``add_lora_embedding`` after ``VocabParallelEmbeddingWithLoRA``'s gather, which reads
  ``PunicaWrapperBase._embeddings_indices``: ``[2, max_num_batched_tokens]`` (row 1 holds the
  offsets) up to 0.2x, ``[max_num_batched_tokens]`` in 0.33.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from fuzzrunner import tracking
from fuzzrunner.errors import HarnessError, TargetUnavailable


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
    fused_moe: Any = None        # fused_moe_lora (the registered op), where the release has it and it can be driven
    fused_moe_private: Any = None  # _fused_moe_lora
    moe_mod: Any = None          # fused_moe_lora_op (its pointer cache)
    mapping_cls: Any = None      # LoRAMapping, where importable: the punica entry programs through update_metadata
    embedding_cls: Any = None    # VocabParallelEmbeddingWithLoRA, where it builds around a stand-in base layer
    found: list = field(default_factory=list)
    code: dict = field(default_factory=dict)  # which vLLM runs: release, tree, patch, its sha256
    protocol: str = "lora_warmup"  # how this release's V2 model runner programs LoRA for dummy runs
    dummy_select: Any = None     # vLLM's maybe_select_dummy_loras (dummy.py), where it takes num_active_loras
    patched: Any = None          # the patched copy imported (FUZZRUNNER_VLLM_PATCH: patching.py), else None

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

    def grid_z(self, meta, M: int, specialize: bool) -> int | None:
        """The grid z size the ops would launch with now; None on g1 (always max_loras + 1). The count is a
        CPU tensor from 0.17 on (read with ``.item()`` inside the op) and a Python int in 0.16."""
        if not self.has_grid_control:
            return None
        z = self.meta_args(meta, M, specialize)[-1]
        return int(z.item()) if hasattr(z, "item") else int(z)

    def set_grid_z(self, meta, z: int) -> None:
        """Set the count ``meta_args(..., specialize_active_lora=True)`` hands the ops (0.16: an int attribute)."""
        if hasattr(meta, "num_active_loras_cpu"):
            meta.num_active_loras_cpu[0] = z
        else:
            meta.num_active_loras = z

    @contextlib.contextmanager
    def frozen(self, meta, flag: bool, z: int | None, specialize: bool):
        """Launch with the host decisions a CUDA graph froze at capture (the no-LoRA flag; grid z), then
        give the metadata its own values back."""
        tensor = hasattr(meta, "num_active_loras_cpu")
        saved = (meta.no_lora_flag_cpu.clone(),
                 meta.num_active_loras_cpu.clone() if tensor else getattr(meta, "num_active_loras", None),
                 meta.default_num_active_loras_cpu.clone() if hasattr(meta, "default_num_active_loras_cpu") else None)
        meta.no_lora_flag_cpu[0] = flag
        if z is not None and (specialize or tensor):
            if not specialize:  # the constant max_loras + 1 (0.16 computes it in meta_args: nothing to freeze)
                meta.default_num_active_loras_cpu[0] = z
            else:
                self.set_grid_z(meta, z)
        try:
            yield
        finally:
            meta.no_lora_flag_cpu.copy_(saved[0])
            if tensor:
                meta.num_active_loras_cpu.copy_(saved[1])
            elif saved[1] is not None:
                meta.num_active_loras = saved[1]
            if saved[2] is not None:
                meta.default_num_active_loras_cpu.copy_(saved[2])

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
        if self.moe_mod is not None and hasattr(self.moe_mod, "_LORA_PTR_DICT"):
            self.moe_mod._LORA_PTR_DICT.clear()

    # -- the punica wrapper's own metadata path ------------------------------------------------
    def update_metadata(self, punica, index_ids: list[int], prompt_ids: list[int], lora_index_to_id: list,
                        vocab: int) -> None:
        """What ``LoRAModelManager._set_adapter_mapping`` does: a ``LoRAMapping`` of adapter ids (0 = none)
        through ``convert_mapping`` into the wrapper's buffers, then ``prepare_tensors`` of both metas."""
        mapping = self.mapping_cls(tuple(index_ids), tuple(prompt_ids), is_prefill=True)
        kwargs = {}
        if "extra_vocab_size" in inspect.signature(punica.update_metadata).parameters:
            kwargs["extra_vocab_size"] = 0  # releases before the extra vocabulary was removed
        punica.update_metadata(mapping, list(lora_index_to_id), len(lora_index_to_id) + 1, vocab, **kwargs)

    @staticmethod
    def embeddings_indices(punica, n: int):
        """The offsets ``VocabParallelEmbeddingWithLoRA.forward`` adds to the token ids: ``_embeddings_indices``
        is ``[2, max_num_batched_tokens]`` (row 1 is ``slot * (vocab + extra_vocab)``) up to 0.2x and
        ``[max_num_batched_tokens]`` (``slot * vocab``) in 0.33; told apart by its shape."""
        ind = punica._embeddings_indices
        return ind[1][:n] if ind.dim() == 2 else ind[:n]

    def embedding_layer(self, punica, lora_a, lora_b, base_weight):
        """An embedding layer with LoRA over ``punica``: ``(forward(token_ids) -> output, load(slot), stacks)``.

        vLLM's own ``VocabParallelEmbeddingWithLoRA`` (``create_lora_weights``, ``set_lora`` of each slot's
        ``lora_a`` [max_loras, vocab, rank] / ``lora_b`` [max_loras, 1, dim, rank], ``set_mapping``,
        ``forward``) around a stand-in base embedding (a real ``VocabParallelEmbedding`` needs vLLM's
        tensor-parallel state); where that class cannot be built, its forward re-stated: the gather at
        ``token id + _embeddings_indices`` (``embeddings_indices``), the base embedding, then
        ``add_lora_embedding``. Either way the gather is an ordinary torch op the shadow oracle sees; the
        wrapper's ``add_lora_embedding`` (a registered expand) runs quietly."""
        _quiet_method(punica, "add_lora_embedding")
        if self.embedding_cls is not None:
            layer = _build_embedding(self.embedding_cls, base_weight, lora_a.size(0), lora_a.size(2), lora_a.dtype)
            layer.set_mapping(punica)

            def load(s: int) -> None:
                layer.set_lora(s, lora_a[s].t(), lora_b[s, 0])
            for s in range(lora_a.size(0)):
                load(s)
            return layer.forward, load, (layer.lora_a_stacked, layer.lora_b_stacked)
        import torch.nn.functional as F
        a_2d = lora_a.view(-1, lora_a.size(2))

        def forward(token_ids):
            rows = F.embedding(token_ids + self.embeddings_indices(punica, token_ids.size(0)), a_2d)
            out = F.embedding(token_ids, base_weight)
            punica.add_lora_embedding(out, rows, lora_b, add_inputs=True)
            return out
        return forward, (lambda s: None), (lora_a, lora_b)

    # -- fused MoE ----------------------------------------------------------------------------
    def fused_moe_call(self, entry: str, punica, meta, specialize: bool, *, out, x, lora_a: list, lora_b: list,
                       topk_weights, topk_ids, adapter_enabled, rank: int, top_k: int, mul_routed_weight: bool,
                       check_flag: bool) -> None:
        """``fused_moe_lora`` with naive block assignment (``sorted_token_ids=None``, ``expert_ids`` the flat
        ``topk_ids``), the metadata from ``meta_args`` as ``add_lora_fused_moe`` takes it. ``entry`` punica
        with ``check_flag`` calls the wrapper's ``add_lora_fused_moe``; otherwise the runner calls the op
        itself and, with ``check_flag``, first skips it on the no-LoRA flag as the wrapper of 0.33 does."""
        args = self.meta_args(meta, x.size(0), specialize)  # as add_lora_fused_moe slices it
        mapping, lora_ids, flag = args[0], args[4], args[5]
        num_active = args[6] if self.generation == "g2" else None
        cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1, "NUM_WARPS": 4,
               "NUM_STAGES": 2, "SPLIT_K": 1}
        if entry == "punica" and check_flag:
            with opaque_op():
                punica.add_lora_fused_moe(out, x, tuple(lora_a), tuple(lora_b), topk_weights, None,
                                          topk_ids.reshape(-1), None, rank, top_k, cfg, cfg, adapter_enabled,
                                          mul_routed_weight=mul_routed_weight)
            return
        if check_flag and bool(flag.item()):
            return
        kw = {"output": out, "qcurr_hidden_states": x, "lora_a_stacked": list(lora_a), "lora_b_stacked": list(lora_b),
              "topk_weights": topk_weights, "sorted_token_ids": None, "expert_ids": topk_ids.reshape(-1),
              "num_tokens_post_padded": None, "token_lora_mapping": mapping, "max_lora_rank": rank,
              "top_k_num": top_k, "lora_ids": lora_ids, "num_active_loras": num_active,
              "adapter_enabled": adapter_enabled, "mul_routed_weight": mul_routed_weight,
              "fully_sharded": False, "offset": 0, "add_inputs": True}
        for stage in ("shrink", "expand"):
            kw.update({f"{stage}_block_size_m": 16, f"{stage}_block_size_n": 32, f"{stage}_block_size_k": 32,
                       f"{stage}_group_size_m": 1, f"{stage}_num_warps": 4, f"{stage}_num_stages": 2,
                       f"{stage}_split_k": 1})
        params = inspect.signature(self.fused_moe_private).parameters
        kw = {k: v for k, v in kw.items() if k in params}
        if entry == "public":
            with opaque_op():
                self.fused_moe(**kw)
        else:
            self.fused_moe_private(**kw)

    @property
    def has_moe(self) -> bool:
        return self.fused_moe is not None

    @property
    def has_embedding(self) -> bool:
        return self.punica_cls is not None and self.mapping_cls is not None

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


MOE_ARGS = {"output", "qcurr_hidden_states", "lora_a_stacked", "lora_b_stacked", "topk_weights", "sorted_token_ids",
            "expert_ids", "num_tokens_post_padded", "token_lora_mapping", "max_lora_rank", "top_k_num", "lora_ids",
            "num_active_loras", "adapter_enabled", "mul_routed_weight", "fully_sharded", "offset", "add_inputs"} | {
    f"{s}_{k}" for s in ("shrink", "expand")
    for k in ("block_size_m", "block_size_n", "block_size_k", "group_size_m", "num_warps", "num_stages", "split_k")}


def _moe(ops, device: str) -> tuple[Any, Any, Any, str]:
    """(fused_moe_lora, _fused_moe_lora, its module, what doctor says): drivable only where the installed
    ``_fused_moe_lora`` takes what the target passes and a ``None`` ``sorted_token_ids`` (naive blocks)."""
    if not hasattr(ops, "fused_moe_lora"):
        return None, None, None, "fused_moe_lora: not in this release"
    mod = sys.modules.get("vllm.lora.ops.triton_ops.fused_moe_lora_op")
    private = getattr(mod, "_fused_moe_lora", None)
    if private is None:
        return None, None, None, "fused_moe_lora: found, not driven (no _fused_moe_lora in fused_moe_lora_op)"
    params = inspect.signature(private).parameters
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in MOE_ARGS]
    sorted_ann = str(params["sorted_token_ids"].annotation) if "sorted_token_ids" in params else ""
    if missing or "None" not in sorted_ann:
        why = f"takes {', '.join(missing)}" if missing else "no naive block assignment (sorted_token_ids not optional)"
        return None, None, None, f"fused_moe_lora: found, not driven ({why}; the sorted path needs vllm._C)"
    if device == "cpu" and hasattr(mod, "current_platform"):
        mod.current_platform = _CpuPlatform(mod.current_platform)
    if device == "cuda" and hasattr(mod, "get_max_shared_memory_bytes") and \
            importlib.util.find_spec("vllm._C") is None:
        mod.get_max_shared_memory_bytes = _shared_memory_from_torch
    return ops.fused_moe_lora, private, mod, "fused_moe_lora (naive block assignment)"


class _BaseEmbedding:
    """Stands in for ``VocabParallelEmbedding`` (one rank: the whole vocabulary) under the LoRA layer."""

    def __init__(self, weight):
        self.weight = weight
        self.org_vocab_size, self.embedding_dim = weight.shape
        self.num_embeddings = self.num_embeddings_per_partition = self.org_vocab_size
        # releases before 0.2x's removal of the extra vocabulary read these in create_lora_weights
        self.num_org_embeddings_per_partition, self.num_added_embeddings_per_partition = self.org_vocab_size, 0

    def forward(self, x):
        import torch.nn.functional as F
        return F.embedding(x, self.weight)


def _build_embedding(cls, base_weight, max_loras: int, rank: int, dtype):
    layer = cls(_BaseEmbedding(base_weight))
    cfg = SimpleNamespace(max_loras=max_loras, max_lora_rank=rank, lora_dtype=dtype, lora_extra_vocab_size=0)
    layer.create_lora_weights(max_loras, cfg)
    return layer


def _quiet_method(obj, name: str) -> None:
    """Run ``obj.name`` (a call of vLLM's registered ops) inside ``opaque_op()``, once per object."""
    fn = getattr(obj, name)
    if getattr(fn, "_fuzzrunner_quiet", False):
        return

    def quiet(*args, **kwargs):
        with opaque_op():
            return fn(*args, **kwargs)
    quiet._fuzzrunner_quiet = True  # type: ignore[attr-defined]
    setattr(obj, name, quiet)


class _CpuPlatform:
    """On the CPU, for ``fused_moe_lora_op`` only: vLLM's platform, except the compute-unit count that
    sizes the MoE grids (the unspecified platform raises): 4, so the persistent small-batch kernel
    loops over several work items per program."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def num_compute_units(self, device_id=None) -> int:
        return 4


def _shared_memory_from_torch(gpu: int = 0) -> int:
    """vLLM asks ``vllm._C`` (not carried to the GPU machine); torch knows the same attribute."""
    import torch
    props = torch.cuda.get_device_properties(gpu or 0)
    return int(getattr(props, "shared_memory_per_block_optin", 0) or getattr(props, "shared_memory_per_block", 0)
               or 48 * 1024)


def runner_protocol() -> str:
    """Read (not import: it pulls the whole engine) the installed V2 model runner's dummy-run code."""
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


def _mapping(api: VllmApi, device: str) -> list[str]:
    """LoRAMapping (0.33: vllm.lora.layers; older: vllm.lora.layers.utils or vllm.lora.layers); with it the
    punica entry programs through update_metadata and drives the embedding path. On the CPU each is tried
    once here, on a tiny wrapper (a zero mapping: no kernel launches), so that a release whose pieces do
    not fit is told apart at load, not by a crash in every case. On a GPU only the layer is built (on the
    CPU): a trial there would start CUDA in the process that forks the workers."""
    import torch
    for where in ("vllm.lora.layers", "vllm.lora.layers.utils"):
        try:
            api.mapping_cls = importlib.import_module(where).LoRAMapping
            break
        except (ImportError, AttributeError):
            continue
    if api.mapping_cls is None:
        return ["update_metadata, add_lora_embedding: not driven (no LoRAMapping importable)"]
    punica = None
    if device == "cpu":
        try:
            punica = api.make_punica(1, 4, 4, torch.device("cpu"), False)
            api.update_metadata(punica, [0] * 4, [0], [1], 4)
        except Exception as e:  # noqa: BLE001 - the punica entry then prepares the metas directly
            api.mapping_cls = None
            return [f"update_metadata, add_lora_embedding: not driven (update_metadata: {type(e).__name__}: "
                    f"{str(e)[:100]})"]
    how = "its forward re-stated"
    try:
        from vllm.lora.layers import VocabParallelEmbeddingWithLoRA
        layer = _build_embedding(VocabParallelEmbeddingWithLoRA, torch.zeros(4, 2, dtype=torch.float16), 1, 1,
                                 torch.float16)
        if punica is not None:
            layer.set_mapping(punica)
            layer.forward(torch.zeros(4, dtype=torch.long))
        api.embedding_cls, how = VocabParallelEmbeddingWithLoRA, "vLLM's layer around a stand-in base embedding"
    except Exception as e:  # noqa: BLE001 - any failure to build or run leaves the re-stated forward
        how += f" (VocabParallelEmbeddingWithLoRA: {type(e).__name__}: {str(e)[:80]})"
    return ["PunicaWrapperGPU.update_metadata (convert_mapping)",
            f"PunicaWrapperGPU.add_lora_embedding through VocabParallelEmbeddingWithLoRA ({how})"]


def _check_triton_on(version: str) -> None:
    """vLLM decides at import whether Triton runs (``vllm.triton_utils.HAS_TRITON``); where it says no, its ``@jit``
    hands back plain Python functions and its punica wrapper never imports ``LoRAKernelMeta`` (the NameError a site
    copy without vLLM's dist-info met on 0.24): the target would fuzz no kernel at all. Refused, saying why."""
    tu = sys.modules.get("vllm.triton_utils")
    if tu is None or getattr(tu, "HAS_TRITON", True):
        return
    try:
        importlib.metadata.version("vllm")
        why = ("its Triton driver check failed: VLLM_LOGGING_LEVEL=INFO shows vLLM's reason; on the CPU, "
               "CUDA_VISIBLE_DEVICES must be empty and TRITON_INTERPRET=1")
    except importlib.metadata.PackageNotFoundError:
        why = ("no vllm-*.dist-info is on sys.path and vLLM reads its own version from it; copy the release's "
               "dist-info beside vllm/ (in FUZZRUNNER_VLLM_SITE's directory)")
    raise TargetUnavailable(f"vLLM {version} switched its Triton off at import (vllm.triton_utils.HAS_TRITON is "
                            f"False), so its LoRA kernels would run as plain Python or not at all: {why}.")


def _import_ops(version: str):
    """vLLM's Triton LoRA ops: (the package, lora_shrink_op, lora_expand_op, utils); a release without them, or a
    tree missing a package they import, refused with one line saying which."""
    try:
        import vllm.lora.ops.triton_ops as ops
        from vllm.lora.ops.triton_ops import lora_expand_op, lora_shrink_op, utils
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] == "vllm":
            raise HarnessError(f"vLLM {version} has no vllm.lora.ops.triton_ops ({e}); the vllm_lora target supports "
                               f"the releases with LoRAKernelMeta (0.8 and later, tested 0.12 - 0.33).") from None
        raise TargetUnavailable(f"vLLM {version}'s LoRA ops import {e.name!r}, which is not importable here: run "
                                f"scripts/vllm_setup.sh {version} (its deps/), or give FUZZRUNNER_VLLM_SITE's "
                                f"directory a deps/ folder that holds it.") from None
    except ImportError as e:
        raise HarnessError(f"vLLM {version} has no vllm.lora.ops.triton_ops ({e}); the vllm_lora target "
                           f"supports the releases with LoRAKernelMeta (0.8 and later, tested 0.12 - 0.33).") from None
    return ops, lora_shrink_op, lora_expand_op, utils


def load(device: str) -> VllmApi:
    notes = []
    import vllm
    version = getattr(vllm, "__version__", "?")
    ops, lora_shrink_op, lora_expand_op, utils = _import_ops(version)
    if not hasattr(ops, "LoRAKernelMeta"):
        raise HarnessError(f"vLLM {version} has no LoRAKernelMeta; the vllm_lora target supports 0.8 and later.")
    _check_triton_on(version)
    params = inspect.signature(ops.LoRAKernelMeta.meta_args).parameters
    generation = "g2" if "specialize_active_lora" in params else "g1"
    api = VllmApi(version, generation, ops, lora_shrink_op, lora_expand_op, utils)
    api.protocol = runner_protocol()
    from . import dummy
    api.dummy_select, said_dummy = dummy.load()
    api.found = ["LoRAKernelMeta", "lora_shrink", "_lora_shrink", "lora_expand", "_lora_expand"]
    api.fused_moe, api.fused_moe_private, api.moe_mod, said = _moe(ops, device)
    api.found.append(said)
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
    if api.punica_cls is not None:  # after the CPU settings above: the trial programs a wrapper
        api.found += _mapping(api, device)
    api.found += notes + [said_dummy]
    api.found.append(f"dummy-run protocol {api.protocol}: {PROTOCOLS[api.protocol]}")
    return api
