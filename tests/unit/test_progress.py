"""The progress display: numbers, heartbeat lines off a terminal, a rich bar on one, quiet."""

import io
import re
import types

import pytest

from fuzzrunner import progress as progress_module
from fuzzrunner.engine.events import FindingEvent, ProgressEvent, WarningEvent
from fuzzrunner.engine.result import StopReason
from fuzzrunner.progress import Progress


class Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def settings(max_examples=100, budget_s=None):
    return types.SimpleNamespace(max_examples=max_examples, budget_s=budget_s)


def finding(after=1):
    return types.SimpleNamespace(signature=types.SimpleNamespace(short=lambda: "uninitialized-read of x"),
                                 first_found_after_examples=after, found_after_s=0.5, case=None, found_by={})


def prog(p, examples, findings, generated=None, elapsed=None):
    """A progress event; its ``elapsed`` leaves the search's clock where it is unless given."""
    if elapsed is None:
        elapsed = progress_module.time.monotonic() - p.numbers.start
    return ProgressEvent(examples, examples if generated is None else generated, findings, elapsed, 0)


def result(examples=1):
    return types.SimpleNamespace(stop_reason=StopReason.MAX_EXAMPLES, examples=examples, duration_s=2.0, replayed=[])


def test_the_line_splits_generated_from_shrinking_and_counts_findings():
    p = Progress(Stream(False), settings(max_examples=200), label="ref: ")
    p(prog(p, 60, 1, generated=50))
    text = p.text()
    assert text.startswith("ref: 50/200 generated (25%) + 10 shrinking, 1 finding, ")
    assert re.search(r"cases/s, \d+ s, ETA \d+ s$", text)


def test_a_budget_moves_the_fraction_even_when_few_cases_ran(monkeypatch):
    p = Progress(Stream(False), settings(max_examples=10_000, budget_s=10.0))
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: p.numbers.start + 5.0)
    p(prog(p, 3, 0))
    assert "3/10000 generated (0%, 50% of the 10 s budget)" in p.text() and "ETA 5 s" in p.text()


def test_off_a_terminal_heartbeat_lines_are_spaced_and_messages_are_plain(monkeypatch):
    s = Stream(False)
    p = Progress(s, settings())
    clock = [p.numbers.start]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    for i in range(5):  # within one heartbeat: one line
        clock[0] += 1.0
        p(prog(p, i, 0))
    clock[0] += progress_module.HEARTBEAT_S
    p(prog(p, 9, 0))
    p(FindingEvent(finding(after=1), 0))
    p.done(result(examples=1))
    lines = s.getvalue().splitlines()
    assert [ln.split(" generated")[0] for ln in lines[:2]] == ["0/100", "9/100"]
    assert lines[2] == "  found: uninitialized-read of x after 1 example (0.5 s)"
    assert lines[3] == "stopped: max-examples after 1 case in 2.0 s of campaign"
    assert "\033" not in s.getvalue() and len(lines) == 4


def test_on_a_terminal_rich_draws_a_bar_and_messages_stay_above_it():
    pytest.importorskip("rich")
    s = Stream(True)
    p = Progress(s, settings(max_examples=10), label="ref: ")
    p(prog(p, 5, 0))
    p(WarningEvent("a slow case"))
    p.done(result(examples=5))
    out = s.getvalue()
    assert "  warning: a slow case" in out
    assert out.rstrip().endswith("ref: stopped: max-examples after 5 cases in 2.0 s of campaign")
    assert "\033[" in out  # drawn live, and cleared (transient) before the summary


def test_quiet_prints_only_warnings():
    for tty in (False, True):
        s = Stream(tty)
        p = Progress(s, settings(), quiet=True)
        p(prog(p, 5, 1))
        p(FindingEvent(finding(), 0))
        p(WarningEvent("quarantined a.json"))
        p.done(result())
        assert s.getvalue() == "  warning: quarantined a.json\n"


def test_without_rich_a_terminal_gets_the_plain_line_in_place(monkeypatch):
    monkeypatch.setattr(progress_module, "_Rich", lambda *a: (_ for _ in ()).throw(ImportError("no rich")))
    s = Stream(True)
    p = Progress(s, settings(max_examples=4))
    p(prog(p, 2, 0))
    p.done(None)
    assert s.getvalue().startswith("\r\033[K2/4 generated (50%)") and s.getvalue().endswith("\r\033[K")


def test_the_budget_share_and_eta_count_the_set_up_and_the_rate_does_not(monkeypatch):
    """The budget is the whole command's (engine/deadline.py): its set-up (the GPU shadow's filter build,
    about 30 s) is spent budget and the ETA is what is left of it; the rate is the search's alone."""
    now = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    p = Progress(Stream(False), settings(max_examples=10_000, budget_s=60.0))
    now[0] = 136.0  # 30 s of set-up, then 6 s of the campaign
    p(prog(p, 3, 0, elapsed=6.0))
    assert "(0%, 60% of the 60 s budget)" in p.text() and "0.5 cases/s, 36 s, ETA 24 s" in p.text()


def test_the_line_keeps_one_shape_as_the_budget_overtakes_the_count(monkeypatch):
    """A new user's trial: the line said '1/20 generated (20% of the 120 s budget)', then '14/20 generated (70%)':
    which share it showed switched mid-run with whichever was ahead. Now both, always, in the same places."""
    now = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    p = Progress(Stream(False), settings(max_examples=20, budget_s=120.0))
    shapes = set()
    for t, n in ((24.0, 1), (35.0, 14), (60.0, 15), (100.0, 16)):
        now[0] = t
        p(prog(p, n, 0, elapsed=t))
        shapes.add(re.sub(r"\d+", "N", p.text()))
    assert shapes == {"N/N generated (N%, N% of the N s budget), N findings, N.N cases/s, N s, ETA N s"}, shapes
    assert "1/20 generated (5%, 20% of the 120 s budget)" not in p.text()
    unlimited = Progress(Stream(False), settings(max_examples=20))
    unlimited(prog(unlimited, 14, 0))
    assert "14/20 generated (70%), " in unlimited.text()


def test_under_no_shrink_the_cases_beyond_the_generated_are_re_runs_never_shrinking():
    """New-user trial: a ``--no-shrink`` campaign printed "+ 1 shrinking" (Hypothesis' re-run of the failing case to
    report it): under --no-shrink the line says re-runs, and nothing says shrinking."""
    from fuzzrunner.cli import render
    p = Progress(Stream(False), types.SimpleNamespace(max_examples=20, budget_s=None, shrink=False), label="ref: ")
    p(prog(p, 5, 1, generated=4))
    assert p.text().startswith("ref: 4/20 generated (20%) + 1 re-run, 1 finding, ") and "shrink" not in p.text()
    for shrink, said in ((False, "2 re-runs"), (True, "2 shrinking")):
        r = types.SimpleNamespace(replayed=[1], examples=22, generated=20, invalid=0,
                                  settings=types.SimpleNamespace(shrink=shrink))
        assert render._cases_text(r) == f"23 cases: 1 replayed (corpus and seeds), 20 generated (0 invalid), {said}"
