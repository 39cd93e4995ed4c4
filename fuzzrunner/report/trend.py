"""Trend across reports: each finding marked new / still-open / fixed against a previous report.

Findings are matched by their stable id (``signature.py``: tool, kind family, kernel, tensor and
the *function* holding the bad access, never the line), or an earlier id of theirs (``aliases``),
per target; a memory error left unmatched is then matched by its access at another place
(``Signature.moved_from``: a renamed function, a renamed or moved target file, also where no corpus
replay filed it under its new id), and takes the previous id as an alias. A finding of the previous
report that this run of the same target did not find is listed in the run's ``fixed`` (the
corpus replays every known finding first, so a bug still there is found again). A target the
previous report did not run has no fixed findings, and its findings are new; a target this
report did not run is not compared at all (a skipped target is not a fix). A run whose planted
faults differ from the previous run's is compared with a warning (turning a fault off rehearses a fix).

``history`` keeps a few counts of each earlier report (oldest first), so a chart can show
findings over time without keeping old reports around.
"""

from __future__ import annotations

from .. import source
from ..signature import Signature
from .json_report import report_preceding, summary

NEW, OPEN, FIXED = "new", "still-open", "fixed"
HISTORY = 60  # earlier reports kept in ``history``: two months of nightlies


def mark(report: dict, previous: dict, *, source: str = "") -> dict:
    """``report`` (current shape) with each finding's ``trend``, each run's ``fixed``, a
    ``previous`` reference, the ``history`` and the summary's trend counts; a new dict."""
    before = {r["target"]: r for r in previous["runs"]}
    report_runs = [_mark_run(r, before.get(r["target"])) if _comparable(r, before.get(r["target"]))
                   else _faults_differ(_mark_run(r, before[r["target"]]), before[r["target"]])
                   for r in report["runs"]]
    out = {**report, "runs": report_runs, "summary": {**summary(report_runs), "trend": counts(report_runs)}}
    prov = previous.get("provenance") or {}
    out["previous"] = {"path": source, "written_at": prov.get("written_at"), "git": prov.get("git"),
                       "targets": sorted(before)}
    out["history"] = (list(previous.get("history") or []) + [history_entry(previous)])[-HISTORY:]
    return out


def _comparable(run: dict, before: dict | None) -> bool:
    return before is None or sorted(before.get("faults") or []) == sorted(run.get("faults") or [])


def _faults_differ(run: dict, before: dict) -> dict:
    """Runs of one target with different planted faults are compared (turning a planted fault off
    is how a fix is rehearsed), with a warning that says so."""
    note = (f"the previous report's run of {run['target']} had planted faults "
            f"[{', '.join(before.get('faults') or []) or 'none'}], this one "
            f"[{', '.join(run.get('faults') or []) or 'none'}]: fixed and new follow the faults switched")
    return {**run, "warnings": [*run.get("warnings", []), note]}


def _ids(f: dict) -> set:
    """A finding's id and its aliases (earlier ids: the function holding its access was renamed)."""
    return {f["id"], *(a for a in f.get("aliases") or () if isinstance(a, str))}


def _mark_run(run: dict, before: dict | None) -> dict:
    earlier = before["findings"] if before else []
    seen = set().union(*(_ids(f) for f in earlier))
    now = set().union(*(_ids(f) for f in run["findings"]))
    moved = _moved([f for f in run["findings"] if not _ids(f) & seen], [f for f in earlier if not _ids(f) & now])
    findings = [{**f, "trend": OPEN, "aliases": [*(f.get("aliases") or []), moved[id(f)]["id"]]} if id(f) in moved
                else {**f, "trend": OPEN if _ids(f) & seen else NEW} for f in run["findings"]]
    gone = {id(f) for f in moved.values()}
    # a previous report written before preceding cases were counted carries them: counted here too
    fixed = [{**f, "trend": FIXED, **({"preceding": report_preceding(f["preceding"])} if f.get("preceding") else {})}
             for f in earlier if not _ids(f) & now and id(f) not in gone]
    return {**run, "findings": findings, "fixed": fixed}


def _moved(new: list[dict], gone: list[dict]) -> dict[int, dict]:
    """Each unmatched finding that is an unmatched earlier one's access at another place, paired
    one to one (by ``id()`` of the new one's dict)."""
    pairs: dict[int, dict] = {}
    left = [(f, _signature(f)) for f in gone]
    for f in new:
        sig = _signature(f)
        match = next((i for i, (_, old) in enumerate(left) if sig.moved_from(old)), None)
        if match is not None:
            pairs[id(f)] = left.pop(match)[0]
    return pairs


def _signature(f: dict) -> Signature:
    """A report finding's signature, with the sites its worker named learned (where its buffers were
    made: this process may not be able to read the files)."""
    v = f.get("violation")
    details = v.get("details") if isinstance(v, dict) else None
    if isinstance(details, dict) and isinstance(details.get("sites"), dict):
        source.learn_sites(details["sites"])
    return Signature.from_dict(f["signature"])


def counts(report_runs: list[dict]) -> dict:
    """new / still_open / fixed over the runs (zero each where no run carries a trend)."""
    found = [f.get("trend") for r in report_runs for f in r["findings"]]
    return {"new": found.count(NEW), "still_open": found.count(OPEN),
            "fixed": sum(len(r.get("fixed", ())) for r in report_runs)}


def history_entry(report: dict) -> dict:
    """One point of the history: when, which code, and per target how many findings."""
    prov = report.get("provenance") or {}
    per = {r["target"]: {"findings": len(r["findings"]), "examples": r["examples"],
                         **({"fixed": len(r["fixed"])} if "fixed" in r else {})} for r in report["runs"]}
    return {"written_at": prov.get("written_at"), "git": prov.get("git"), "runs": per}


def has_trend(report: dict) -> bool:
    return "previous" in report


def trend_text(run: dict, previous: dict | None = None) -> str:
    """A few lines for the terminal: the run's counts, then each new and fixed finding."""
    if "fixed" not in run:
        return ""
    marks = [f.get("trend") for f in run["findings"]]
    when = f" (written {previous['written_at']})" if previous and previous.get("written_at") else ""
    lines = [f"{run['target']}: against the previous report{when}: {marks.count(NEW)} new, "
             f"{marks.count(OPEN)} still open, {len(run['fixed'])} fixed"]
    lines += [f"  new: {_short(f)} ({f['id']})" for f in run["findings"] if f.get("trend") == NEW]
    lines += [f"  fixed: {_short(f)} ({f['id']})" for f in run["fixed"]]
    lines += [f"  note: {w}" for w in run.get("warnings", []) if "planted faults" in w and "switched" in w]
    return "\n".join(lines) + "\n"


def _short(f: dict) -> str:
    s = f["signature"]
    return Signature.from_dict(s).short(where=s.get("site") or s["location"], tool=False)
