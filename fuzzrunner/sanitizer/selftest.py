"""``fuzzrunner doctor``'s sanitizer check: a planted bad read must come back as a violation.

A tiny script reads a ``torch.empty`` tensor in a ``@triton.jit`` kernel (initcheck), or
reads far outside every allocation (memcheck), under the same wrapper the workers get;
the check passes when the parsed reports name that kernel at the planted line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from ..errors import SanitizerNotFound
from .locate import find_sanitizer, gpu_available
from .parse import parse_text
from .session import sanitizer_wrapper

_SCRIPT = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _planted_read(src_ptr, dst_ptr, shift, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(src_ptr + shift + offs, mask=mask)  # PLANTED
    tl.store(dst_ptr + offs, x + 1, mask=mask)


src = torch.empty(64, dtype=torch.int32, device="cuda")  # never written
dst = torch.zeros(64, dtype=torch.int32, device="cuda")
_planted_read[(1,)](src, dst, {shift}, 64, BLOCK=64)
torch.cuda.synchronize()
print("self-test script done")
'''
# memcheck: 2**36 int32 elements (256 GiB) past the tensor lies in no allocation.
_PLANTS = {"initcheck": ("uninitialized-read", 0), "memcheck": ("out-of-bounds", 1 << 36)}
TIMEOUT_S = 300


def _planted_line(source: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if "# PLANTED" in line)


def self_test(tool: str = "initcheck", *, sanitizer=None) -> tuple[bool, str]:
    """``(ok, one line)``: whether ``tool`` reports a planted bad read in a Triton kernel, at its line."""
    if tool not in _PLANTS:
        return False, f"the self-test plants errors for {', '.join(_PLANTS)} only, not {tool!r}."
    if not gpu_available():
        return False, "no CUDA device is visible: compute-sanitizer needs a GPU."
    try:
        s = sanitizer if sanitizer is not None else find_sanitizer()
        argv, env = sanitizer_wrapper(tool, sanitizer=s)
    except SanitizerNotFound as e:
        return False, str(e)
    kind, shift = _PLANTS[tool]
    source = _SCRIPT.format(shift=shift)
    with tempfile.TemporaryDirectory(prefix="fuzzrunner-selftest-") as d:
        path = os.path.join(d, "sanitizer_selftest.py")
        with open(path, "w") as f:
            f.write(source)
        try:
            done = subprocess.run([*argv, sys.executable, path], env=_gpu_env({**os.environ, **env}), cwd=d,
                                  capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return False, f"the self-test did not finish within {TIMEOUT_S} s under {s.path} --tool {tool}."
        output = done.stdout + done.stderr
    return check(output, tool, kind, f"sanitizer_selftest.py:{_planted_line(source)}", s.version)


def _gpu_env(env: dict) -> dict:
    """The script's environment: compiled Triton on the GPU, whatever this process runs (a ``--device cpu``
    process has ``TRITON_INTERPRET=1``: the planted kernel then ran on the host, and the self-test failed on a
    machine whose sanitizer works). The script is plain torch and Triton: fuzzrunner's own variables do not
    reach it."""
    return {k: v for k, v in env.items() if k != "TRITON_INTERPRET"}


def check(output: str, tool: str, kind: str, where: str, version: str = "") -> tuple[bool, str]:
    """Whether ``output`` holds a ``kind`` violation in ``_planted_read`` at ``where`` (file:line)."""
    found = parse_text(output, tool=tool)
    hits = [v for v in found if v.kind == kind and v.kernel == "_planted_read" and v.location.endswith(where)]
    tag = f"compute-sanitizer {version or '(version unknown)'} --tool {tool}"
    if hits:
        n = hits[0].details["count"]
        return True, f"{tag} reported the planted {kind} in _planted_read at {where} ({n} reports)."
    seen = "; ".join(v.message for v in found[:3]) or "no reports"
    tail = " | ".join(output.strip().splitlines()[-4:])
    return False, f"{tag} did not report the planted {kind} at {where}: saw {seen}. Output ends: {tail}"
