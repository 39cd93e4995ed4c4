"""The shadow oracle's pair suite: ``PAIRS`` from every module here; see harness.py."""

from . import host, indexed, runners, storage, tracking_api, triton_pairs  # noqa: F401  (they register)
from .harness import PAIRS, Pair, run, verdict

__all__ = ["PAIRS", "Pair", "run", "verdict"]
