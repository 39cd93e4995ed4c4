"""Oracles: checks that watch a case run and yield violations."""

from .base import Oracle, ViolationLog
from .shadow import ShadowOracle

__all__ = ["Oracle", "ShadowOracle", "ViolationLog"]
