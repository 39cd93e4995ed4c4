"""The vocabulary every layer shares, each word defined once: oracles, sanitizer tools, devices,
profiles, violation kinds. Torch-free, so the CLI's ``choices=`` and the pytest plugin can read it.

Adding an oracle is one module implementing ``fuzzrunner.oracles.base.Oracle`` plus one
``OracleSpec`` in ``ORACLES`` below (``register_oracle`` does it at run time, for tests and
plug-ins); nothing else lists oracle names.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgument

DEVICES = ("cpu", "cuda")
SANITIZER_TOOLS = ("initcheck", "memcheck", "racecheck", "synccheck")
SANITIZERS = ("none",) + SANITIZER_TOOLS
PROFILES = ("dev", "ci", "nightly")   # their values live in settings.PROFILES
MAX_CASE_TIMEOUT_S = 7 * 86400        # a week for one case: settings refuses more, a finding's record too


@dataclass(frozen=True)
class OracleSpec:
    name: str
    factory: str                       # "module:attr", imported only when the oracle runs
    default_on: tuple = ()             # devices where it runs unless oracles are named
    not_under: tuple = ()              # sanitizer tools it must never run under, and why (doc)
    needs_second_run: bool = False     # compares two runs of a case (poison)
    guard: tuple = ()                  # oracles the second run keeps (on the CPU: the shadow guard)
    summary: str = ""

    def make(self) -> Any:
        module, _, attr = self.factory.partition(":")
        return getattr(importlib.import_module(module), attr)()


# Under initcheck: a poison fill counts as initialization and would hide every report; the
# invariant checks' own host copies of never-written metadata are themselves reported
# ("Host API memory access error").
ORACLES: dict[str, OracleSpec] = {o.name: o for o in (
    OracleSpec("shadow", "fuzzrunner.oracles.shadow:shadow_oracle", default_on=("cpu",),
               summary="uninitialized, stale and out-of-bounds reads (CPU: Triton interpreter + torch dispatch; "
                       "cuda: instrumented kernels + device shadow)"),
    OracleSpec("invariants", "fuzzrunner.oracles.invariants:InvariantOracle", default_on=("cpu", "cuda"),
               not_under=("initcheck",), summary="kernel metadata consistency before each launch"),
    OracleSpec("numeric", "fuzzrunner.oracles.numeric:NumericOracle", default_on=("cpu", "cuda"),
               summary="outputs against the float64 reference"),
    OracleSpec("poison", "fuzzrunner.oracles.poison:PoisonOracle", default_on=("cuda",),
               not_under=("initcheck",), needs_second_run=True, guard=("shadow",),
               summary="two runs with different fills of never-written memory must agree"),
)}


def register_oracle(spec: OracleSpec) -> None:
    """Add an oracle (a plug-in, or a test's dummy) under ``spec.name``."""
    ORACLES[spec.name] = spec


def oracle_names() -> tuple[str, ...]:
    return tuple(ORACLES)


def validate_oracles(names) -> tuple[str, ...]:
    names = tuple(names)
    for n in names:
        if n not in ORACLES:
            raise InvalidArgument(f"unknown oracle {n!r}; known oracles: {', '.join(ORACLES)}.")
    return names


def default_oracles(device: str) -> tuple[str, ...]:
    return tuple(n for n, o in ORACLES.items() if device in o.default_on)


def effective_oracles(names, device: str, sanitizer: str | None = "none") -> tuple[str, ...]:
    """The oracles a worker runs: the named ones, else the device's defaults; never one that the
    sanitizer forbids."""
    chosen = validate_oracles(names) if names is not None else default_oracles(device)
    return tuple(n for n in chosen if (sanitizer or "none") not in ORACLES[n].not_under)


# -- violation kinds -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Kind:
    name: str
    priority: int      # which violation of a case names its finding: lowest first
    family: str        # kinds of one family are one bug when the rest of the identity agrees
    memory: bool = False
    finding: bool = True   # False: the tool's own limit, counted and warned about, never a finding


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("uninitialized-read", 0, "unwritten-read", memory=True),
    Kind("stale-read", 0, "unwritten-read", memory=True),
    Kind("out-of-bounds", 0, "out-of-bounds", memory=True),
    Kind("sanitizer-error", 1, "sanitizer-error", memory=True),
    Kind("numeric-mismatch", 2, "numeric-mismatch"),
    Kind("poison-divergence", 3, "poison-divergence"),
    Kind("crash", 4, "crash"),
    Kind("timeout", 4, "timeout"),
    Kind("invariant-violation", 5, "invariant-violation"),
    # Triton's interpreter or an oracle failed on its own (not the kernel's semantics, not the
    # runner's): e.g. Triton 3.6's interpreter with numpy >= 2.4 on a runtime-bounded range().
    Kind("tool-limitation", 9, "tool-limitation", finding=False),
)}
CRASH_KINDS = ("crash", "timeout")
