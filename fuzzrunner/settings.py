"""Campaign settings: immutable, each field validated on its own, with named profiles.

Profiles: ``dev`` (quick, random seed), ``ci`` (small, fixed seed), ``nightly`` (long).
Command-line flags and pytest options only select a profile and override fields.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

from . import names
from .arguments import several
from .context import SHADOW_MODES
from .errors import InvalidArgument


def _validate_max_examples(v):
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise InvalidArgument(f"max_examples={v!r} (--max-examples) must be at least one. To only replay the corpus, "
                              f"use `fuzzrunner replay`.")


MAX_BUDGET_S = 366 * 86400    # a year: past it a campaign's deadline means nothing (and sleeps overflow)
MAX_CASE_TIMEOUT_S = names.MAX_CASE_TIMEOUT_S


def _seconds(v) -> bool:
    """A real number of seconds: not a bool, not NaN (every comparison with NaN is False, so a NaN
    timeout never fires and a NaN budget ends up as a bare NaN in the JSON report), not infinite."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _validate_budget_s(v):
    if v is not None and not (_seconds(v) and 0 < v <= MAX_BUDGET_S):
        raise InvalidArgument(f"budget_s={v!r} (--budget) must be a number of seconds above 0 and at most "
                              f"{MAX_BUDGET_S:,} (a year); budget_s=None means no time limit.")


def _validate_seed(v):
    if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
        raise InvalidArgument(f"seed={v!r} (--seed) must be an integer, or None for a random seed.")


def _validate_workers(v):
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 256:
        raise InvalidArgument(f"workers={v!r} (--workers) must be an integer from 1 to 256.")


def _validate_case_timeout_s(v):
    if not (_seconds(v) and 0 < v <= MAX_CASE_TIMEOUT_S):
        raise InvalidArgument(f"case_timeout_s={v!r} (--case-timeout) must be a number of seconds above 0 and at "
                              f"most {MAX_CASE_TIMEOUT_S:,} (a week): a case that runs longer is a timeout finding, "
                              f"so it cannot be infinite.")


def _validate_device(v):
    if v is not None and v not in names.DEVICES:
        raise InvalidArgument(f"device={v!r} must be one of {', '.join(names.DEVICES)} "
                              f"(or None to pick the one present).")


def _validate_sanitizer(v):
    if v not in names.SANITIZERS:
        raise InvalidArgument(f"sanitizer={v!r} must be one of {', '.join(names.SANITIZERS)}.")


def _validate_shadow(v):
    if v is not None and v not in SHADOW_MODES:
        raise InvalidArgument(f"shadow={v!r} must be one of {', '.join(SHADOW_MODES)}, or None to let the device pick "
                              f"(the device mode with compiled Triton on a GPU, the CPU mode in Triton's interpreter).")


def _validate_oracles(v):
    if v is not None:
        names.validate_oracles(v)


def _validate_shrink(v):
    if not isinstance(v, bool):
        raise InvalidArgument(f"shrink={v!r} must be True or False.")


def _validate_min_valid(v):
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise InvalidArgument(f"min_valid={v!r} must be a whole number of cases (0 turns the floor off).")


def _validate_cpu_triage(v):
    if not isinstance(v, bool):
        raise InvalidArgument(f"cpu_triage={v!r} must be true or false.")


def _validate_max_ops(v):
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 64:
        raise InvalidArgument(f"max_ops={v!r} (--max-ops) must be an integer from 1 to 64.")


def _validate_max_worker_rss_mb(v):
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf")):
        raise InvalidArgument(f"max_worker_rss_mb={v!r} must be a positive number of megabytes, or None to recycle "
                              f"a worker at 3x its size after its first case.")


def _validate_steer(v):
    if not isinstance(v, bool):
        raise InvalidArgument(f"steer={v!r} must be True or False (steer the search towards rarely reached "
                              f"features of the target's cases).")


def _validate_precheck_workers(v):
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 64):
        raise InvalidArgument(f"precheck_workers={v!r} must be an integer from 1 to 64, or None for a quarter of "
                              f"the host's CPUs (at most 8).")


def _validate_shape_palette(v):
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 10_000:
        raise InvalidArgument(f"shape_palette={v!r} (--shape-palette) must be a number of case shapes from 0 (off: "
                              f"every case draws its shape from the whole space) to 10000.")


@dataclass(frozen=True)
class Settings:
    max_examples: int = 200
    budget_s: float | None = None
    seed: int | None = None
    workers: int = 1
    case_timeout_s: float = 120.0
    device: str | None = None
    sanitizer: str = "none"
    shadow: str | None = None      # the shadow oracle's mode ("device", "cpu"); None: the device's (context.py)
    oracles: tuple | None = None   # None: the device's defaults (names.default_oracles)
    shrink: bool = True
    max_ops: int = 8
    min_valid: int = 1             # fewer valid cases than this: the campaign tested nothing (exit 2)
    cpu_triage: bool = True        # replay each GPU finding on the CPU under the shadow oracle
    steer: bool = False            # Hypothesis target() towards cases with rarely reached features (coverage.py)
    precheck_workers: int | None = None  # GPU, one worker: CPU pre-checks in parallel (shards); None: CPUs // 4, <= 8
    max_worker_rss_mb: float | None = None  # recycle a worker past this size (None: engine/rss.py's growth rule)
    shape_palette: int = 0         # cases draw their shape from this many, rotated by the seed (palette.py); 0: off

    def __post_init__(self):
        if self.oracles is not None:  # one name is one oracle (arguments.several), never its letters
            object.__setattr__(self, "oracles", several(self.oracles, "oracles"))
        for f in fields(self):
            globals()[f"_validate_{f.name}"](getattr(self, f.name))
        if self.sanitizer != "none" and self.device == "cpu":
            raise InvalidArgument(f"sanitizer={self.sanitizer!r} needs device='cuda': compute-sanitizer "
                                  f"checks GPU kernels. On the CPU the shadow oracle does this job.")

    def override(self, **changes) -> Settings:
        """These settings with the non-None ``changes`` applied (explicit values win)."""
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise InvalidArgument(f"unknown setting(s) {sorted(unknown)}; known: {sorted(known)}.")
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict:
        d = asdict(self)
        d["oracles"] = list(self.oracles) if self.oracles is not None else None
        return d


PROFILES = {  # names.PROFILES lists these names for torch-free readers
    "dev": Settings(max_examples=100, budget_s=120),
    "ci": Settings(max_examples=60, budget_s=300, seed=0, case_timeout_s=120),
    "nightly": Settings(max_examples=10_000, budget_s=8 * 3600, case_timeout_s=300),
}


def profile(name: str) -> Settings:
    if name not in PROFILES:
        raise InvalidArgument(f"unknown profile {name!r}; profiles are {', '.join(PROFILES)}.")
    return PROFILES[name]
