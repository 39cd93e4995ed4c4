"""Coverage of the case space: which features of a case a campaign reached, and how often.

A target declares ``features(case) -> iterable of "name" or "name=value"`` (computed from the
case's JSON alone, so replays and remote workers see the same) and ``feature_space``: every
feature it can report. A campaign counts, over the valid cases it ran (the replayed corpus and seed
cases, then the generated ones; shrinking excluded), each feature and
each pair of features of one case; a declared feature never reached is shown, because a
campaign that never reached a state otherwise looks like a clean pass. The counts also steer
the search (``rarity``): Hypothesis ``target()`` climbs towards cases with rarely seen features.

Standard library only: the pytest plugin formats the table without importing the engine.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .callbacks import refuse_awaitable
from .errors import HarnessError
from .text import describe, safe_repr

PAIR_SEP = " & "
PYTEST_PROPERTY = "fuzzrunner_coverage"  # the user property a fuzz test's report carries its coverage in


def features_of(features: Callable | None, case, target_name: str = "target") -> tuple[str, ...]:
    """The sorted distinct features ``features(case)`` names; ``HarnessError`` (one line) if it breaks."""
    if features is None:
        return ()
    returned = _call(features, case, target_name)
    refuse_awaitable(target_name, "features", returned, generators=False)  # a coroutine would not iterate
    try:
        names = set(returned)
    except Exception as e:  # a broken feature function is the harness's fault, never a finding
        raise HarnessError(f"target {target_name!r}: features(case) failed: {describe(e)}") from None
    bad = [n for n in names if not isinstance(n, str) or not n or PAIR_SEP in n]
    if bad:
        raise HarnessError(f"target {target_name!r}: features(case) must give non-empty strings without "
                           f"{PAIR_SEP!r}; got {safe_repr(bad[0], 200)}.")
    return tuple(sorted(names))


def _call(features: Callable, case, target_name: str):
    try:
        return features(case)
    except Exception as e:  # a broken feature function is the harness's fault, never a finding
        raise HarnessError(f"target {target_name!r}: features(case) failed: {describe(e)}") from None


def _pairs(names: tuple[str, ...]) -> Iterable[tuple[str, str]]:
    return ((a, b) for i, a in enumerate(names) for b in names[i + 1:])


@dataclass
class Coverage:
    """Feature and feature-pair counts over the valid cases a campaign ran (replayed and generated)."""
    declared: tuple = ()                              # the target's feature_space
    steering: bool = False                            # whether the counts steered the search
    cases: int = 0
    features: Counter = field(default_factory=Counter)
    pairs: Counter = field(default_factory=Counter)   # (a, b) with a < b
    shown: tuple = ()                                 # names (before "=") the summary shows value by value: what a
    #                                                   user must see ran (Target.summary_features)

    def add(self, names: tuple[str, ...]) -> None:
        self.cases += 1
        self.features.update(names)
        self.pairs.update(_pairs(names))

    def merge(self, other: Coverage) -> None:
        self.declared = tuple(sorted(set(self.declared) | set(other.declared)))
        self.steering = self.steering or other.steering
        self.shown = tuple(dict.fromkeys([*self.shown, *other.shown]))
        self.cases += other.cases
        self.features.update(other.features)
        self.pairs.update(other.pairs)

    def rarity(self, names: tuple[str, ...]) -> float:
        """How rare the rarest feature or pair of ``names`` is so far: 0 for one never seen, -log2(1+n)
        for one seen n times. Hypothesis ``target()`` maximizes it."""
        counts = [self.features[n] for n in names] + [self.pairs[p] for p in _pairs(names)]
        return -math.log2(1 + min(counts)) if counts else -math.log2(1 + self.cases)

    def never_reached(self) -> list[str]:
        return sorted(n for n in self.declared if not self.features[n])

    def to_dict(self) -> dict:
        return {"cases": self.cases, "steering": self.steering, "declared": list(self.declared),
                "features": dict(sorted(self.features.items())),
                "pairs": [[a, b, n] for (a, b), n in sorted(self.pairs.items())],
                "never_reached": self.never_reached(), **({"shown": list(self.shown)} if self.shown else {})}

    @classmethod
    def from_dict(cls, d: dict) -> Coverage:
        return cls(tuple(d.get("declared", ())), bool(d.get("steering")), int(d.get("cases", 0)),
                   Counter(d.get("features", {})), Counter({(a, b): n for a, b, n in d.get("pairs", [])}),
                   tuple(n for n in d.get("shown") or () if isinstance(n, str)))


# -- a terminal table (the CLI and the pytest plugin) -------------------------------------------

def table(cov: dict, *, width: int = 30) -> list[str]:
    """Lines: each declared or reached feature, its count and share of cases, unreached ones marked."""
    cases, counts = cov.get("cases", 0), cov.get("features", {})
    names = sorted(set(cov.get("declared", [])) | set(counts))
    never = set(cov.get("never_reached", []))
    lines = [f"{'feature':{width}} {'cases':>7} {'share':>6}"]
    for n in names:
        c = counts.get(n, 0)
        share = f"{100 * c / cases:5.1f}%" if cases else "    -"
        lines.append(f"{n:{width}} {c:>7} {share:>6}" + ("  NEVER REACHED" if n in never else ""))
    lines.append(summary_line(cov))
    return lines


def shown_lines(cov: dict) -> list[str]:
    """A line for each name the target shows (``shown``), its values' counts over the valid cases, those declared
    and never reached at 0: ``path: scheduler in 14, direct in 0 of 19 valid case(s)`` (a case may reach several)."""
    counts = cov.get("features", {})
    out = []
    for name in cov.get("shown", ()):
        values = [f for f in dict.fromkeys([*cov.get("declared", ()), *sorted(counts)]) if f.startswith(f"{name}=")]
        if values:
            said = ", ".join(f"{f.split('=', 1)[1]} in {counts.get(f, 0)}" for f in values)
            out.append(f"{name}: {said} of {cov.get('cases', 0)} valid case(s)")
    return out


def summary_line(cov: dict) -> str:
    never = cov.get("never_reached", [])
    head = (f"coverage: {len(cov.get('features', {}))} feature(s) reached over {cov.get('cases', 0)} valid case(s) "
            f"(replayed and generated)")
    if not cov.get("declared"):
        return head + " (the target declares no feature space)"
    if not never:
        return head + f"; all {len(cov['declared'])} declared features reached"
    shown = ", ".join(never[:6]) + (", ..." if len(never) > 6 else "")
    return head + f"; {len(never)} declared feature(s) never reached: {shown}"
