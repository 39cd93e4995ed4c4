"""Known bugs: a campaign's findings that its target names as known bugs of the code under test are labelled.

A target may declare ``known_bugs(finding) -> {"id", "title", "upstream", "status"} | None`` (``Target.known_bugs``):
given a finding as the JSON report writes it (``violation``, ``case``, ...), the known bug it is, or None. At the
campaign's end (after the CPU triage of GPU findings) each finding it names gets ``triage["known"]``: the report
and the summary then say "known: V1 ..." where a user would otherwise read a new bug (docs/triage.md). A finding
it does not name is left as it was. The target's function runs in the campaign process; an exception of it costs
no finding: the campaign warns once and labels nothing more.

The search asks it too, of each bug as it first shows (``is_known``): a known bug is not shrunk (its minimal case is
the target's to ship: ``sglang_engine``'s seeds are the known bugs' minimal cases), so the budget goes to new ones;
shrinking the known bugs a seed had shown took most of a short ``sglang_engine`` campaign's cases (CHANGELOG).
"""

from __future__ import annotations

from ..finding import Finding
from ..text import describe, safe_str

FIELDS = ("id", "title", "upstream", "status")


def is_known(finding: Finding, known_bugs) -> bool:
    """Whether ``known_bugs`` names ``finding`` as a known bug; an exception or an answer of the wrong shape is
    "not known" here (the finding is shrunk as any other), said once by ``label_known`` at the campaign's end."""
    try:
        bug = known_bugs(finding.to_dict())
    except Exception:  # noqa: BLE001 - the target's classifier never costs a finding
        return False
    return isinstance(bug, dict) and bool(bug.get("id"))


def known_label(finding: Finding, known_bugs) -> dict | None:
    """The label ``known_bugs`` gives ``finding`` (``{"id", "title", "upstream", "status"}``, as a campaign stores it
    in ``triage["known"]``), or None: not a known bug, or the target's function raised or answered out of shape (a
    replay's label line is left out; the campaign's ``label_known`` says why)."""
    try:
        bug = known_bugs(finding.to_dict())
    except Exception:  # noqa: BLE001 - the target's classifier never costs a replay
        return None
    return _label(bug) if isinstance(bug, dict) and bug.get("id") else None


def _label(bug: dict) -> dict:
    return {k: safe_str(bug[k], 500) for k in FIELDS if bug.get(k)}


def label_known(findings: list[Finding], known_bugs, target_name: str) -> tuple[list[Finding], str | None]:
    """Label each of ``findings`` that ``known_bugs`` names (``triage["known"]``); (the labelled ones, a warning
    or None)."""
    labelled: list[Finding] = []
    for f in findings:
        try:
            bug = known_bugs(f.to_dict())
        except Exception as e:  # noqa: BLE001 - the target's classifier never costs a finding
            return labelled, (f"target {target_name!r}: its known_bugs raised on finding {f.id} ({describe(e)}): "
                              f"findings are not labelled as known bugs")
        if bug is None:
            continue
        if not isinstance(bug, dict) or not bug.get("id"):
            return labelled, (f"target {target_name!r}: its known_bugs returned {safe_str(bug, 100)} for finding "
                              f"{f.id}: it returns None or a dict with at least 'id' (and {', '.join(FIELDS[1:])})")
        f.triage = {**(f.triage or {}), "known": _label(bug)}
        labelled.append(f)
    return labelled, None

