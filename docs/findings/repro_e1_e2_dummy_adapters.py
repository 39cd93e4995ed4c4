#!/usr/bin/env python3
"""vLLM LoRA, the V2 model runner's dummy runs: E1 (a dummy run evicts a real adapter holding a warm-up id, or
meets a pinned one: the engine core dies) and E2 (LoRA on lm_head alone: the start-up profile run dies).

Standalone: needs only an importable vLLM (0.12 or later; checked on 0.12.0, 0.14.0, 0.33.0 and 0.34.0) and its
torch; nothing else. On a machine with no GPU, vLLM's CPU-importable modules are enough (``--device cpu``).

    python repro_e1_e2_dummy_adapters.py              # GPU if there is one, else the CPU
    python repro_e1_e2_dummy_adapters.py --device cpu

Each row builds, with vLLM's own code, what a V2 model runner holds for LoRA: ``VllmConfig`` (``LoRAConfig``), a
one-layer model of vLLM's layer classes (``RowParallelLinear`` ``o_proj``, ``ParallelLMHead`` + ``LogitsProcessor``)
registered in ``ModelRegistry``, and ``LoRAModelRunnerMixin.load_lora_model`` (``LRUCacheWorkerLoRAManager`` over
``LRUCacheLoRAModelManager``); adapters are PEFT folders on disk, added with the mixin's ``add_lora``. The dummy
run is the mixin's ``maybe_dummy_run_with_lora(lora_config, tokens, None, remove_lora=True,
num_active_loras=max_loras)``, what the V2 runner's ``_dummy_run`` calls (``execute_dummy_batch``: an idle
data-parallel rank; ``profile_run`` at start-up). Before 0.16 the mixin takes no count: the dummy run is then
what the V1 runner's ``execute_dummy_batch`` -> ``_dummy_run(1)`` calls (``activate_lora=False``: a zero mapping,
but every warm-up adapter still activated). The forward is not needed: the failures are in the set-up.

* E1, first form: ``max_loras = max_cpu_loras = 2``; real adapters ``j`` (a warm-up id) then ``3``; a dummy run.
  vLLM skips the dummy of id ``j`` (registered), adds the other dummy, which evicts ``j`` (the oldest), then
  asks for ``warmup_j``: loaded from "/not/a/real/path". Which warm-up id is ``j`` follows the order of vLLM's
  set of warm-up requests, hashed per process (PYTHONHASHSEED): the row reads that order the same way first.
* E1, second form: ``max_loras = 2``, ``max_cpu_loras = 3``; adapter ``4`` added and pinned; a dummy run asks for
  two dummies with one slot free: ``KeyError`` in ``convert_mapping``, where the warm-up set's order is [1, 2]
  (it changes from one process to the next: 0.33.0 hashes a request by its name, 0.34.0 by name and id; with
  [2, 1] this form passes).
  (With ``max_cpu_loras = 2`` the dummies evict each other from the CPU cache instead: the first form's error.)
* E2: ``target_modules = ["lm_head"]``: the profile run's dummy adapter has no weights: ``RuntimeError:
  generator raised StopIteration``.
* control: the first form with ``max_cpu_loras = 4``: nothing evicted, no error.

Exit status: 1 while a bug row fails as described, 0 when every row passes, 2 when something else is wrong
(the control fails, a row fails otherwise, or vLLM cannot be imported).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import traceback

ARCH = "ReproTinyLoRAForCausalLM"
HIDDEN, VOCAB, RANK = 16, 32, 8


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    return p.parse_args()


def model_class():
    from torch import nn
    from vllm.model_executor.layers.linear import RowParallelLinear
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    from vllm.model_executor.models.interfaces import SupportsLoRA

    class ReproTinyLoRAForCausalLM(nn.Module, SupportsLoRA):
        packed_modules_mapping: dict = {}
        embedding_modules = {"lm_head": "output_embeddings"}

        def __init__(self, *, vllm_config, prefix: str = ""):
            super().__init__()
            self.config = vllm_config.model_config.hf_config
            self.model = nn.Module()
            layer = nn.Module()
            layer.self_attn = nn.Module()
            layer.self_attn.o_proj = RowParallelLinear(HIDDEN, HIDDEN, bias=False,
                                                       prefix="model.layers.0.self_attn.o_proj")
            self.model.layers = nn.ModuleList([layer])
            self.lm_head = ParallelLMHead(VOCAB, HIDDEN, prefix="lm_head")
            self.logits_processor = LogitsProcessor(VOCAB)

        # what vLLM's model inspection asks of a text-generation model (never run here)
        def embed_input_ids(self, input_ids):
            raise NotImplementedError("not run by this repro")

        def forward(self, input_ids, positions):
            raise NotImplementedError("not run by this repro")

        def compute_logits(self, hidden_states):
            return self.logits_processor(self.lm_head, hidden_states)

    ReproTinyLoRAForCausalLM.__name__ = ReproTinyLoRAForCausalLM.__qualname__ = ARCH
    return ReproTinyLoRAForCausalLM


def write_model(folder: str) -> str:
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"architectures": [ARCH], "model_type": "llama", "hidden_size": HIDDEN, "intermediate_size": 32,
                   "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "num_hidden_layers": 1,
                   "vocab_size": VOCAB, "max_position_embeddings": 64, "torch_dtype": "float16",
                   "tie_word_embeddings": False}, f)
    return folder


def write_adapter(folder: str, seed: int) -> str:
    import torch
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    name = "base_model.model.model.layers.0.self_attn.o_proj"
    save_file({f"{name}.lora_A.weight": torch.randn(RANK, HIDDEN, generator=g),
               f"{name}.lora_B.weight": torch.randn(HIDDEN, RANK, generator=g)},
              os.path.join(folder, "adapter_model.safetensors"))
    with open(os.path.join(folder, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": RANK, "lora_alpha": 16, "target_modules": ["o_proj"], "bias": "none",
                   "task_type": "CAUSAL_LM"}, f)
    return folder


class Setup:
    """What one engine's worker holds for LoRA, made by vLLM."""

    def __init__(self, device: str, work: str, max_loras: int, max_cpu_loras: int, target_modules=None):
        import inspect

        import torch
        from vllm.config import DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig, set_current_vllm_config
        from vllm.config.lora import LoRAConfig
        from vllm.v1.worker.lora_model_runner_mixin import LoRAModelRunnerMixin

        model_dir = write_model(work)
        kw = {"max_loras": max_loras, "max_cpu_loras": max_cpu_loras, "max_lora_rank": RANK}
        if target_modules is not None:
            if "target_modules" not in inspect.signature(LoRAConfig).parameters:
                raise RuntimeError("this vLLM's LoRAConfig has no target_modules (--lora-target-modules)")
            kw["target_modules"] = target_modules
        self.cfg = VllmConfig(
            model_config=ModelConfig(model=model_dir, tokenizer=model_dir, skip_tokenizer_init=True, max_model_len=64,
                                     dtype="float16"),
            lora_config=LoRAConfig(**kw),
            scheduler_config=SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=8, max_model_len=64,
                                             is_encoder_decoder=False),
            device_config=DeviceConfig(device=device))

        class Runner(LoRAModelRunnerMixin):
            def __init__(self, lora_config):
                self.lora_config = lora_config

        self.runner = Runner(self.cfg.lora_config)
        self.work = work
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float16)
        try:
            with set_current_vllm_config(self.cfg), torch.device(device):
                model = model_class()(vllm_config=self.cfg)
        finally:
            torch.set_default_dtype(old)
        self.runner.load_lora_model(model, self.cfg, torch.device(device))

    def add(self, adapter_id: int) -> None:
        from vllm.lora.request import LoRARequest
        path = write_adapter(os.path.join(self.work, f"adapter-{adapter_id}"), adapter_id)
        self.runner.add_lora(LoRARequest(f"adapter-{adapter_id}", adapter_id, path))

    def dummy_run(self, tokens: list[int]) -> None:
        """0.24 and later: the V2 runner's ``_dummy_run`` (``num_active_loras=max_loras``). Older mixins take no
        count: there it is the V1 runner's ``_dummy_run`` as ``execute_dummy_batch`` calls it (``activate_lora``
        False, as 0.12 - 0.14 default it), whose ``maybe_select_dummy_loras`` still activates every warm-up id."""
        import inspect

        import numpy as np
        lora = self.cfg.lora_config
        params = inspect.signature(self.runner.maybe_dummy_run_with_lora).parameters
        kw = {"remove_lora": True, "num_active_loras": lora.max_loras, "activate_lora": False}
        if "num_active_loras" in params:
            kw.pop("activate_lora")
        tokens_np = np.array(tokens, dtype=np.int32)
        with self.runner.maybe_dummy_run_with_lora(lora, tokens_np, np.ones_like(tokens_np),
                                                   **{k: v for k, v in kw.items() if k in params}):
            pass


def warmup_order(max_loras: int) -> list[int]:
    """The ids in the order vLLM's ``maybe_setup_dummy_loras`` iterates its set of warm-up requests in this
    process: the same set, built the same way."""
    from vllm.lora.request import LoRARequest
    return [r.lora_int_id for r in {LoRARequest(lora_name=f"warmup_{i}", lora_int_id=i, lora_path="/not/a/real/path")
                                    for i in range(1, max_loras + 1)}]


def e1_first_form(device, work, max_cpu_loras=2):
    s = Setup(device, work, max_loras=2, max_cpu_loras=max_cpu_loras)
    j = warmup_order(2)[0]
    s.add(j)  # the older: evicted by the other warm-up dummy
    s.add(3)
    s.dummy_run([2])


def e1_second_form(device, work):
    s = Setup(device, work, max_loras=2, max_cpu_loras=3)  # room for the pinned adapter and both dummies
    s.add(4)
    s.runner.pin_lora(4)
    s.dummy_run([2])


def e2(device, work):
    s = Setup(device, work, max_loras=2, max_cpu_loras=2, target_modules=["lm_head"])
    s.dummy_run([4, 4])  # the profile run: max_num_batched_tokens over the requests


ROWS = [  # (label, function, the error that shows the bug: type name, a substring; None for a control)
    ("E1 first form: max_cpu_loras = 2", e1_first_form, ("LoRAAdapterNotFoundError", "/not/a/real/path")),
    ("E1 second form: a pinned adapter", e1_second_form, ("KeyError", "")),
    ("E2: target_modules = [lm_head]", e2, ("RuntimeError", "StopIteration")),
    ("control: E1 first form, max_cpu_loras = 4", lambda d, w: e1_first_form(d, w, max_cpu_loras=4), None),
]


def prepare(device: str) -> None:
    """vLLM's distributed state on one rank (as vLLM's LoRA tests set it up), the model registered; on the CPU,
    the platform's answer for the punica wrapper (vLLM's no-GPU platform has none: a CUDA platform answers
    PunicaWrapperGPU) and no pinned host memory (a CPU-only torch cannot pin)."""
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.model_executor.models import ModelRegistry
    ModelRegistry.register_model(ARCH, model_class())
    init = os.path.join(tempfile.mkdtemp(prefix="repro-e1-dist-"), "init")
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device=device))):
        ps.init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"file://{init}", local_rank=0,
                                        backend="gloo" if device == "cpu" else "nccl")
        ps.initialize_model_parallel(1, 1)
    if device == "cpu":
        import vllm.lora.punica_wrapper.punica_selector as selector
        real = selector.current_platform

        class CpuPunica:
            def __getattr__(self, name):
                return getattr(real, name)

            @staticmethod
            def get_punica_wrapper() -> str:
                return "vllm.lora.punica_wrapper.punica_gpu.PunicaWrapperGPU"
        selector.current_platform = CpuPunica()
        for name, mod in list(sys.modules.items()):
            if name.startswith("vllm") and getattr(mod, "PIN_MEMORY", None) is True:
                mod.PIN_MEMORY = False
            if name.startswith("vllm") and callable(getattr(mod, "is_pin_memory_available", None)):
                mod.is_pin_memory_available = lambda: False  # older releases ask at each call


def _older_spelling(expected: str, got: tuple) -> bool:
    """The same failure as older releases raise it: ``ValueError("Loading lora ... failed: No adapter found ...")``
    before ``LoRAAdapterNotFoundError`` (0.14), ``ValueError("... is not in list")`` from ``convert_mapping``'s
    ``list.index`` before its dict of ids (0.24)."""
    if got[0] != "ValueError":
        return False
    return ((expected == "LoRAAdapterNotFoundError" and "No adapter found" in got[1])
            or (expected == "KeyError" and "is not in list" in got[1]))


def main() -> int:
    args = parse()
    device = args.device
    if device == "auto":
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        import vllm
        prepare(device)
    except Exception as e:  # noqa: BLE001
        print(f"cannot set up vLLM here: {type(e).__name__}: {e}")
        return 2
    print(f"vLLM {vllm.__version__}, {device}; the warm-up set's order in this process: {warmup_order(2)} "
          f"(the second form needs [1, 2])")
    bugs, wrong = 0, 0
    for label, fn, expected in ROWS:
        work = tempfile.mkdtemp(prefix="repro-e1-")
        try:
            fn(device, work)
            got = None
        except Exception as e:  # noqa: BLE001 - the row's outcome
            got = (type(e).__name__, f"{type(e).__name__}: {e}".splitlines()[0][:200], traceback.format_exc())
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if got is None:
            print(f"  {label}: ok" + (" (the bug is not there)" if expected else ""))
        elif "has no target_modules" in got[1]:
            print(f"  {label}: n/a (this release has no --lora-target-modules)")
        elif expected and (got[0] == expected[0] or _older_spelling(expected[0], got)) and expected[1] in got[1]:
            bugs += 1
            print(f"  {label}: BUG: {got[1]}")
        else:
            wrong += 1
            print(f"  {label}: unexpected {got[1]}\n{got[2]}")
    return 2 if wrong else (1 if bugs else 0)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - an engine that does not import or crashes: "could not run" (2), never "bug" (1)
        traceback.print_exc()
        print("could not run (exit 2)", file=sys.stderr)
        sys.exit(2)
