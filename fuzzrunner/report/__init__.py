"""Campaign reports: versioned JSON, JUnit XML for CI, and one self-contained HTML page.

Every renderer works from one plain dict, the JSON report. A ``CampaignResult`` (or a list of
them, one per target, as a nightly run makes) becomes that dict first; a report read back with
``load_report`` renders the same way, so reports merged from many hosts can be rendered again.
All output is ASCII (non-ASCII text is escaped), so no locale can garble a report.
"""

from __future__ import annotations

from pathlib import Path

from .html import html_text, write_html
from .json_report import SCHEMA, json_text, load_previous, load_report, report_dict, runs, write_json
from .junit import failure_text, junit_text, write_junit
from .trend import mark

__all__ = ["SCHEMA", "build_report", "failure_text", "html_text", "json_text", "junit_text", "load_previous",
           "load_report", "report_dict", "runs", "write_html", "write_json", "write_junit", "write_reports"]


def build_report(results, *, previous: dict | None = None, previous_source: str = "",
                 skipped: dict[str, str] | None = None) -> dict:
    """The report dict; with ``previous`` (a loaded earlier report) each finding carries its trend;
    ``skipped``: targets that did not run, with why (a nightly's unavailable targets)."""
    report = report_dict(results)
    if skipped:
        report["skipped"] = [{"target": name, "reason": reason} for name, reason in sorted(skipped.items())]
    return mark(report, report_dict(previous), source=previous_source) if previous is not None else report


def write_reports(results, *, json_path=None, junit_path=None, html_path=None,
                  previous: dict | None = None) -> list[Path]:
    """Write whichever of the three reports have a path; the report dict is built once."""
    report = build_report(results, previous=previous)
    pairs = ((json_path, write_json), (junit_path, write_junit), (html_path, write_html))
    return [write(report, p) for p, write in pairs if p is not None]
