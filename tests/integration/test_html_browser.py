"""The HTML report in a real browser: playwright driving a system chromium over file://.

Skipped, with the reason, where playwright (``pip install -e ".[browser]"``) or a chromium
(``apt-get install -y chromium``; or ``FUZZRUNNER_CHROMIUM=/path``) is missing: setting either up
needs the network, so CI does not (docs/report.md).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.engine.result import CampaignResult, StopReason
from fuzzrunner.finding import Finding
from fuzzrunner.report import build_report, report_dict, write_html
from fuzzrunner.settings import profile
from fuzzrunner.violation import Violation

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def _chromium() -> str | None:
    for candidate in (os.environ.get("FUZZRUNNER_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="module")
def page():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: "
                                   "pip install -e '.[browser]' to run the browser test of the HTML report")
    chromium = _chromium()
    if chromium is None:
        pytest.skip("no chromium: apt-get install -y chromium (or set FUZZRUNNER_CHROMIUM) for the browser test")
    with sync_api.sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(executable_path=chromium, args=ARGS, timeout=30_000)
        except sync_api.Error as e:
            pytest.skip(f"{chromium} does not start under playwright: {str(e).splitlines()[0]}")
        try:
            yield browser.new_page()
        finally:
            browser.close()


def _finding(tensor: str, kind: str = "uninitialized-read", line: int = 103, **details) -> Finding:
    case = Case("reference_runner", {"max_loras": 1}, [{"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},
                                                       {"op": "step", "requests": []}])
    tool = "numeric" if kind == "numeric-mismatch" else "shadow"
    v = Violation(tool, kind, "aten.add.Tensor", f"fuzzrunner/runner/punica.py:{line}", tensor,
                  f"{kind} of {tensor} <in op 0>", {"op_index": 0, **details},
                  site="fuzzrunner/runner/punica.py::PunicaWrapper.add_lora")
    return Finding(v.signature, case, v, first_found_after_examples=4, found_after_s=1.2, minimized=True)


def _campaign(findings, examples=40) -> CampaignResult:
    r = CampaignResult("reference_runner", profile("ci"), 3, (), examples=examples, generated=examples,
                       duration_s=8.0, findings=findings, stop_reason=StopReason.MAX_EXAMPLES,
                       timeline=[(0.2 * i, i, int(i >= 4) * len(findings)) for i in range(1, examples + 1)])
    r.coverage.declared = ("op=step", "op=dummy_run", "op=capture")
    for i in range(examples):  # every case steps, every other one has a dummy run; none captures
        r.coverage.add(("op=step",) + (("op=dummy_run",) if i % 2 else ()))
    return r


WINDOW = {"at": [0], "start": 15, "stop": 22, "worst": 18, "expected": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
          "actual": [0.1, 0.2, 0.3, 2.0, 0.5, 0.6, 0.7]}


@pytest.fixture(scope="module")
def report_file(tmp_path_factory) -> Path:
    """Three nightlies: the third has one still-open, one new (numeric) and one fixed finding."""
    open_, gone = _finding("embeddings_indices"), _finding("token_lora_mapping")
    fresh = _finding("hidden", "numeric-mismatch", 40, window=WINDOW, worst_index=[0, 18], worst_error=1.6)
    report = report_dict(_campaign([open_, gone]))
    report = build_report(_campaign([open_, gone], 30), previous=report)
    report = build_report(_campaign([_finding("embeddings_indices", line=110), fresh]), previous=report)
    return write_html(report, tmp_path_factory.mktemp("html") / "report.html")


def test_the_report_renders_in_chromium_without_errors_and_its_parts_work(page, report_file):
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: errors.append(f"fetched {r.url}") if not r.url.startswith("file:") else None)
    page.goto(report_file.as_uri())
    assert page.title() == "fuzzrunner: 2 findings in 1 target"

    rows = page.locator("section#run-0 table.findings > tbody > tr:not(.detail)")
    assert rows.count() == 2
    assert rows.nth(0).locator(".kind").is_visible() and rows.nth(0).locator(".trend").inner_text() == "still open"
    assert rows.nth(1).locator(".trend").inner_text() == "new"

    window = page.locator("pre.window")
    assert window.is_visible() and "[2]" in window.inner_text() and "[0.4]" in window.inner_text()

    case = page.locator("tr.detail details").first
    assert not case.locator("pre").is_visible()  # collapsed until clicked
    case.locator("summary").click()
    assert case.locator("pre").is_visible() and '"dummy_run"' in case.locator("pre").inner_text()

    trend = page.locator("table.trend-table")
    assert trend.is_visible()
    assert [s.strip() for s in trend.locator("tbody td:first-child").all_inner_texts()] == ["new", "still open",
                                                                                            "fixed"]
    assert "token_lora_mapping" in trend.locator("tr.trend-fixed").inner_text()
    trend.locator("tr.trend-new a").click()
    assert page.url.endswith("#f-" + _finding("hidden", "numeric-mismatch").id)

    chart = page.locator("section#run-0 figure svg")
    box = chart.bounding_box()
    assert chart.is_visible() and box and box["width"] > 300 and box["height"] > 60
    assert len(chart.locator("polyline").get_attribute("points").split()) > 10
    assert chart.locator("circle").count() == 2  # a marker per finding

    coverage = page.locator("section#run-0 .cov-never")  # the declared feature no case reached
    assert coverage.is_visible() and "op=capture" in coverage.inner_text()
    assert page.locator("section#run-0 tr.never").first.is_visible()
    assert page.locator("section#run-0 table.heat").is_visible()

    history = page.locator("svg.history")
    assert history.is_visible() and history.locator("circle").count() == 3 and history.locator("polyline").count() == 1
    width = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert width <= 0, f"the page scrolls sideways by {width}px"
    assert errors == []
