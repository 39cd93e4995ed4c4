"""Compile time of the reference runner's LoRA kernels, plain vs their GPU-shadow twins (instrument.py),
for an H100/H200 target (sm_90), with no GPU: Triton compiles to PTX and cubin with the ptxas its
wheel carries. A fresh GPU machine has a cold Triton cache, so every kernel and twin a case reaches
is compiled first: this is that cost. Usage: PYTHONPATH=. python benchmarks/gpu_shadow_compile.py
"""

from __future__ import annotations

import inspect
import os
import tempfile
import time

os.environ.pop("TRITON_INTERPRET", None)
os.environ["FUZZRUNNER_DEVICE"] = "cuda"  # JITFunctions, not the interpreter, whatever this machine has
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpu-shadow-compile-")  # cold, as a fresh machine

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from fuzzrunner.kernels.lora_bgmv import _lora_bgmv_kernel  # noqa: E402
from fuzzrunner.kernels.lora_expand import _lora_expand_kernel  # noqa: E402
from fuzzrunner.kernels.lora_shrink import _lora_shrink_kernel  # noqa: E402
from fuzzrunner.oracles.shadow.gpu.instrument import INSTRUMENTER  # noqa: E402

I32 = ("token_indices_sorted_by_lora_ids", "num_tokens_per_lora", "lora_token_start_loc", "lora_ids",
       "slice_n_ptr", "slice_offset_ptr", "token_lora_mapping")
KERNELS = {  # kernel: (pointer types by name, constexprs as the GPU launch config sets them)
    "shrink": (_lora_shrink_kernel, {"input_ptr": "*fp16", "lora_ptr": "*fp16", "out_ptr": "*fp32"},
               dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=32, SPLIT_K=4, K_ITERS=1, EVEN_K=True, DOT_F32=False)),
    "expand": (_lora_expand_kernel, {"input_ptr": "*fp32", "lora_ptr": "*fp16", "out_ptr": "*fp16"},
               dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, K_ITERS=1, EVEN_K=True, ADD_INPUTS=True, CAST_TYPE=True,
                    DOT_F32=False)),
    "bgmv": (_lora_bgmv_kernel, {"input_ptr": "*fp16", "lora_a_ptr": "*fp16", "lora_b_ptr": "*fp16",
                                 "out_ptr": "*fp16"}, dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, BLOCK_R=16)),
}
SHADOW = {"_sh_table": "*i64", "_sh_arena": "*i32", "_sh_ring": "*i64", "_sh_cell": "*i64"}


def compile_seconds(fn, pointers: dict, constexprs: dict) -> tuple[float, int]:
    sig = {}
    for p in inspect.signature(fn.fn).parameters:
        if p in constexprs:
            sig[p] = "constexpr"
        elif p in pointers or p in SHADOW:
            sig[p] = pointers.get(p) or SHADOW[p]
        elif p in I32:
            sig[p] = "*i32"
        else:
            sig[p] = "fp32" if p == "scaling" else "i32"
    src = ASTSource(fn, sig, constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    t = time.perf_counter()
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    return time.perf_counter() - t, k.asm["ptx"].count("\n")


def main() -> None:
    print(f"triton {triton.__version__}, target sm_90, cold cache")
    print(f"{'kernel':8} {'plain s':>8} {'twin s':>8} {'plain PTX lines':>16} {'twin PTX lines':>15}")
    for name, (fn, pointers, constexprs) in KERNELS.items():
        p, pl = compile_seconds(fn, pointers, constexprs)
        t, tl_ = compile_seconds(INSTRUMENTER.kernel(fn), pointers, {**constexprs, "_SH_CAP": 1024})
        print(f"{name:8} {p:8.1f} {t:8.1f} {pl:16} {tl_:15}", flush=True)


if __name__ == "__main__":
    main()
