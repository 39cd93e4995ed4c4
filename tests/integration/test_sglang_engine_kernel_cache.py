"""The ``sglang_engine`` worker's cases are independent of SGLang's per-process kernel cache (targets/sglang_lora/
kernel_caches.py): the GPU campaign's NaN ``2f9d344978cd`` (docs/findings/cases/triage/) was a rank-4 case run
after a rank-8 case of the worker with the rank-8 csgmv shrink.

SGLang installs ``cached_triton_kernel`` on CUDA only, and its ``CachedKernel`` needs a compiled ``JITFunction``,
so on the CPU it is re-stated around the release's own shrink kernel: the first launch of a key fixes the kernel's
other constexprs (``N``, ``BLOCK_N``, ``BLOCK_K``), as the compiled kernel it keeps does. Run in one subprocess
(SGLang's engine imports whole, away from this session's other targets)."""

import json

import pytest
from test_sglang_engine import AVAILABLE, REASON, run_cases

pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"sglang_engine: {REASON}")

# the GPU finding's case (its config and ops), and the same with max_lora_rank 8 (the other rank the cases draw);
# the primer of the other rank runs first in the same process
FINDING = json.loads("""{"backend": "csgmv", "max_loras_per_batch": 3, "eviction_policy": "lru", "max_lora_rank": 4,
 "target_modules": ["gate_up_proj", "lm_head"], "graph_bs": 2, "chunk": 16, "dtype": "float32",
 "adapters": {"a0": {"r": 4, "alpha": 16, "modules": ["gate_proj", "up_proj", "lm_head"]},
              "a1": {"r": 2, "alpha": 2, "modules": ["gate_proj", "up_proj"]},
              "a2": {"r": 4, "alpha": 8, "modules": ["gate_proj", "up_proj", "lm_head"]},
              "a3": {"r": 4, "alpha": 16, "modules": ["gate_proj", "up_proj", "lm_head"]}}}""")
STEP = [{"op": "load", "name": "a2"}, {"op": "step", "reqs": [None, "a2", "a2", None], "mode": "decode", "seed": 1}]


def _rank(cfg: dict, rank: int) -> dict:
    return dict(cfg, max_lora_rank=rank, adapters={n: dict(a, r=min(a["r"] * rank // 4, rank))
                                                   for n, a in cfg["adapters"].items()})


RESTATED = """
import sys
from targets.sglang_engine import load_engine
load_engine("cpu")
mod = next(m for n, m in list(sys.modules.items()) if n.startswith("sglang.") and hasattr(m, "_chunked_lora_shrink_kernel"))


class CudaKernelCache:
    # SGLang's CachedKernel (sglang/srt/utils/common.py) as the compiled kernel it keeps behaves
    def __init__(self, fn):
        self.fn, self.kernel_cache = fn, {}

    def _clear_cache(self):
        self.kernel_cache.clear()

    def __getitem__(self, grid):
        def launcher(*args, **kw):
            frozen = self.kernel_cache.setdefault((kw["K"], kw["NUM_SLICES"], kw["BLOCK_M"]),
                                                  {k: kw[k] for k in ("N", "BLOCK_N", "BLOCK_K")})
            return self.fn[grid](*args, **{**kw, **frozen})
        return launcher


mod._chunked_lora_shrink_kernel = CudaKernelCache(mod._chunked_lora_shrink_kernel)

# the fix turned off for the fourth case only: the second pair then shows what the fix prevents
from fuzzrunner.targets.sglang_lora import kernel_caches  # (the name the built-in target imports it by)
fix, calls = kernel_caches.empty, []


def empty_but_for_the_fourth_case(*a, **k):
    calls.append(1)
    return 0 if len(calls) == 4 else fix(*a, **k)


kernel_caches.empty = empty_but_for_the_fourth_case
"""


def test_a_case_after_a_case_of_another_max_rank_runs_its_own_csgmv_shrink():
    """Rank 8 after rank 4 (the safe direction on the CPU: the rank-4 kernel's rows stay inside the rank-8 output;
    the other way round its stores fall past it, on the GPU): silent, each case emptying SGLang's kernel caches.
    The same pair again with the emptying off for the rank-8 case (as before the fix) runs the rank-4 shrink there:
    its output's second half of each row is left ``torch.empty``, read by the expand kernel, and its logits differ."""
    pair = [[_rank(FINDING, 4), STEP, []], [_rank(FINDING, 8), STEP, []]]
    got = run_cases(pair + pair, prelude=RESTATED)
    assert got[:3] == [[], [], []], got
    assert {(v[0], v[3]) for v in got[3]} >= {("uninitialized-read", "_chunked_lora_expand_kernel")}, got[3]
    assert "numeric-mismatch" in {v[0] for v in got[3]}, got[3]
