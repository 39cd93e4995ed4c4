#!/usr/bin/env python3
"""vLLM LoRA, ``specialize_active_lora=True``: a CUDA graph captured for k adapters skips an adapter of
a batch that mixes those k adapters with base-model (no-LoRA) tokens.

Standalone: needs only an importable vLLM (0.17 or later) and its torch/Triton; nothing else.

    python repro_v1_specialize_active_lora.py              # GPU if there is one, else the CPU
    python repro_v1_specialize_active_lora.py --device cpu # Triton's interpreter, no GPU needed

What it does, per row of the table below, with vLLM's own code wherever vLLM has it:

1. ``LoRAKernelMeta.make(max_loras, ..., captured_lora_counts=get_captured_lora_counts(max_loras, True))``
   (as ``PunicaWrapperGPU`` makes it with ``specialize_active_lora=True``);
2. the capture: vLLM's ``LoRAModelRunnerMixin.maybe_select_dummy_loras(num_active_loras=key)`` builds
   the dummy mapping for capture key ``key`` (called with a stand-in ``self`` that records the mapping;
   adapter id i -> slot i-1, id 0 -> -1 as ``convert_mapping`` does), ``prepare_tensors`` of it, an
   eager warm-up, then ``torch.cuda.CUDAGraph`` capture of ``lora_shrink`` + ``lora_expand`` with
   ``meta_args(size, specialize_active_lora=True)``, exactly what the model's LoRA linear layer runs;
3. the run-time batch: the graph vLLM's dispatcher picks is the key = number of distinct adapters in
   the batch (the no-LoRA id is not a LoRA request), rounded up to a captured count; ``prepare_tensors``
   of the batch's mapping, then ``graph.replay()``;
4. compared with an eager launch on the same metadata and with a float64 reference.

On the CPU (no CUDA graphs) step 2 records what a capture freezes: the ops read ``no_lora_flag_cpu`` and
``num_active_loras`` (the grid's z size) with ``.item()`` on the host, so a graph replays the captured
values; step 3 launches with those values (and the run-time metadata), which is what the replay does.

Exit status: 1 while the bug is there (a bug row's replay differs from eager), 0 when every replay
equals eager and the reference, 2 when something else is wrong (a control row or an eager launch
fails, or vLLM cannot be imported).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import inspect
import os
import sys
from types import SimpleNamespace

# (label, max_loras, graph size in tokens, capture key, the run-time batch's slot per token, bug expected)
ROWS = [
    ("1 adapter + base, key 1", 1, 4, 1, [0, 0, -1, -1], True),
    ("2 adapters + base, key 2", 4, 4, 2, [-1, 0, 1, 1], True),
    ("4 adapters + base, key 4", 4, 8, 4, [-1, 0, 1, 2, 3], True),
    ("control: 1 adapter only, key 1", 1, 4, 1, [0, 0, 0, 0], False),
    ("control: 3 adapters + base, key 4", 4, 8, 4, [-1, 0, 1, 2], False),
]
HIDDEN, RANK, OUT, SCALE = 64, 16, 32, 0.5


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    return p.parse_args()


def setup_cpu() -> None:
    """Before vLLM is imported: Triton's interpreter, and no visible GPU (vllm.triton_utils keeps the
    real Triton when CUDA_VISIBLE_DEVICES is empty; otherwise, with no driver, it swaps in a stub)."""
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def cpu_tweaks(shrink_mod, expand_mod, utils) -> None:
    """On the CPU only: small launch shapes (vLLM's small-batch default, split_k=64, is ~200 interpreted
    programs per launch) and no pinned host memory (a CPU-only torch cannot pin). Kernels, metadata and
    host-side checks stay vLLM's."""
    original = utils.get_lora_op_configs

    def configs(op_type, *args, **kwargs):
        cfg = dict(original(op_type, *args, **kwargs))
        cfg.update(dict(block_m=16, block_n=16, block_k=64, split_k=1) if op_type == "shrink"
                   else dict(block_m=16, block_n=64, block_k=16))
        return cfg
    for mod in (shrink_mod, expand_mod):
        mod.get_lora_op_configs = configs
    home = sys.modules.get(utils.async_tensor_h2d.__module__)
    if home is not None and hasattr(home, "PIN_MEMORY"):
        home.PIN_MEMORY = False


def dummy_mapping_function():
    """vLLM's ``maybe_select_dummy_loras`` (unbound): imported, or, where its module cannot be imported
    here (it pulls the engine), compiled from the installed source file itself. Returns (fn, how)."""
    try:
        from vllm.v1.worker.lora_model_runner_mixin import LoRAModelRunnerMixin
        return LoRAModelRunnerMixin.maybe_select_dummy_loras, "imported"
    except Exception as e:  # noqa: BLE001 - fall back to the source of the same function
        why = f"{type(e).__name__}: {str(e)[:80]}"
    spec = importlib.util.find_spec("vllm.v1.worker.lora_model_runner_mixin")
    if spec is None or not spec.origin:
        raise RuntimeError("vllm.v1.worker.lora_model_runner_mixin not found: is this vLLM 0.17 or later?")
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    fn = next(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body
              if isinstance(n, ast.FunctionDef) and n.name == "maybe_select_dummy_loras")
    for a in fn.args.args + fn.args.kwonlyargs:
        a.annotation = None
    fn.returns = None
    import numpy as np
    from vllm.lora.request import LoRARequest
    ns = {"np": np, "contextmanager": contextlib.contextmanager, "LoRARequest": LoRARequest, "torch": None}
    for where in ("vllm.lora.layers.utils", "vllm.lora.layers"):  # a default value of the signature names it
        try:
            ns["LoRAMappingType"] = importlib.import_module(where).LoRAMappingType
            break
        except Exception:  # noqa: BLE001 - the next place, else a stand-in (only passed on to our recorder)
            continue
    ns.setdefault("LoRAMappingType", SimpleNamespace(LANGUAGE="language"))
    exec(compile(ast.Module([fn], []), spec.origin, "exec"), ns)  # noqa: S102 - vLLM's own code
    return ns["maybe_select_dummy_loras"], f"compiled from {spec.origin} (import failed: {why})"


class _Recorder:
    """Stands in for the model runner: ``maybe_select_dummy_loras`` calls ``self._set_active_loras``."""

    def __init__(self):
        self.lora_manager = object()
        self.token_mapping = None

    def _set_active_loras(self, *args, **kwargs):
        self.token_mapping = list(args[1] if len(args) > 1 else kwargs["token_lora_mapping"])


def capture_slots(select, max_loras: int, size: int, key: int) -> list[int]:
    """The dummy mapping vLLM programs before capturing the graph for ``key`` adapters: ``size`` dummy
    requests of one token each (a decode batch), adapter ids -> slots (id i in slot i-1, 0 -> -1)."""
    import numpy as np
    rec = _Recorder()
    cfg = SimpleNamespace(max_loras=max_loras, specialize_active_lora=True)
    kwargs = {"num_active_loras": key} if "num_active_loras" in inspect.signature(select).parameters else {}
    with select(rec, cfg, np.ones(size, dtype=np.int32), **kwargs):
        pass
    return [int(i) - 1 if int(i) > 0 else -1 for i in rec.token_mapping]


def captured_counts(max_loras: int) -> list[int]:
    try:
        from vllm.lora.utils import get_captured_lora_counts
        return list(get_captured_lora_counts(max_loras, True))
    except ImportError:  # the same rule: powers of two up to max_loras, then max_loras + 1
        return [n for n in range(1, max_loras + 2) if n & (n - 1) == 0 or n == max_loras + 1]


def dispatch_key(slots: list[int], counts: list[int]) -> int:
    """The V1 runner's ``len(input_batch.lora_id_to_lora_request)`` / the V2 runner's
    ``get_num_active_loras_for_dispatch``: the batch's adapters, rounded up to a captured count."""
    n = len({s for s in slots if s >= 0})
    return next((c for c in counts if c >= n), n)


def capture(meta, layer, dev: str):
    """(graph or None on the CPU, the no-LoRA flag and the grid z the capture froze)."""
    import torch
    graph = None
    if dev == "cuda":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            layer()  # warm-up: JIT compile outside the capture, as vLLM warms up before capturing
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            layer()
    return graph, bool(meta.no_lora_flag_cpu.item()), int(meta.num_active_loras_cpu.item())


def run_row(row, env) -> tuple[str, str]:
    import torch
    label, L, size, key, slots, bug_expected = row
    dev, ops = env.device, env.ops
    counts = captured_counts(L)
    for cache in ("_LORA_A_PTR_DICT", "_LORA_B_PTR_DICT"):  # keyed by data_ptr(): a reused address must not hit
        getattr(env.utils, cache, {}).clear()               # another row's entry (vLLM's tests clear them too)
    meta = ops.LoRAKernelMeta.make(L, max(size, 16), device=dev, captured_lora_counts=counts)
    g = torch.Generator().manual_seed(len(label))
    a = (0.25 * torch.randn(L, RANK, HIDDEN, generator=g)).half().to(dev)
    b = (0.25 * torch.randn(L, OUT, RANK, generator=g)).half().to(dev)
    x = torch.zeros(size, HIDDEN, dtype=torch.float16, device=dev)
    y = torch.zeros(size, OUT, dtype=torch.float16, device=dev)
    buf = torch.zeros(1, size, RANK, dtype=torch.float32, device=dev)

    def layer():  # the LoRA linear layer: PunicaWrapperGPU.add_shrink + add_expand with specialization
        args = meta.meta_args(size, True)
        ops.lora_shrink(x, [a], buf, *args, SCALE)
        ops.lora_expand(buf, [b], y, *args, offset_start=0, add_inputs=True)

    dummy = capture_slots(env.select, L, size, key)
    meta.prepare_tensors(torch.tensor(dummy, dtype=torch.int32, device=dev))
    graph, frozen_flag, frozen_z = capture(meta, layer, dev)

    used_key = dispatch_key(slots, counts)
    if used_key != key:
        return "error", f"{label}: the dispatcher would pick key {used_key}, not {key} (table error)"
    xin = torch.zeros(size, HIDDEN, dtype=torch.float16)
    xin[: len(slots)] = torch.randn(len(slots), HIDDEN, generator=g).half()
    meta.prepare_tensors(torch.tensor(slots, dtype=torch.int32, device=dev))
    live_z = int(meta.num_active_loras_cpu.item())
    active = meta.active_lora_ids.cpu().tolist()

    def launch(replay: bool) -> torch.Tensor:
        x.copy_(xin.to(dev))
        y.zero_()
        if replay and graph is not None:
            graph.replay()
            torch.cuda.synchronize()
        elif replay:  # the CPU: what the graph froze at capture
            saved = (meta.no_lora_flag_cpu.clone(), meta.num_active_loras_cpu.clone())
            meta.no_lora_flag_cpu[0], meta.num_active_loras_cpu[0] = frozen_flag, frozen_z
            try:
                layer()
            finally:
                meta.no_lora_flag_cpu.copy_(saved[0])
                meta.num_active_loras_cpu.copy_(saved[1])
        else:
            layer()
        return y.float().cpu().clone()

    replayed, eager = launch(True), launch(False)
    ref = torch.zeros(size, OUT, dtype=torch.float64)
    for m, s_ in enumerate(slots):
        if s_ >= 0:
            ref[m] = b[s_].double().cpu() @ (SCALE * (a[s_].double().cpu() @ xin[m].double()))
    tol = 2e-2 * float(ref.abs().max()) + 1e-3

    def bad_rows(out):
        return [m for m in range(size) if float((out[m].double() - ref[m]).abs().max()) > tol]
    wrong_replay, wrong_eager = bad_rows(replayed), bad_rows(eager)
    lost = [f"row {m} (slot {slots[m]})" for m in wrong_replay
            if m < len(slots) and float(replayed[m].abs().max()) == 0.0]
    head = (f"{label}: capture mapping {dummy} -> grid z {frozen_z} frozen; batch {slots} -> "
            f"active_lora_ids {active[:live_z]} (z {live_z} eager)")
    if wrong_eager:
        return "error", f"{head}\n    EAGER WRONG at rows {wrong_eager}: not this bug"
    if not wrong_replay:
        return "ok", f"{head}\n    replay == eager == reference"
    what = (f"no LoRA at {', '.join(lost)}" if lost else f"wrong rows {wrong_replay}")
    kind = "bug" if bug_expected else "error"
    return kind, f"{head}\n    REPLAY WRONG: {what}; eager is right"


def main() -> int:
    a = parse()
    want = a.device
    if want == "cpu":
        setup_cpu()
    elif want == "auto":
        import torch
        if not torch.cuda.is_available():
            want = "cpu"
            setup_cpu()
        else:
            want = "cuda"
    import logging

    import torch
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.getLogger("vllm").setLevel(logging.ERROR)  # vLLM's import-time warnings are not the output
    try:
        import vllm
        import vllm.lora.ops.triton_ops as ops
        from vllm.lora.ops.triton_ops import lora_expand_op, lora_shrink_op, utils
    except Exception as e:  # noqa: BLE001
        print(f"cannot import vLLM's LoRA ops: {type(e).__name__}: {e}")
        return 2
    if "specialize_active_lora" not in inspect.signature(ops.LoRAKernelMeta.meta_args).parameters:
        print(f"vLLM {vllm.__version__} has no specialize_active_lora (added in 0.16/0.17): nothing to reproduce.")
        return 2
    if want == "cpu":
        cpu_tweaks(lora_shrink_op, lora_expand_op, utils)
    try:
        select, how = dummy_mapping_function()
    except Exception as e:  # noqa: BLE001 - never exit 1 (the bug's status) for a repro that could not run
        print(f"cannot build vLLM's dummy mapping (maybe_select_dummy_loras): {type(e).__name__}: {e}")
        return 2
    env = SimpleNamespace(device=want, ops=ops, select=select, utils=utils)
    mode = "a real torch.cuda.CUDAGraph per row" if want == "cuda" else "Triton interpreter; grid frozen at capture"
    print(f"vLLM {vllm.__version__} from {os.path.dirname(vllm.__file__)}; torch {torch.__version__}; "
          f"device {want} ({mode})")
    print(f"dummy mapping: vLLM's maybe_select_dummy_loras, {how}")
    verdicts = []
    for row in ROWS:
        verdict, text = run_row(row, env)
        verdicts.append(verdict)
        print(f"[{verdict.upper():5}] {text}")
    if "error" in verdicts:
        print("RESULT: unexpected (exit 2): a control row or an eager launch is wrong")
        return 2
    if "bug" in verdicts:
        n = verdicts.count("bug")
        print(f"RESULT: BUG PRESENT (exit 1): {n} of {len(ROWS)} graph replays dropped an adapter that eager applies")
        return 1
    print(f"RESULT: fixed (exit 0): all {len(ROWS)} replays equal eager and the float64 reference")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - an unexpected error is "could not run" (2), never "bug present" (1)
        import traceback
        traceback.print_exc()
        sys.exit(2)
