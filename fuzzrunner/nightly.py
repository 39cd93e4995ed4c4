"""The nightly job as a library: every built-in target that can run here, one after another, each
with its share of the budget and its own reports at once, then one combined report.

The front end (``fuzzrunner nightly``) only parses, prints and picks the exit code: it passes
``NightlyHooks`` to show progress and summaries. The combined report is written also after a
failure or an interruption, from what ran.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from .context import Context
from .engine.result import StopReason
from .errors import FuzzrunnerError
from .report import build_report, write_reports
from .settings import Settings


def _nothing(*args) -> None:
    return None


@dataclass
class NightlyHooks:
    """What the front end shows and adds: ``start(name, settings)`` gives the target's event callback
    (``settings`` with this target's budget); ``done(name, result)`` after it ran (``result`` None if it
    failed; a front end may export repro scripts here, before the report is made);
    ``reported(name, report)`` once its report is made; ``skipped(name, reason)`` for a target that
    cannot run here; ``written(paths)`` once the combined reports are written (also after a failure
    or an interruption)."""
    start: Callable = _nothing
    done: Callable = _nothing
    reported: Callable = _nothing
    skipped: Callable = _nothing
    written: Callable = _nothing


@dataclass
class NightlyRun:
    results: list = field(default_factory=list)      # CampaignResult per target that ran
    errors: list[str] = field(default_factory=list)  # "target: why it failed"
    skipped: dict[str, str] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)  # the combined reports

    @property
    def interrupted(self) -> bool:
        return any(r.stop_reason is StopReason.INTERRUPTED for r in self.results)


def runnable_targets(hooks: NightlyHooks) -> tuple[list[str], dict[str, str]]:
    """The built-in targets that can run here, and those that cannot, with why."""
    from .target import BUILTIN, unavailable
    skipped = {n: reason for n in BUILTIN if (reason := unavailable(n))}
    for name, reason in skipped.items():
        hooks.skipped(name, reason)
    return [n for n in BUILTIN if n not in skipped], skipped


def report_files(report_dir: Path) -> list[Path]:
    """Every file the nightly may write in ``report_dir``: the combined reports, each built-in target's own."""
    from .target import BUILTIN
    names = ["report.json", "junit.xml", "report.html", *(f"{t}.{ext}" for t in BUILTIN for ext in ("json", "xml"))]
    return [Path(report_dir) / name for name in names]


def run_nightly(settings: Settings, report_dir: Path, *, corpus=None, previous: dict | None = None,
                previous_path: str = "", ray: str | None = None, db: str | None = None,
                hooks: NightlyHooks | None = None, context: Context | None = None) -> NightlyRun:
    """Fuzz each runnable built-in target with ``settings.budget_s`` shared equally; its reports go to
    ``report_dir/NAME.json`` and ``NAME.xml`` as soon as it ends, the combined ones to
    ``report_dir/report.{json,html}`` and ``junit.xml`` at the end. ``context``: the run's, if the caller resolved
    it already (``env_defaults.resolved``): every target runs under it."""
    hooks = hooks or NightlyHooks()
    run = NightlyRun()
    names, run.skipped = runnable_targets(hooks)
    per = (settings.budget_s / len(names)) if settings.budget_s and names else None
    session: AbstractContextManager = nullcontext()
    if ray:
        from .engine.ray_shards import ray_session
        session = ray_session(ray)  # one Ray session for all targets
    with session:
        try:
            for name in names:
                _one(name, settings.override(budget_s=per), report_dir, corpus, previous, previous_path, ray, db,
                     hooks, run, context)
                if run.interrupted:
                    break
        finally:  # the combined report, also after a failure or an interruption
            if run.results:
                try:
                    _write_combined(run, report_dir, previous, previous_path, hooks)
                except KeyboardInterrupt:  # a stop signal as it is written: written again, said interrupted
                    run.results[-1].stop_reason = StopReason.INTERRUPTED
                    _write_combined(run, report_dir, previous, previous_path, hooks)
    return run


def _write_combined(run: NightlyRun, report_dir: Path, previous, previous_path: str, hooks: NightlyHooks) -> None:
    report = build_report(run.results, previous=previous, previous_source=previous_path, skipped=run.skipped)
    run.written = write_reports(report, json_path=report_dir / "report.json", junit_path=report_dir / "junit.xml",
                                html_path=report_dir / "report.html")
    hooks.written(run.written)


def _one(name: str, settings: Settings, report_dir: Path, corpus, previous, previous_path: str, ray, db,
         hooks: NightlyHooks, run: NightlyRun, context: Context | None = None) -> None:
    from .api import fuzz
    on_event = hooks.start(name, settings)
    try:
        result = fuzz(name, settings=settings, corpus=corpus, on_event=on_event, ray=ray, db=db, context=context)
    except FuzzrunnerError as e:
        run.errors.append(f"{name}: {e}")
        hooks.done(name, None)
        return
    run.results.append(result)
    try:
        hooks.done(name, result)
        report = build_report([result], previous=previous, previous_source=previous_path)
        hooks.reported(name, report)
        write_reports(report, json_path=report_dir / f"{name}.json", junit_path=report_dir / f"{name}.xml")
    except KeyboardInterrupt:  # a stop signal once the target ran: its reports are written all the same
        result.stop_reason = StopReason.INTERRUPTED
        write_reports(build_report([result], previous=previous, previous_source=previous_path),
                      json_path=report_dir / f"{name}.json", junit_path=report_dir / f"{name}.xml")
