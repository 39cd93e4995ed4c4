"""The shadow oracle's pair suite: ``PAIRS`` from every module here; see harness.py."""

from fuzzrunner import _env

_env.configure()  # TRITON_INTERPRET before triton_pairs decorates its kernels

from . import (  # noqa: F401  (they register)
    adversarial,
    compiled_code,
    heldout_style,
    host,
    indexed,
    runners,
    storage,
    sub_buffers,
    threads,
    tracking_api,
    triton_pairs,
)
from .harness import GPU_PAIRS, PAIRS, Pair, run, verdict

__all__ = ["GPU_PAIRS", "PAIRS", "Pair", "run", "verdict"]
