"""Replay cases in crash-isolated workers: ``fuzzrunner replay`` and the pytest plugin's corpus items.

One hub per target spec, kept for every case of that target (torch starts once), running
exactly the oracles a campaign with the same settings runs (``names.effective_oracles``).
``Replayer.verdict`` says what one replay of a saved finding or case proves (a ``Verdict``); the
CLI maps it to an exit code, the pytest plugin to a pass or a failure.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..case import Case
from ..context import Context
from ..env_defaults import SHADOW_ENV
from ..errors import InvalidArgument, InvalidCase
from ..finding import Finding, group, limitations
from ..names import effective_oracles
from ..oracles.shadow import prepare_device_mode
from ..settings import Settings
from ..target import BUILTIN, load_target, release_change
from ..target_spec import TargetSpec
from ..violation import Violation
from .hub import THREAD_GRACE_S, Hub
from .known import known_label
from .plan import worker_spec


def recorded_target(case: Case, finding: Finding | None) -> str:
    """The target a case (or finding) file names: the spec the finding recorded, else the case's target."""
    return finding.target_spec if finding is not None and finding.target_spec else case.target


def replay_target(case: Case, finding: Finding | None, given: str | None = None) -> str:
    """The target spec a case (or finding) file replays on: ``given`` (a file spec made absolute), else the one
    it names (``recorded_target``), which must then load here: a plain name must be built in (``InvalidArgument``,
    naming the fix: ``--target``)."""
    if given:
        return TargetSpec.parse(given).absolute()
    spec = recorded_target(case, finding)
    if TargetSpec.parse(spec).is_name and spec not in BUILTIN:
        raise InvalidArgument(f"it is a case of target {spec!r}, which is not built in: name yours with --target "
                          f"path/to/file.py:OBJ")
    return spec


def replay_timeout(given: float | None, finding: Finding | None) -> float | None:
    """A replay's case timeout: ``given``, else the one the finding was found under (a timeout finding of a 5 s
    campaign must not wait 120 s), else None (the settings' default)."""
    return given or (finding.case_timeout_s if finding is not None else None)


class OutOfTime(Exception):
    """The caller's deadline came before the replay ended (its worker was stopped): no verdict."""


class Verdict(enum.Enum):
    """What one replay of a saved finding (or case) proves."""

    REPRODUCED = "reproduced"      # the finding's bug shows again
    MOVED = "moved"                # it shows again, its access now at another site (a renamed or moved function/file)
    OTHERS = "others"              # violations show, none of them the finding's (a case file: any violation)
    GONE = "gone"                  # nothing shows: the bug is fixed (a case runs clean)
    CANNOT_CHECK = "cannot check"  # nothing shows, but the finding is the other shadow mode's: no proof it is gone
    LIMITED = "limited"            # only the tool's own limitations show: the case could not be checked here

    @property
    def shows(self) -> bool:
        """A violation shows: a corpus item fails, ``fuzzrunner replay`` exits 1."""
        return self in (Verdict.REPRODUCED, Verdict.MOVED, Verdict.OTHERS)

    def describe(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    Verdict.REPRODUCED: "the saved bug shows again",
    Verdict.MOVED: "the saved bug shows again, its access at another site (a renamed or moved function or file)",
    Verdict.OTHERS: "violations show that are not the saved bug's",
    Verdict.GONE: "no violation shows",
    Verdict.CANNOT_CHECK: "not reproduced, but by the other shadow mode than the one that found it: no proof",
    Verdict.LIMITED: "only a tool limitation shows: the case could not be checked here",
}


@dataclass(frozen=True)
class Replay:
    """One replay judged: its ``verdict`` and what it rests on."""

    verdict: Verdict
    seen: tuple[Violation, ...] = ()    # every violation of the run, the tool's limitations included
    limits: tuple[Violation, ...] = ()  # the tool's limitations among them (never a finding, always said)
    same: tuple[Violation, ...] = ()    # the finding's bug among them (REPRODUCED, MOVED)
    unchecked: str = ""                 # CANNOT_CHECK: why not reproduced proves nothing here
    release: str = ""                   # the release loaded is not the one the finding was found on: what differs
    known: tuple = ()                   # (violation, label): each root cause the target names a known bug
    #                                     (its head and others, each with the label a campaign gives its finding)

    def known_label(self, violation: Violation) -> dict | None:
        """The known bug ``violation``'s root cause is (``{"id", "title", ...}``: ``finding.known_text``), if any."""
        return next((label for v, label in self.known if v is violation), None)

    @property
    def violations(self) -> list[Violation]:
        """What the run saw, the tool's limitations left out."""
        return [v for v in self.seen if not any(v is x for x in self.limits)]


def judge(seen: list[Violation], finding: Finding | None, other_mode: str | None = None) -> Replay:
    """The verdict of a replay that saw ``seen``, of ``finding`` (None: a case file); ``other_mode``: why
    not reproducing it proves nothing here (``Replayer.other_shadow_mode``), if it does not."""
    limits = tuple(limitations(seen))
    rest = [v for v in seen if not any(v is x for x in limits)]
    same = finding.reproduced_by(rest) if finding is not None else []
    if limits and not rest:  # the tool could not run the case here: that proves nothing
        verdict = Verdict.LIMITED
    elif finding is not None and same:
        verdict = Verdict.MOVED if finding.moved(rest) else Verdict.REPRODUCED
    elif rest:
        verdict = Verdict.OTHERS
    elif other_mode:  # another mode sees other accesses: no proof that the bug is gone
        verdict = Verdict.CANNOT_CHECK
    else:
        verdict = Verdict.GONE
    return Replay(verdict, tuple(seen), limits, tuple(same),
                  other_mode or "" if verdict is Verdict.CANNOT_CHECK else "")


class Replayer:
    def __init__(self, settings: Settings, *, inherit_gpu: bool = False, context: Context | None = None):
        """``inherit_gpu``: workers keep this process's ``CUDA_VISIBLE_DEVICES`` (one GPU per xdist worker).
        The run's context is resolved here, once (``DeviceUnavailable`` if its device cannot be had), unless
        one is given (triage's CPU context)."""
        self.settings, self.inherit_gpu = settings, inherit_gpu
        self.context = context or Context.resolve(settings)
        self.hubs: dict[str, Hub] = {}
        self.loaded_code: dict = {}  # the code under test of the last target run
        self.known_bugs: Callable[[dict], dict | None] | None = None  # that target's known_bugs, if it has one

    def oracles(self) -> tuple[str, ...]:
        return effective_oracles(self.settings.oracles, self.context.device, self.context.sanitizer)

    def hub(self, spec: str) -> Hub:
        if spec not in self.hubs:
            if "shadow" in self.oracles():  # built before the worker: there it would spend the case's timeout
                prepare_device_mode(self.context)
            ws = worker_spec(spec, self.settings, 0, self.context)
            if self.inherit_gpu:
                ws = replace(ws, context=ws.context.placed(None))
            self.hubs[spec] = Hub(ws, oracles=self.oracles(), timeout_s=self.settings.case_timeout_s,
                                  standby=False)
        return self.hubs[spec]

    def other_shadow_mode(self, finding) -> str | None:
        """Why a replay here that does not reproduce ``finding`` proves nothing, if it does not: a shadow finding
        of the other shadow mode (each mode sees accesses the other cannot: docs/shadow.md). None: the same
        mode, or not the shadow oracle's finding."""
        found = finding.shadow_mode if finding is not None else None
        here = self.context.shadow
        if found is None or found == here:
            return None
        return (f"it was found by the shadow oracle's {found} mode and this replay ran its {here} mode, which does "
                f"not see every access the other does; replay it with {SHADOW_ENV}={found}"
                f"{' (and --device cpu)' if found == 'cpu' and self.context.device == 'cuda' else ''}")

    def run_preceding(self, preceding: dict, spec: str, source: str) -> tuple[int, int, int]:
        """A finding's ``preceding`` cases (what its worker ran before it), in order, in one fresh worker, where its
        case then runs: (how many ran, how many of those showed violations, how many the target refused)."""
        ran = showed = refused = 0
        for i, d in enumerate(preceding["cases"]):
            try:
                seen = self.run(Case.from_dict(d, source=f"{source}: preceding[{i}]"), spec, fresh=ran == 0)
            except InvalidCase:
                refused += 1
                continue
            ran += 1
            showed += bool([v for v in seen if v not in limitations(seen)])
        return ran, showed, refused

    def run(self, case: Case, spec: str, timeout_s: float | None = None, cut_at: float = math.inf,
            fresh: bool = False) -> list[Violation]:
        """The violations of one run of ``case`` (``timeout_s``: this case's timeout, e.g. the one its
        finding was found under; default the settings'); ``InvalidCase`` if the target refuses it,
        before any worker sees it; ``HarnessError`` if the target cannot be set up; ``OutOfTime`` if
        it was still running at ``cut_at`` (monotonic: a campaign's deadline). The worker waits for the
        threads the case started (up to ``THREAD_GRACE_S``): a death or an exception of theirs is the case's.
        ``fresh``: in a new worker (else the one the last case ran in)."""
        target = load_target(spec)
        self.loaded_code = dict(target.code_under_test)  # the release this replay runs (verdict compares it)
        self.known_bugs = target.known_bugs  # its known bugs (verdict labels what the replay shows)
        target.check_faults(case.faults)
        target.check_case(case)
        hub = self.hub(spec)
        hub.timeout_s = timeout_s or self.settings.case_timeout_s
        result = hub.run(case, cut_at, linger_s=THREAD_GRACE_S, fresh=fresh)
        if result.budget_cut:
            raise OutOfTime(f"stopped after {result.seconds:.1f} s: the deadline came first")
        return result.violations

    def verdict(self, case: Case, spec: str, finding: Finding | None = None, timeout_s: float | None = None,
                cut_at: float = math.inf) -> Replay:
        """Replay ``case`` (``run``: its errors, its timeout) and judge what it proves of ``finding`` (None: a
        case file)."""
        replay = judge(self.run(case, spec, timeout_s, cut_at), finding, self.other_shadow_mode(finding))
        changed = release_change(finding.code_under_test, self.loaded_code) if finding is not None else ""
        return replace(replay, release=changed, known=self._known(case, replay.violations))

    def _known(self, case: Case, violations: list[Violation]) -> tuple:
        """Each root cause among ``violations`` that the target names a known bug, as a campaign labels its finding
        (``known.known_label`` of the finding the group would be, on the release loaded): (violation, label) for the
        group's head and its others."""
        if self.known_bugs is None:
            return ()
        out: list = []
        for head, others in group(violations):
            label = known_label(Finding.of(head, others, case, code_under_test=dict(self.loaded_code),
                                           context=self.context), self.known_bugs)
            if label is not None:
                out += [(v, label) for v in (head, *others)]
        return tuple(out)

    def close(self) -> None:
        for hub in self.hubs.values():
            hub.close()
        self.hubs.clear()

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
