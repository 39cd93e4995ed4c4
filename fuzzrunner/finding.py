"""A finding's whole life: its signature and id, how violations of one case become findings,
how two sightings of one bug merge, its one dict shape, and how it reads to a person.

Identity: a finding is one bug, named by (tool, kind family, kernel or op, tensor, site), where
the site is the *function* holding the bad access (``source.site``), never its line: a line
shift must not turn a live bug into "fixed". Uninitialized and stale reads of one tensor at one
site are one bug (which of the two a case shows depends only on whether an earlier op happened
to write the bytes), so they share a family and an id, and shrinking reaches the simpler case.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from . import names
from .case import Case, check_schema, check_types, parse_json
from .context import Context
from .errors import InvalidCase, UnregisteredKind
from .safe_io import read_text
from .sighting import found_by_of, found_text, merged_found_by, same_root_cause
from .signature import Signature
from .text import plural
from .violation import Violation, cause_lines, raised_cuda_error, window_lines

__all__ = ["FINDING_SCHEMA", "Finding", "Signature", "group", "limitations", "merge", "primary"]

FINDING_SCHEMA = 2  # 2: violations carry their site; findings their target spec and state


# -- from violations to findings ------------------------------------------------------------------

def _rank(v: Violation) -> tuple:
    kind = names.KINDS.get(v.kind)
    return (kind.priority if kind else 9, v.details.get("seq", 1 << 62))


def primary(violations: list[Violation]) -> Violation:
    """The root-cause violation: memory errors first, then numeric, then the earliest seen."""
    return min(violations, key=_rank)


def _seq(v: Violation) -> int:
    return v.details.get("seq", 1 << 62)


def _op_heads(violations: list[Violation]) -> dict:
    """op index -> the violation that heads that op's memory errors: its first read of unwritten
    memory (a garbage value read there becomes the wild address of any later out-of-bounds
    access), else its first out-of-bounds access."""
    heads: dict = {}
    for v in sorted(violations, key=_seq):
        if not names.kind(v.kind).located:
            continue
        op = v.details.get("op_index")
        best = heads.get(op)
        if best is None or (best.kind == "out-of-bounds" and v.kind != "out-of-bounds"):
            heads[op] = v
    return heads


def _invariant_heads(violations: list[Violation], memory_heads: dict) -> dict:
    """op index -> what heads an op that has no memory error: its first invariant violation, else
    its first numeric (then poison) difference: wrong values of one op (``hidden``, then the
    ``logits`` computed from it) are one bug."""
    out: dict = {}
    for v in sorted(violations, key=_seq):
        op = v.details.get("op_index")
        if names.kind(v.kind).launch_check and op not in memory_heads:
            out.setdefault(op, v)
    for v in sorted(violations, key=_rank):
        op = v.details.get("op_index")
        if names.kind(v.kind).wrong_values and op not in memory_heads:
            out.setdefault(op, v)
    return out


def _explained_by(v: Violation, explained: dict) -> Violation | None:
    head = explained.get(v.details.get("op_index"))
    if head is None or head is v:
        return None
    if names.kind(v.kind).launch_check:
        return head if v.tensor == head.tensor else None
    return head if names.kind(v.kind).wrong_values else None


def _owner(v: Violation, heads: dict) -> Violation | None:
    """The memory error ``v`` belongs to: a crash, hang or sanitizer error follows the case's first
    one (the bad access kills or floods the process); anything else, the head of its op."""
    if names.kind(v.kind).case_wide:
        return min(heads.values(), key=_seq) if heads else None
    return heads.get(v.details.get("op_index"))


def _is_finding(v: Violation) -> bool:
    kind = names.KINDS.get(v.kind)
    return kind is None or kind.finding


def limitations(violations: list[Violation]) -> list[Violation]:
    """The violations that are the tool's own limits (``names.Kind.finding`` off): never a finding,
    always said (a campaign counts and warns; replay and the plugin warn)."""
    return [v for v in violations if not _is_finding(v)]


def _lost_after(v: Violation, raised: Violation | None) -> bool:
    """``v`` is the lost CUDA context (found after the case) that the case's CUDA error raised in
    Python (a device-side assert under blocking launches) left behind."""
    return raised is not None and v is not raised and names.tool(v.tool).context_lost and v.kind == "crash"


def group(violations: list[Violation]) -> list[tuple[Violation, list[Violation]]]:
    """One (head, others) per root cause among one case's violations.

    Rules (docs/architecture.md): the memory errors of one op are one root cause (that step did
    not write what it read), headed by its first unwritten read; an op whose only memory errors are
    out-of-bounds accesses belongs to the case's first unwritten read, if any (a garbage index read
    earlier); a numeric, poison or invariant violation belongs to the memory error of its op; a
    crash, hang or sanitizer error to the case's first memory error; a lost CUDA context to the CUDA
    error raised in Python that broke it. In an op with no memory
    error, its first metadata-invariant violation heads the op's numeric and poison differences and
    its other invariant violations of the same tensor (a launch given inconsistent metadata computes
    wrong rows; the check runs before the launch); in an op with neither, its first numeric (else
    poison) difference heads the others of that op. What nothing explains heads its own group.
    Groups whose heads are one bug (same id) are one. The tool's own limits (``limitations``)
    head no group.
    """
    violations = [v for v in violations if _is_finding(v)]
    heads = _op_heads(violations)
    explained = _invariant_heads(violations, heads)
    first = min(heads.values(), key=_seq) if heads else None
    if first is not None and first.kind != "out-of-bounds":  # wild accesses follow the garbage read
        heads = {op: (first if h.kind == "out-of-bounds" else h) for op, h in heads.items()}
    groups: dict[str, tuple[Violation, list[Violation]]] = {}
    raised = next((v for v in sorted(violations, key=_seq) if raised_cuda_error(v)), None)
    all_heads = sorted([*heads.values(), *explained.values()], key=_seq)
    for head in all_heads:
        groups.setdefault(head.signature.id, (head, []))
    for v in sorted(violations, key=_rank):
        if any(v is h for h in all_heads):
            if groups[v.signature.id][0] is not v:
                groups[v.signature.id][1].append(v)
            continue
        owner = _owner(v, heads) or _explained_by(v, explained)
        if owner is not None:
            groups[owner.signature.id][1].append(v)
        elif raised is not None and _lost_after(v, raised):  # the context a CUDA error raised in Python broke
            groups.setdefault(raised.signature.id, (raised, []))[1].append(v)
        elif v.signature.id in groups:
            if groups[v.signature.id][0] is not v:
                groups[v.signature.id][1].append(v)
        else:
            groups[v.signature.id] = (v, [])
    return list(groups.values())


# -- the finding ----------------------------------------------------------------------------------

def _seconds(v) -> float | None:
    """A recorded timeout, if it is a real one (files are edited by hand; older ones have none)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= names.MAX_CASE_TIMEOUT_S
    return float(v) if ok else None


@dataclass
class Finding:
    signature: Signature
    case: Case
    violation: Violation                        # the head of its group
    others: list = field(default_factory=list)  # violations of the same case with the same root cause
    first_found_after_examples: int = 0
    found_after_s: float = 0.0
    minimized: bool = False                     # shrinking finished on it
    repro: str | None = None
    found_at: float = field(default_factory=time.time)
    target_spec: str = ""                       # how to load its target (built-in name, FILE.py:OBJ, module:OBJ)
    shrink_interrupted: bool = False            # the campaign stopped mid-shrink; the next run resumes
    flaky: bool = False                         # a crash that a fresh worker did not reproduce
    triage: dict | None = None                  # a GPU finding replayed on the CPU (engine/triage.py)
    case_timeout_s: float | None = None         # the per-case timeout it was found under: replay waits as long
    first_kind: str = ""                        # the kind it was first seen as (a stale read may shrink to an
                                                # uninitialized one: one bug, and the live line said the first)
    aliases: list = field(default_factory=list)  # its earlier ids: the function holding the access was renamed
    context: Context | None = None              # the context it was found under (device, Triton's mode, shadow
    #                                             mode, sanitizer); None: a file from before findings recorded it
    code_under_test: dict = field(default_factory=dict)  # the engine release it was found on (engine, release,
    #                                             tree, patch: Target.code_under_test); {}: our own code, or older
    preceding: dict | None = None               # what its worker ran before it: {"of": the case first found,
    #                                             "cases": the worker's earlier cases, oldest first, "dropped": how
    #                                             many before those}; None: the first case of its worker, or older
    found_by: dict = field(default_factory=dict)  # how it showed: {"seed": path} / {"corpus": path} (a replayed
    #                                             case), {"search": N} (a generated case, after N); {}: older files

    @property
    def id(self) -> str:
        return self.signature.id

    @classmethod
    def of(cls, violation: Violation, others: list, case: Case, **kw) -> Finding:
        return cls(violation.signature, case, violation, list(others), first_kind=violation.kind, **kw)

    def to_dict(self) -> dict:
        return {"schema": FINDING_SCHEMA, "id": self.id, "signature": self.signature.to_dict(),
                "message": self.violation.message, "violation": self.violation.to_dict(),
                "others": [v.to_dict() for v in self.others], "case": self.case.to_dict(),
                "target_spec": self.target_spec or self.case.target,
                "first_found_after_examples": self.first_found_after_examples,
                "found_after_s": round(self.found_after_s, 3), "minimized": self.minimized,
                "shrink_interrupted": self.shrink_interrupted, "flaky": self.flaky,
                "repro": None if self.repro is None else str(self.repro), "found_at": self.found_at,
                "triage": self.triage, "case_timeout_s": self.case_timeout_s,
                "first_kind": self.first_kind or self.signature.kind, "access_id": self.signature.access_id,
                "aliases": list(self.aliases), "context": self.context.to_dict() if self.context else None,
                "code_under_test": dict(self.code_under_test) or None, "preceding": self.preceding,
                "found_by": dict(self.found_by)}

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "finding") -> Finding:
        if not isinstance(d, dict):
            raise InvalidCase(f"{source}: a finding must be a JSON object.")
        if "violation" not in d:
            what = ("a JSON report (its findings are files under the corpus: corpus/findings/ or "
                    "corpus/expected/)" if "runs" in d or "provenance" in d
                    else "a case file, not a finding (replay runs it)" if "ops" in d
                    else "not a fuzzrunner finding (no \"violation\")")
            raise InvalidCase(f"{source}: {what}.")
        check_schema(d, FINDING_SCHEMA, source, "finding", required=False)  # the first findings had none
        _check_finding(d, source)
        _check_kinds(d, source)
        try:
            v = Violation.from_dict(d["violation"])
            return cls(v.signature, Case.from_dict(d["case"], source=source), v,
                       [Violation.from_dict(o) for o in d.get("others", [])],
                       int(d.get("first_found_after_examples", 0)), float(d.get("found_after_s", 0.0)),
                       bool(d.get("minimized", False)), d.get("repro"), float(d.get("found_at", 0.0)),
                       str(d.get("target_spec") or ""), bool(d.get("shrink_interrupted", False)),
                       bool(d.get("flaky", False)), d.get("triage") if isinstance(d.get("triage"), dict) else None,
                       _seconds(d.get("case_timeout_s")), str(d.get("first_kind") or ""),
                       [a for a in d.get("aliases") or [] if isinstance(a, str)], Context.from_dict(d.get("context")),
                       dict(d.get("code_under_test") or {}), _preceding(d.get("preceding"), source),
                       found_by_of(d.get("found_by")))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise InvalidCase(f"{source}: not a fuzzrunner finding ({type(e).__name__}: {e}).") from None

    @classmethod
    def load(cls, path) -> Finding:
        return cls.from_dict(parse_json(read_text(path), str(path)), source=str(path))

    @property
    def shadow_mode(self) -> str | None:
        """The shadow oracle's mode it was found under, if the shadow oracle found it: its context's; in a file
        from before findings recorded their context, "device" where the device mode marked its violation
        (``details.shadow_mode``), else the CPU mode (which did not mark its own)."""
        if self.violation.tool != "shadow":
            return None
        if self.context is not None:
            return self.context.shadow
        return "device" if self.violation.details.get("shadow_mode") == "device" else "cpu"

    def reproduced_by(self, violations: list[Violation]) -> list[Violation]:
        """The violations of a replay that are this bug: matched by id (site, not line), else, for a
        memory error, by its access alone (the function holding it was renamed or moved: see
        ``moved``). Findings written before access ids existed carry the fields it is made of."""
        if names.kind(self.signature.kind).process_death:
            return [v for v in violations if names.kind(v.kind).process_death]
        return [v for v in violations if v.signature.matches(self.id)] or self.moved(violations)

    def moved(self, violations: list[Violation]) -> list[Violation]:
        """The violations that are this bug's access at another site (``Signature.moved_from``: a
        renamed function, a renamed or moved file), when none is at its own."""
        if not self.signature.access_id or any(v.signature.matches(self.id) for v in violations):
            return []
        return [v for v in violations if v.signature.moved_from(self.signature)]


_FIELDS = {"case": dict, "violation": dict, "others": list, "first_found_after_examples": int,
           "found_after_s": (int, float), "found_at": (int, float), "minimized": bool, "shrink_interrupted": bool,
           "flaky": bool, "repro": (str, type(None)), "target_spec": (str, type(None)),
           "first_kind": (str, type(None)), "aliases": list, "context": (dict, type(None)),
           "code_under_test": (dict, type(None)), "preceding": (dict, type(None)), "found_by": (dict, type(None))}
VIOLATION_FIELDS = {"tool": str, "kind": str, "kernel": (str, type(None)), "location": (str, type(None)),
                     "tensor": (str, type(None)), "site": (str, type(None)), "message": (str, type(None)),
                     "details": dict}


def _preceding(p, source: str) -> dict | None:
    """A finding's ``preceding`` as written (its cases checked when replayed), or None."""
    if p is None:
        return None
    if not isinstance(p.get("of"), dict) or not isinstance(p.get("cases"), list):
        raise InvalidCase(f"{source}: 'preceding' must hold 'of' (a case) and 'cases' (a list of cases); it holds "
                          f"{sorted(p)}. Remove the field to replay the case alone.")
    return {"of": p["of"], "cases": list(p["cases"]), "dropped": int(p.get("dropped") or 0)}


def _check_finding(d: dict, source: str) -> None:
    """The fields of a finding file, and of each of its violations, have their types: a hand-edited
    file is refused with the field that is wrong (and quarantined), never loaded to break a report
    or an id later, nor told to upgrade fuzzrunner."""
    if "case" not in d:
        raise InvalidCase(f"{source}: a finding without its 'case'; is this a fuzzrunner finding file?")
    check_types(d, _FIELDS, source)
    for i, v in enumerate([d["violation"], *d.get("others", [])]):
        check_violation(v, f"{source}: {'violation' if i == 0 else f'others[{i - 1}]'}")


def check_violation(v, where: str) -> None:
    """A violation's dict (in a finding file or a report) with its fields' types."""
    if not isinstance(v, dict):
        raise InvalidCase(f"{where} must be an object, got {type(v).__name__}.")
    check_types(v, VIOLATION_FIELDS, where)
    check_types(v, {"tool": str, "kind": str}, where, required=True)


def _check_kinds(d: dict, source: str) -> None:
    """``UnregisteredKind`` for a kind this process does not know: left in place, with what is missing."""
    seen = [d.get("violation"), *(d.get("others") or [])]
    for v in seen:
        kind = v.get("kind") if isinstance(v, dict) else None
        if isinstance(kind, str) and kind not in names.KINDS:
            raise UnregisteredKind(f"{source}: violation kind {kind!r} is not registered in this fuzzrunner (a "
                                   f"plug-in's, or a newer release's): register it (names.register_kind) or "
                                   f"upgrade; the file is left where it is.")


def is_finding_dict(data) -> bool:
    """A finding's dict, or a broken one (no 'case': ``Finding.from_dict`` says so), not a case's."""
    return isinstance(data, dict) and ("violation" in data or "signature" in data)


def merge(into: Finding, other: Finding) -> bool:
    """Fold another sighting of the same bug into ``into``: the smaller case wins (``Case.size``),
    with its violations and its state (``minimized`` belongs to a case that went through a completed
    shrink, never to a smaller one found elsewhere); the earliest discovery counts. True if the case
    changed."""
    size, other_size = into.case.size(), other.case.size()
    # a tie goes to the shrunk case: a shard's raw sighting merged first kept its case, only called minimized,
    # while another shard's completed shrink (same size: [10] against [20]) was dropped (CI, test_ray)
    smaller = other_size < size or (other_size == size and other.minimized and not into.minimized)
    if smaller:
        into.case, into.violation, into.others = other.case, other.violation, other.others
        into.signature, into.context = other.violation.signature, other.context or into.context
        into.minimized, into.shrink_interrupted = other.minimized, other.shrink_interrupted
    if other.first_found_after_examples and (not into.first_found_after_examples
                                             or other.first_found_after_examples < into.first_found_after_examples):
        into.first_found_after_examples, into.first_kind = other.first_found_after_examples, other.first_kind
    times = [t for t in (into.found_after_s, other.found_after_s) if t]
    into.found_after_s = min(times) if times else 0.0
    into.target_spec = into.target_spec or other.target_spec
    into.code_under_test = into.code_under_test or dict(other.code_under_test)
    into.aliases = [a for a in dict.fromkeys([*into.aliases, *other.aliases]) if a != into.id]
    into.found_by = merged_found_by(into.found_by, other.found_by)
    return smaller


def merge_all(findings: list[Finding], others) -> list[Finding]:
    """``findings`` with ``others`` folded in: a sighting of a bug already there merges into it
    (``merge``), a new bug is appended; the order of first sighting is kept."""
    by_id = {f.id: f for f in findings}
    for f in others:
        if f.id in by_id:
            merge(by_id[f.id], f)
        else:
            by_id[f.id] = f
    return list(by_id.values())


# -- for a person -----------------------------------------------------------------------------------

def case_text(case: Case | dict) -> str:
    """A case as JSON a person can read and paste: its fields on one line, then one op per line."""
    d = case.to_dict() if isinstance(case, Case) else dict(case)
    ops = d.pop("ops", [])
    return "\n".join([json.dumps(d)[:-1] + ', "ops": [',
                      *(f"  {json.dumps(op)}{',' * (i < len(ops) - 1)}" for i, op in enumerate(ops)), "]}"])


def triage_text(t: dict) -> str:
    """One line: the known bug the finding is (``t["known"]``, engine/known.py), and what the CPU replay of a GPU
    finding showed (``t["status"]``), where each is there."""
    parts = []
    if isinstance(t.get("known"), dict):
        parts.append(known_text(t["known"]))
    if "status" in t:
        parts.append(_cpu_triage_text(t))
    return "; ".join(parts)


def known_text(known: dict) -> str:
    """One line: the known bug of the code under test a finding is (its target's ``known_bugs``)."""
    rest = "; ".join(str(known[k]) for k in ("upstream", "status") if known.get(k))
    title = f": {known['title']}" if known.get("title") else ""
    return f"known: {known.get('id', '?')}{title}" + (f" ({rest})" if rest else "")


def _cpu_triage_text(t: dict) -> str:
    status = t.get("status")
    if status == "reproduced":
        where = f" ({t['element']})" if t.get("element") else ""
        return f"CPU triage: reproduced on the CPU as {t['short']}{where}: {t['message']}"
    if status == "not-reproduced":
        return "CPU triage: not reproduced on the CPU (a GPU-only bug, or one the CPU oracles cannot see)"
    return f"CPU triage: could not run on the CPU: {t.get('reason', '?')}"


def render(f: Finding | dict, *, indent: str = "  ", with_case: bool = False) -> str:
    """The finding for a terminal, a test failure or a report: what, where, when, how to rerun."""
    f = f if isinstance(f, Finding) else Finding.from_dict(f)
    ops = len(f.case.ops)
    state = ("minimized" if f.minimized else "not shrunk: a known bug" if (f.triage or {}).get("known")
             else "shrink interrupted: resumes next run" if f.shrink_interrupted else "not minimized")
    lines = [f.signature.short(), f.violation.message, *cause_lines(f.violation.details, f.violation.message),
             *window_lines(f.violation.details)]
    if f.flaky:
        lines.append("FLAKY: a fresh worker did not reproduce this crash")
    first = f" as {f.first_kind}" if f.first_kind and f.first_kind != f.signature.kind else ""
    lines.append(f"{found_text(f.found_by, f.first_found_after_examples)}{first} ({f.found_after_s:.1f} s); "
                 f"case: {plural(ops, 'op')}, {state}; id {f.id}")
    root = same_root_cause(f)
    if root:
        lines.append(f"same root cause: {root}")
    if f.triage:
        lines.append(triage_text(f.triage))
    if with_case:
        lines.append(f"Falsifying case ({plural(ops, 'op')}, {state}):")
        lines += ["  " + line for line in case_text(f.case).splitlines()]
    if f.repro:
        lines.append(f"repro: python {f.repro}")
    return "\n".join(indent + line if i else line for i, line in enumerate(lines))
