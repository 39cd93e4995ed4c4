"""What Triton's interpreter can run on this installation: one tiny kernel per feature.

Run as ``python -m fuzzrunner.interpreter_probe`` (``fuzzrunner doctor`` and ``check-target`` do, in a
process of its own with ``TRITON_INTERPRET=1``, as the CPU pre-check and triage run); prints one
JSON object: the versions, the repairs applied (``triton_compat``), and each feature's verdict.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from . import triton_compat  # noqa: E402


@triton.jit
def _masked_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0), mask=offs < n)


@triton.jit
def _runtime_range(x_ptr, y_ptr, n_ptr, BLOCK: tl.constexpr):
    K = tl.load(n_ptr)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, tl.cdiv(K, BLOCK)):  # vLLM's mm_k loops so
        offs = i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < K, other=0.0)
    tl.store(y_ptr + tl.arange(0, BLOCK), acc)


@triton.jit
def _dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r, c = tl.arange(0, N)[:, None], tl.arange(0, N)[None, :]
    tl.store(c_ptr + r * N + c, tl.dot(tl.load(a_ptr + r * N + c), tl.load(b_ptr + r * N + c)))


@triton.jit
def _atomic(x_ptr, y_ptr):
    tl.atomic_add(y_ptr, tl.load(x_ptr + tl.program_id(0)))


def _check(name: str, fn) -> dict:
    try:
        ok = bool(fn())
        return {"feature": name, "ok": ok, "error": "" if ok else "wrong result"}
    except Exception as e:  # the verdict is the point: any failure is reported, none raised
        cause = e.__cause__ or e
        return {"feature": name, "ok": False, "error": f"{type(cause).__name__}: {cause}"[:300]}


def _features() -> list:
    x = torch.arange(40, dtype=torch.float32)

    def copy():
        y = torch.zeros(40)
        _masked_copy[(3,)](x, y, 40, BLOCK=16)
        return torch.equal(x, y)

    def runtime_range():
        y = torch.zeros(16)
        _runtime_range[(1,)](x, y, torch.tensor([40], dtype=torch.int32), BLOCK=16)
        return torch.equal(y, torch.stack([x[j::16].sum() for j in range(16)]))

    def dot():
        a, b, c = torch.randn(16, 16), torch.randn(16, 16), torch.zeros(16, 16)
        _dot[(1,)](a, b, c, N=16)
        return torch.allclose(c, a @ b, atol=1e-2, rtol=1e-2)

    def atomic():
        y = torch.zeros(1)
        _atomic[(40,)](x, y)
        return float(y) == float(x.sum())

    return [("masked load/store", copy), ("runtime-bounded range() loop (vLLM's mm_k)", runtime_range),
            ("tl.dot", dot), ("atomic_add", atomic)]


def main() -> int:
    import numpy
    repairs = triton_compat.apply()
    out = {"triton": triton.__version__, "numpy": numpy.__version__, "torch": torch.__version__,
           "repairs": list(repairs), "features": [_check(n, f) for n, f in _features()]}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
