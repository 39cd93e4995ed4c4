"""The JSON report: the one plain dict every renderer works from, versioned, checked on reading.

One shape for ``fuzz`` (one run) and ``nightly`` (one run per target), schema 2::

    {"schema": 2, "provenance": {...}, "summary": {...}, "runs": [run, ...]}

plus ``previous`` and ``history`` when written with a previous report (``trend.py``). A schema-1
report (``fuzz`` wrote the run's fields at the top level, ``nightly`` had no summary) is read
back upgraded to this shape, so renderers and ``--previous`` keep accepting it.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from ..case import Case, check_schema, check_types, parse_json
from ..engine.result import stop_text
from ..engine.stages import rows as stage_rows
from ..errors import InvalidArgument, InvalidCase
from ..finding import Finding, check_violation
from ..safe_io import MAX_REPORT_BYTES, read_text
from ..safe_write import write_error, write_file
from ..text import plural

SCHEMA = 2  # 2: one shape for fuzz and nightly (runs + summary); trend fields


# -- the JSON report -------------------------------------------------------------------------

def report_dict(results) -> dict:
    """A CampaignResult or a list of them -> a report (one run per result); a dict -> itself
    (checked, and upgraded if it has an older schema)."""
    if isinstance(results, dict):
        _check_report(results, "report")
        return upgrade(results)
    listed = list(results) if isinstance(results, (list, tuple)) else [results]
    report_runs = [_run_dict(r) for r in listed]
    return {"schema": SCHEMA, "provenance": provenance(report_runs), "summary": summary(report_runs),
            "runs": report_runs}


def summary(report_runs: list[dict]) -> dict:
    """What a consumer reads first: totals over the runs, and whether any run stopped early."""
    return {"targets": [r["target"] for r in report_runs],
            "examples": sum(r["examples"] for r in report_runs),
            "findings": sum(len(r["findings"]) for r in report_runs),
            "duration_s": round(sum(r["duration_s"] for r in report_runs), 3),
            "stop_reasons": sorted({r.get("stop_reason") or "unknown" for r in report_runs}),
            "errors": sum(len(r.get("errors", ())) for r in report_runs),
            "known": sum(len(_known_ids(r["findings"])) for r in report_runs),
            "unsupported": sum(len(r.get("unsupported", ())) for r in report_runs)}


def _known_ids(findings: list[dict]) -> set:
    """The known bugs a run's findings are, each once (two findings of one known bug were counted twice)."""
    return {str(f["triage"]["known"].get("id")) for f in findings
            if isinstance(f.get("triage"), dict) and isinstance(f["triage"].get("known"), dict)}


def upgrade(report: dict) -> dict:
    """A checked report in the current shape: a schema-1 one-target report becomes one run."""
    if report.get("schema") == SCHEMA:
        return report
    if "runs" in report:
        report_runs = report["runs"]
        rest = {k: v for k, v in report.items() if k != "runs"}
    else:
        top = ("schema", "provenance")
        report_runs = [{k: v for k, v in report.items() if k not in top}]
        rest = {k: v for k, v in report.items() if k in top}
    return {**rest, "schema": SCHEMA, "provenance": rest.get("provenance") or {},
            "summary": summary(report_runs), "runs": report_runs, "upgraded_from": report["schema"]}


def provenance(report_runs: list[dict] | None = None) -> dict:
    """Where a report comes from: versions, the device its runs ran on (their contexts': never this process's
    environment), host, time, command, the git commit of the code under test (the working directory's) and the
    ``FUZZRUNNER_*`` variables of the process, so two reports can be told apart a year later."""
    from .._version import __version__
    versions = {"fuzzrunner": __version__, "python": platform.python_version()}
    placeholders = {}
    for name in ("torch", "triton", "hypothesis", "vllm"):
        module = sys.modules.get(name)
        if module is None:
            continue
        stand_in = placeholder(module)
        if stand_in:
            placeholders[name] = stand_in
        else:
            versions[name] = str(getattr(module, "__version__", "?"))
    ran = {r["context"]["device"] for r in report_runs or () if r.get("context")}
    return {"versions": versions, **({"placeholders": placeholders} if placeholders else {}),
            "device": ran.pop() if len(ran) == 1 else None, "host": platform.node(),
            "platform": platform.platform(), "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": _command()[:1000], "cwd": os.getcwd(), "git": _git_commit(),
            "environment": {k: v[:500] for k, v in sorted(os.environ.items()) if k.startswith("FUZZRUNNER_")}}


def placeholder(module) -> str:
    """What stands in for a package that is not installed (a module with no file, made by an import finder: the
    ``vllm`` that ``sglang_engine``'s boot serves SGLang's imports, ``__version__`` "0.0.0"), in words; "" for a real
    package. A stand-in's version is no installed release: provenance listed ``vllm 0.0.0`` for an SGLang run
    (new-user trial)."""
    if getattr(module, "__file__", None) or list(getattr(module, "__path__", None) or ()):
        return ""
    spec = getattr(module, "__spec__", None)
    loader = getattr(spec, "loader", None)
    by = f" served by {type(loader).__module__}.{type(loader).__qualname__}" if loader is not None else ""
    return f"a placeholder module{by} (no files: not installed, not code under test)"


def _command() -> str:
    """The command line as it can be run again: ``python -m fuzzrunner ...`` when Python ran the
    package's ``__main__.py`` (sys.argv[0] is then that file's path)."""
    import shlex
    first = sys.argv[0] if sys.argv else ""
    head = ["python", "-m", "fuzzrunner"] if first.endswith(os.path.join("fuzzrunner", "__main__.py")) else [first]
    return shlex.join(head + sys.argv[1:])


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def runs(report: dict) -> list[dict]:
    """The per-target runs of a report (of any schema)."""
    return report["runs"] if "runs" in report else [report]


def _run_dict(r) -> dict:
    settings = r.settings.to_dict() if hasattr(r.settings, "to_dict") else dict(r.settings or {})
    return {"target": r.target, "settings": settings, "seed": r.seed, "faults": list(r.faults),
            "examples": r.examples, "invalid": r.invalid, "duration_s": round(r.duration_s, 3),
            "worker_restarts": r.worker_restarts, "known_crash_skips": r.known_crash_skips,
            "known_crash_causes": [{"id": i, **c} for i, c in getattr(r, "known_crash_causes", {}).items()],
            "tool_limitations": [{"id": i, **c} for i, c in getattr(r, "tool_limitations", {}).items()],
            "worker_recycles": getattr(r, "worker_recycles", 0),
            "budget_cut_cases": getattr(r, "budget_cut_cases", 0),
            "worker_s": round(getattr(r, "worker_s", 0.0), 3),
            **_stage_dict(r, settings),
            "replayed": [{"path": str(p), "id": i, "still_failing": bool(s)} for p, i, s in r.replayed],
            "findings": [_finding_dict(f if isinstance(f, Finding) else Finding.from_dict(f)) for f in r.findings],
            "timeline": [[round(t, 3), n, k] for t, n, k in r.timeline],
            # why it ended (an interrupted run's report is partial), and what it kept apart
            "stop_reason": stop_text(r.stop_reason), "generated": r.generated,
            "flaky": [_finding_dict(f if isinstance(f, Finding) else Finding.from_dict(f)) for f in r.flaky],
            "quarantined": [{"path": p, "moved_to": m, "why": w} for p, m, w in r.quarantined],
            # corpus and seed cases the release under test refused (UnsupportedCase): kept, skipped
            "unsupported": [{"path": p, "why": w} for p, w in getattr(r, "unsupported", ())],
            "warnings": list(r.warnings), "errors": list(r.errors),
            "context": r.context.to_dict() if getattr(r, "context", None) else None,
            **_coverage_dict(r), **({"cluster": r.cluster} if getattr(r, "cluster", None) else {}),
            **({"code_under_test": r.code_under_test} if getattr(r, "code_under_test", None) else {}),
            **({"target_details": list(r.target_details)} if getattr(r, "target_details", None) else {})}


def _stage_dict(r, settings: dict) -> dict:
    """``stage_s``: the rows of ``fuzz --stage-times``' table (engine/stages.py: every stage, ``other``; ``report``
    once ``note_report_time`` adds it), and ``wall_s``: the command's wall time from its start (set-up, the
    campaign's ``duration_s``, what came after it)."""
    stage_s = getattr(r, "stage_s", {}) or {}
    if not stage_s:
        return {"stage_s": {}, "wall_s": round(r.duration_s, 3)}
    got, wall = stage_rows(stage_s, r.duration_s, max(1, int(settings.get("workers") or 1)))
    return {"stage_s": {k: round(v, 4) for k, v in got.items()}, "wall_s": round(wall, 3)}


def note_report_time(report: dict, seconds: float) -> dict:
    """Each run's ``stage_s["report"]`` (building the report: writing it cannot be in the file) and its wall."""
    for run in runs(report):
        if run.get("stage_s"):
            run["stage_s"]["report"] = round(seconds, 4)
            run["wall_s"] = round(run.get("wall_s", 0.0) + seconds, 3)
    return report


def skip_lines(skips: int, causes: list, generated: int) -> list[str]:
    """Cases the CPU pre-check kept off the GPU, per root cause; plainly said when they were most cases."""
    if not skips:
        return []
    most = (f"MOST CASES WERE NOT RUN ON THE GPU: {skips} of {generated} generated. "
            if generated and skips * 2 > generated else "")
    lines = [f"{most}{skips} case(s) not run on the GPU: their CPU pre-check showed the root cause of a known "
             f"crash, and they would only have re-hit it"]
    lines += [f"  {c['count']} x {c['short']}" for c in causes]
    return lines


def cluster_text(c: dict) -> str:
    """One line on the Ray cluster a run used (the text summary and the HTML say it the same way)."""
    shared = "a Redis example database" if c["example_database"] == "redis" else "the driver's example database"
    return (f"on Ray {c['ray_version']} ({c['ray']}): {plural(c['nodes'], 'node')}, {plural(c['cpus'], 'CPU')}, "
            f"{plural(c['gpus'], 'GPU')}; "
            f"shards shared {shared}")


def _coverage_dict(r) -> dict:
    """Which features of the case space the run reached (coverage.py); none from an old result."""
    coverage = getattr(r, "coverage", None)
    return {"coverage": coverage.to_dict()} if coverage is not None else {}


def _finding_dict(f: Finding) -> dict:
    """The corpus file's shape, its ``preceding`` cases counted, not copied (``report_preceding``)."""
    d = f.to_dict()
    d["preceding"] = report_preceding(d["preceding"])
    return d


def report_preceding(preceding: dict | None) -> dict | None:
    """A finding's ``preceding`` as the report keeps it: ``of`` and the counts; the cases are stored once, in the
    finding's corpus file (up to engine.hub.HISTORY_CAP, 64: ``fuzzrunner replay --preceding FILE`` runs them), and
    ``in_finding_file`` says how many it keeps; ``dropped`` counts every earlier case (``len(cases) + dropped`` is still
    how many its worker ran before it). A copy of all of them made 79% and 74% of two vllm_engine GPU campaigns'
    reports, 91% of a CPU one's (each case about 6 KB as written)."""
    if not preceding or not preceding.get("cases"):
        return preceding
    n = len(preceding["cases"])
    return {**preceding, "cases": [], "dropped": preceding.get("dropped", 0) + n, "in_finding_file": n}


def _plain(x):
    """json's fallback for values in violation details: numpy scalars, paths, anything else as text."""
    return x.item() if hasattr(x, "item") else str(x)


def json_text(results) -> str:
    return json.dumps(report_dict(results), indent=2, default=_plain) + "\n"


def write_json(results, path) -> Path:
    return write_text(path, json_text(results))


def load_report(path) -> dict:
    """Read a JSON report back, checking its shape, in the current shape (an older schema is
    upgraded); ``InvalidCase`` (one line) if it is not a report."""
    source = str(path)
    data = parse_json(read_text(path, MAX_REPORT_BYTES), source)
    _check_report(data, source)
    return upgrade(data)



def load_previous(path: str | None, targets=()) -> dict | None:
    """The report ``--previous`` names (``path``; None: none), read before any case runs: a bad one costs
    nothing. A report that ran none of ``targets`` (the campaign's) is refused: it would compare nothing, every
    finding "new", nothing "fixed"."""
    if path is None:
        return None
    if not path:
        raise InvalidArgument("--previous: an empty path names no report; give the JSON report of an earlier run, "
                              "or drop --previous.")
    try:
        previous = load_report(path)
    except InvalidCase as e:
        raise InvalidArgument(f"--previous: {e} Pass the JSON report of an earlier run, or drop --previous.") from None
    ran = sorted({r.get("target") for r in previous.get("runs", []) if isinstance(r.get("target"), str)})
    if targets and not set(ran) & set(targets):
        raise InvalidArgument(f"--previous {path!r} has no run of {' or '.join(map(repr, targets))} (it ran: "
                              f"{', '.join(ran) or 'nothing'}): there would be nothing to compare. Pass a report of "
                              f"this target's earlier run, or drop --previous.")
    return previous


_RUN_FIELDS = {"target": str, "settings": dict, "faults": list, "examples": int, "invalid": int,
               "duration_s": (int, float), "worker_restarts": int, "replayed": list, "findings": list,
               "timeline": list}
_FINDING_FIELDS = {"id": str, "signature": dict, "message": str, "case": dict, "first_found_after_examples": int,
                   "found_after_s": (int, float), "minimized": bool, "others": list}


def _check_report(data, source: str) -> None:
    if not isinstance(data, dict):
        raise InvalidCase(f"{source}: a report must be a JSON object, got {type(data).__name__}.")
    schema = check_schema(data, SCHEMA, source, "report")
    if "runs" not in data:
        if schema >= 2:
            raise InvalidCase(f"{source}: missing field 'runs'; is this a fuzzrunner report?")
        return _check_run(data, source)
    if not isinstance(data["runs"], list):
        raise InvalidCase(f"{source}: 'runs' must be a list of per-target runs.")
    for i, run in enumerate(data["runs"]):
        if not isinstance(run, dict):
            raise InvalidCase(f"{source}: run {i} must be a JSON object.")
        _check_run(run, f"{source}: run {i}")


def _check_run(run: dict, where: str) -> None:
    check_types(run, _RUN_FIELDS, where, required=True)
    if run.get("seed") is not None and not isinstance(run["seed"], int):
        raise InvalidCase(f"{where}: 'seed' must be an integer or null.")
    for j, point in enumerate(run["timeline"]):
        if not (isinstance(point, list) and len(point) == 3 and all(isinstance(x, (int, float)) for x in point)):
            raise InvalidCase(f"{where}: timeline point {j} must be [elapsed_s, examples, findings].")
    for j, f in enumerate(run["findings"]):
        if not isinstance(f, dict):
            raise InvalidCase(f"{where}: finding {j} must be a JSON object.")
        check_types(f, _FINDING_FIELDS, f"{where}: finding {j}", required=True)
        for k, v in enumerate([f["violation"], *f.get("others", [])] if "violation" in f else []):
            check_violation(v, f"{where}: finding {j}: {'violation' if k == 0 else f'others[{k - 1}]'}")
        if not all(isinstance(f["signature"].get(k), str) for k in ("tool", "kind", "kernel", "location", "tensor")):
            raise InvalidCase(f"{where}: finding {j}: 'signature' needs string tool, kind, kernel, location, tensor.")
        if f.get("repro") is not None and not isinstance(f["repro"], str):
            raise InvalidCase(f"{where}: finding {j}: 'repro' must be a path or null.")
        Case.from_dict(f["case"], source=f"{where}: finding {j}")


def write_text(path, text: str) -> Path:
    """Write a report file (readable by all: CI artifacts, a web server) where the user said: a device or
    a FIFO in place, a link's target (``safe_write``); one-line error, saying why, otherwise."""
    try:
        return write_file(path, text)
    except OSError as e:
        raise write_error("report", path, e) from None
