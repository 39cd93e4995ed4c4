"""Known bugs: a campaign's findings that its target names as known bugs of the code under test are labelled.

A target may declare ``known_bugs(finding) -> {"id", "title", "upstream", "status"} | None`` (``Target.known_bugs``):
given a finding as the JSON report writes it (``violation``, ``case``, ...), the known bug it is, or None. At the
campaign's end (after the CPU triage of GPU findings) each finding it names gets ``triage["known"]``: the report
and the summary then say "known: V1 ..." where a user would otherwise read a new bug (docs/triage.md). A finding
it does not name is left as it was. The target's function runs in the campaign process; an exception of it costs
no finding: the campaign warns once and labels nothing more.
"""

from __future__ import annotations

from ..finding import Finding
from ..text import describe, safe_str

FIELDS = ("id", "title", "upstream", "status")


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
        f.triage = {**(f.triage or {}), "known": {k: safe_str(bug[k], 500) for k in FIELDS if bug.get(k)}}
        labelled.append(f)
    return labelled, None

