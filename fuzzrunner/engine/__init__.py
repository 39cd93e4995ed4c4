"""The engine: campaign (Hypothesis) -> shards -> hub (processes) -> worker (one case at a time).

Its names load lazily: ``fuzzrunner.engine.events`` (the CLI's progress line reads it) must not
import the campaign, Hypothesis and the targets with it.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"CampaignResult": ".result", "StopReason": ".result", "run_campaign": ".campaign", "Hub": ".hub",
            "WorkerSpec": ".hub", "Event": ".events", "ProgressEvent": ".events", "WarningEvent": ".events",
            "FindingEvent": ".events", "RegressionEvent": ".events"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
