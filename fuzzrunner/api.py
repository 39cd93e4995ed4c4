"""The public API behind ``fuzzrunner``'s front door: fuzz a target, replay a case."""

from __future__ import annotations

import os
from typing import Iterable

from .case import Case
from .corpus import load_any
from .engine.campaign import CampaignResult, run_campaign
from .execute import run_case
from .settings import profile as _profile
from .target import Target, load_target
from .violation import Violation


def fuzz(target: str | Target = "reference_runner", *, faults: Iterable[str] = (), profile: str = "dev",
         corpus: str | os.PathLike | None = None, database=None, on_event=None, **overrides) -> CampaignResult:
    """Run a campaign. ``overrides`` are ``Settings`` fields (max_examples=, budget_s=, seed=, ...)."""
    spec = target if isinstance(target, str) else _register(target)
    settings = _profile(profile).override(**overrides)
    return run_campaign(spec, settings, faults=tuple(faults), corpus_dir=corpus, database=database,
                        on_event=on_event)


def replay(case: Case | str | os.PathLike, *, target: str | Target | None = None,
           oracles: Iterable[str] | None = None, device: str | None = None) -> list[Violation]:
    """Run one case (or a case/finding file) in this process under the oracles; return violations."""
    if not isinstance(case, Case):
        case, _ = load_any(case)
    if target is None:
        target = case.target
    t = target if isinstance(target, Target) else load_target(target)
    t.check_faults(case.faults)
    return run_case(case, t, oracles=oracles, device=device).violations


_registered: dict[str, Target] = {}


def _register(target: Target) -> str:
    """A Target object handed to ``fuzz`` in-process: workers find it again through its module."""
    import inspect
    module = inspect.getmodule(target.run)
    for name, obj in vars(module).items():
        if obj is target:
            path = getattr(module, "__file__", None)
            return f"{path}:{name}" if path else f"{module.__name__}:{name}"
    raise ValueError(f"target {target.name!r} must be a module-level object so worker processes can import it.")
