"""The GPU campaign's NaN ``2f9d344978cd`` (sglang_engine, 0.5.23, H100, 2026-12-07), replayed and explained on cuda.

Mechanism (docs/sglang.md, "On a GPU"): SGLang's ``cached_triton_kernel`` (sglang/srt/utils/common.py:4949,
``CachedKernel`` :4866, on CUDA only) keeps the first compiled csgmv shrink per key ``(K, NUM_SLICES, BLOCK_M)``
(kernels/ops/lora/dense/chunked_sgmv_shrink.py:11-13); ``N`` (slices x the pool's max_lora_rank: the weight and
output strides, :52-56) is outside the key. The finding's case (max_lora_rank 4) ran in the worker after cases of
max_lora_rank 8, with their shrink: rows stored at stride 8 into a (tokens, 4) output, so its odd rows stayed
``torch.empty`` (NaN under the poison oracle's first pattern: "rows [1] ... nan"). The target now empties those
caches at each case (targets/sglang_lora/kernel_caches.py); "unfixed" turns that off in the child.

Runs, each a fresh process with the campaign's oracles, one line each (OK or UNEXPECTED), then
``SGLANG-ENGINE-NAN-CHECK: PASS|FAIL``. Needs the carried archive .gpu-sglang/sglang.tar.xz. About 1-2 minutes.
Usage: python3 scripts/gpu/sglang_engine_nan_check.py
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
from acceptance_tools import Verdict, report_checks  # noqa: E402
from sglang_engine_device_shadow import child, env, finding_case, rank, said  # noqa: E402

BAD = {"numeric-mismatch", "poison-divergence", "crash"}


def plan(e: dict) -> list[tuple]:
    """(name, mode, sequence, env, expected: a finding of the last case or silent)."""
    case = finding_case()
    return [
        ("alone, unfixed (a fresh worker: the replay's view)", "unfixed", [case], e, False),
        ("after a rank-8 primer, unfixed (the campaign's worker)", "unfixed", [rank(case, 8), case], e, True),
        ("after a rank-8 primer, fixed", "fixed", [rank(case, 8), case], e, False),
        ("after a rank-8 primer, unfixed, SGLang's cache off", "unfixed", [rank(case, 8), case],
         {**e, "SGLANG_USE_CUSTOM_TRITON_KERNEL_CACHE": "0"}, False),
        ("rank 8 after the rank-4 case, unfixed (the other way)", "unfixed", [case, rank(case, 8)], e, True),
        ("rank 8 after the rank-4 case, fixed", "fixed", [case, rank(case, 8)], e, False),
    ]


def one(run: tuple) -> tuple[bool, str, float]:
    name, mode, seq, e, want = run
    t0 = time.monotonic()
    got, _, text = child(mode, seq, e, oracles="default")
    if len(got) < len(seq):
        return False, "the child stopped early: " + " | ".join(text.strip().splitlines()[-3:])[:200], \
            time.monotonic() - t0
    primers_silent = all(not g for g in got[:-1])
    found = bool({v["kind"] for v in got[-1]} & BAD)
    ok = primers_silent and found == want and (want or not got[-1])
    return ok, (f"expect {'a finding' if want else 'silent':<10} got {said(got[-1])}"
                + ("" if primers_silent else f"; primer: {said(got[0])}")), time.monotonic() - t0


def main() -> int:
    try:
        e = env()
    except Verdict as v:
        print(f"SGLANG-ENGINE-NAN-CHECK: SKIP ({v.why})")
        return 2
    return report_checks("SGLANG-ENGINE-NAN-CHECK", [(r[0], functools.partial(one, r)) for r in plan(e)],
                         deadline_s=240)


if __name__ == "__main__":
    sys.exit(main())
