"""The vocabulary every layer shares, each word defined once with the policy that goes with it:
oracles, tools, sanitizer tools, devices, profiles, violation kinds. Torch-free, so the CLI's
``choices=`` and the pytest plugin can read it.

Adding an oracle is one module implementing ``fuzzrunner.oracles.base.Oracle`` plus one
``OracleSpec`` in ``ORACLES`` below; a violation kind is one ``Kind`` in ``KINDS``; a tool (what
reports a violation) one ``Tool`` in ``TOOLS``. The ``register_*`` functions do it at run time, for
tests and plug-ins. Nothing else lists these names: code asks the flags (``Kind.process_death``,
``Tool.sanitizer``, ``OracleSpec.triage``...), never a list of names of its own.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

from .arguments import several
from .context import DEVICES as DEVICES  # where a run's kernels run (context.py decides which)
from .context import Context
from .errors import InvalidArgument

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
    triage: bool = False               # replays a GPU finding on the CPU (engine/triage.py)
    precheck: bool = False             # proves a case's memory errors on the CPU before the GPU runs it
    summary: str = ""

    def make(self, context: Context) -> Any:
        """The oracle for one run under ``context`` (the device, Triton's mode, the shadow mode): a factory
        with a ``context`` parameter gets it (the shadow oracle picks its mode, and the memory it checks,
        from it); one without is called with no argument (a plug-in's ``MyOracle()``)."""
        module, _, attr = self.factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
        return factory(context=context) if _takes_context(factory) else factory()


def _takes_context(factory) -> bool:
    try:
        return "context" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): called as it is
        return False


# Under initcheck: a poison fill counts as initialization and would hide every report; the
# invariant checks' own host copies of never-written metadata are themselves reported
# ("Host API memory access error").
ORACLES: dict[str, OracleSpec] = {o.name: o for o in (
    OracleSpec("shadow", "fuzzrunner.oracles.shadow:shadow_oracle", default_on=("cpu",), triage=True, precheck=True,
               summary="uninitialized, stale and out-of-bounds reads (CPU: Triton interpreter + torch dispatch; "
                       "cuda: instrumented kernels + device shadow)"),
    OracleSpec("invariants", "fuzzrunner.oracles.invariants:InvariantOracle", default_on=("cpu", "cuda"),
               not_under=("initcheck",), triage=True, summary="kernel metadata consistency before each launch"),
    OracleSpec("numeric", "fuzzrunner.oracles.numeric:NumericOracle", default_on=("cpu", "cuda"), triage=True,
               summary="outputs against the float64 reference"),
    OracleSpec("state", "fuzzrunner.oracles.state:StateOracle", default_on=("cpu", "cuda"), triage=True,
               summary="the code under test's own state, as the target checks it (ctx.check)"),
    OracleSpec("poison", "fuzzrunner.oracles.poison:PoisonOracle", default_on=("cuda",),
               not_under=("initcheck",), needs_second_run=True, guard=("shadow",),
               summary="two runs with different fills of never-written memory must agree"),
)}


def register_oracle(spec: OracleSpec) -> None:
    """Add an oracle (a plug-in, or a test's dummy) under ``spec.name``; it reports as the tool of
    that name. Registering the same again is harmless; another oracle under a name of fuzzrunner's own
    is refused."""
    _own("oracle", spec, ORACLES)
    ORACLES[spec.name] = spec
    TOOLS.setdefault(spec.name, Tool(spec.name, spec.summary))


def _own(what: str, entry, registry: dict) -> None:
    """``InvalidArgument`` if ``entry`` would replace a different one of fuzzrunner's own (``_SHIPPED``)."""
    if not isinstance(entry.name, str) or not entry.name:
        raise InvalidArgument(f"register_{what}({entry!r}): its name must be a non-empty string.")
    shipped = _SHIPPED.get(what, {}).get(entry.name)
    if shipped is not None and shipped != entry:
        raise InvalidArgument(f"register_{what}: {entry.name!r} is fuzzrunner's own {what}; register yours "
                              f"under another name.")


def triage_oracles() -> tuple[str, ...]:
    """The oracles a CPU replay of a GPU finding runs."""
    return tuple(n for n, o in ORACLES.items() if o.triage)


def precheck_oracles() -> tuple[str, ...]:
    """The oracles whose CPU run proves a case's memory errors (the GPU pre-check, check-target)."""
    return tuple(n for n, o in ORACLES.items() if o.precheck)


def oracle_names() -> tuple[str, ...]:
    return tuple(ORACLES)


def validate_oracles(names) -> tuple[str, ...]:
    names = several(names, "oracles")  # oracles="shadow" is one oracle, not six letters
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


# -- tools: what reports a violation -----------------------------------------------------------------

@dataclass(frozen=True)
class Tool:
    name: str
    summary: str = ""
    process_death: bool = False   # it reports a worker that died or hung: confirmed in a fresh worker first
    sanitizer: bool = False       # compute-sanitizer (its repro replays under it, on a GPU)
    raised: bool = False          # an exception raised in the runner's own Python code
    context_lost: bool = False    # the CUDA context found lost after a case (follows the CUDA error that broke it)


TOOLS: dict[str, Tool] = {t.name: t for t in (
    *(Tool(o.name, o.summary) for o in ORACLES.values()),
    Tool("worker", "the worker process died (a signal, an exit) or outlived the case timeout", process_death=True),
    Tool("cuda", "the CUDA context was lost after the case (an illegal address, a device-side assert)",
         process_death=True, context_lost=True),
    Tool("python", "an exception raised in the runner's (or its kernels') Python code", raised=True),
    Tool("target", "the target's own code outside its run (its set-up, its case check)"),
    Tool("fuzzrunner", "fuzzrunner's own machinery (the tool's limit, never the runner's bug)"),
    Tool("compute-sanitizer", "a compute-sanitizer report whose tool is not named", sanitizer=True),
    *(Tool(t, f"compute-sanitizer --tool {t}", sanitizer=True) for t in SANITIZER_TOOLS),
)}


def register_tool(tool: Tool) -> None:
    """Add a tool (a plug-in's checker) under ``tool.name``; registering the same again is harmless."""
    _own("tool", tool, TOOLS)
    TOOLS[tool.name] = tool


def tool(name: str) -> Tool:
    """The registered tool, or a plain one (a plug-in's that registered nothing: no special policy)."""
    return TOOLS.get(name) or Tool(name)


# -- violation kinds -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Kind:
    name: str
    priority: int      # which violation of a case names its finding: lowest first
    family: str        # kinds of one family are one bug when the rest of the identity agrees
    memory: bool = False
    finding: bool = True   # False: the tool's own limit, counted and warned about, never a finding
    case_wide: bool = False    # not tied to the op that made it (a death, a hang, a sanitizer report): it
                               # follows the case's first memory error, and teaches the GPU pre-check a crash
    process_death: bool = False  # the worker died or hung: confirmed in a fresh worker; its repro matches the kind
    wrong_values: bool = False   # outputs differ (from the reference, between fills): explained by its op's error
    launch_check: bool = False   # launch metadata checked before the kernel ran: heads its op's wrong values
    colour: str = "#57606a"      # the HTML report's badge

    @property
    def located(self) -> bool:
        """A memory error at an element of one op (heads that op's group; a sanitizer report is not)."""
        return self.memory and not self.case_wide


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("uninitialized-read", 0, "unwritten-read", memory=True, colour="#d1242f"),
    Kind("stale-read", 0, "unwritten-read", memory=True, colour="#e07b00"),
    Kind("out-of-bounds", 0, "out-of-bounds", memory=True, colour="#8250df"),
    Kind("sanitizer-error", 1, "sanitizer-error", memory=True, case_wide=True, colour="#cf222e"),
    Kind("numeric-mismatch", 2, "numeric-mismatch", wrong_values=True, colour="#0969da"),
    Kind("poison-divergence", 3, "poison-divergence", wrong_values=True, colour="#bf3989"),
    Kind("crash", 4, "crash", case_wide=True, process_death=True, colour="#24292f"),
    Kind("timeout", 4, "timeout", case_wide=True, process_death=True, colour="#57606a"),
    Kind("invariant-violation", 5, "invariant-violation", launch_check=True, colour="#1a7f37"),
    Kind("state-violation", 5, "state-violation", colour="#116329"),
    # Triton's interpreter or an oracle failed on its own (not the kernel's semantics, not the
    # runner's): e.g. Triton 3.6's interpreter with numpy >= 2.4 on a runtime-bounded range().
    Kind("tool-limitation", 9, "tool-limitation", finding=False),
)}


def crash_kinds() -> tuple[str, ...]:
    """The kinds that are a worker's death or hang (``Kind.process_death``)."""
    return tuple(k.name for k in KINDS.values() if k.process_death)


def kind(name: str) -> Kind:
    """The registered kind (``Violation`` refuses others; a report read back may hold an older one)."""
    return KINDS.get(name) or Kind(name, 9, name)


def register_kind(kind: Kind) -> None:
    """Add a violation kind (a plug-in oracle's) under ``kind.name``; registering the same again is harmless."""
    _own("kind", kind, KINDS)
    KINDS[kind.name] = kind


# fuzzrunner's own entries: a plug-in adds its own names, never replaces one of these with another
_SHIPPED: dict[str, dict] = {"oracle": dict(ORACLES), "tool": dict(TOOLS), "kind": dict(KINDS)}
