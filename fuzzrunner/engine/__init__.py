"""The engine: campaign (Hypothesis) -> hub (processes) -> worker (one case at a time)."""

from .campaign import CampaignResult, run_campaign
from .hub import Hub, WorkerSpec

__all__ = ["CampaignResult", "Hub", "WorkerSpec", "run_campaign"]
