"""The shadow oracle's pair suite: ``PAIRS`` from every module here; see harness.py."""

from fuzzrunner import _env

_env.configure()  # TRITON_INTERPRET before triton_pairs decorates its kernels

from . import adversarial, heldout_style, host, indexed, runners, storage, threads, tracking_api, triton_pairs  # noqa: F401  (they register)
from .harness import PAIRS, Pair, run, verdict

__all__ = ["PAIRS", "Pair", "run", "verdict"]
