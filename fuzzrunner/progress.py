"""Campaign progress for a person: a live bar on a terminal (rich), plain heartbeat lines otherwise.

Fed with the campaign's events (``progress``, ``finding``, ``regression``, ``warning``). The
numbers (generated of max, %, shrinking or re-runs, findings, cases/s, ETA) are computed here, once, for
both shapes; rich only draws them. Without rich (it is a dependency, but a bare GPU image may
lack it) a terminal gets the plain line rewritten in place.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .engine import events

HEARTBEAT_S = 10.0


class _Numbers:
    """Where a campaign stands, from its last progress event."""

    def __init__(self, settings):
        self.max_examples, self.budget = settings.max_examples, settings.budget_s
        self.shrink = getattr(settings, "shrink", True)  # --no-shrink: the cases beyond the generated are re-runs
        self.began = time.monotonic()  # the budget's clock: the command's start (engine/deadline.py)
        self.start = self.began        # the search's own clock, from the progress events: the rate's
        self.examples = self.generated = self.findings = 0

    def update(self, event: events.ProgressEvent) -> None:
        self.examples, self.findings, self.generated = event.examples, event.findings, event.generated
        # after the set-up (imports, a filter build), which the rate leaves out
        self.start = time.monotonic() - event.elapsed

    def _fractions(self) -> tuple[float, float]:
        """(done by count, done by time): the campaign ends at whichever reaches 1 first."""
        count = self.generated / self.max_examples if self.max_examples else 0.0
        spent = (time.monotonic() - self.began) / self.budget if self.budget else 0.0
        return count, spent

    def fraction(self) -> float:
        return min(max(self._fractions()), 1.0)

    def text(self) -> str:
        from .engine.result import rerun_text
        now = time.monotonic()
        el, since = now - self.start, now - self.began
        rate = self.examples / el if el > 0 else 0.0
        frac = self.fraction()
        count, spent = self._fractions()
        left = (self.budget or 0.0) - since if spent >= count else (el / count - el if count else 0.0)
        eta = f", ETA {max(0.0, left):.0f} s" if 0 < frac < 1 else ""
        shrinking = self.examples - self.generated
        # both shares, always, in one shape: the line once switched from the count's to the budget's mid-run
        done = f"{100 * min(count, 1.0):.0f}%" + (f", {100 * min(spent, 1.0):.0f}% of the {self.budget:g} s budget"
                                                  if self.budget else "")
        return (f"{self.generated}/{self.max_examples} generated ({done})"
                f"{f' + {rerun_text(shrinking, self.shrink)}' if shrinking else ''}, {self.findings} "
                f"finding{'s' * (self.findings != 1)}, {rate:.1f} cases/s, {since:.0f} s{eta}")


class _Plain:
    """Heartbeat lines (a log, CI), or one line rewritten in place on a terminal without rich."""

    def __init__(self, stream, tty: bool, label: str):
        self.stream, self.tty, self.label, self._last = stream, tty, label, 0.0

    def show(self, line: str, frac: float) -> None:
        line = self.label + line
        if self.tty:
            self.stream.write("\r\033[K" + line)
            self.stream.flush()
        elif time.monotonic() - self._last >= HEARTBEAT_S:
            self._last = time.monotonic()
            self.stream.write(line + "\n")
            self.stream.flush()

    def say(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(text)
        self.stream.flush()

    def stop(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()


class _Rich:
    """A rich live bar; messages print above it."""

    def __init__(self, stream, label: str):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn
        self.console = Console(file=stream, force_terminal=True, highlight=False)
        self.bar = Progress(SpinnerColumn(), TextColumn(label.rstrip(": ") or "fuzz", markup=False),
                            BarColumn(bar_width=24), TextColumn("{task.fields[line]}", markup=False),
                            console=self.console, transient=True)
        self.task = self.bar.add_task("", total=1.0, line="starting")
        self.bar.start()

    def show(self, line: str, frac: float) -> None:
        self.bar.update(self.task, completed=frac, line=line)

    def say(self, text: str) -> None:
        self.console.print(text, end="", markup=False, soft_wrap=True)

    def stop(self) -> None:
        self.bar.stop()


def _view(stream, label: str, tty: bool) -> Any:
    if tty:
        try:
            return _Rich(stream, label)
        except ImportError:
            pass
    return _Plain(stream, tty, label)


class Progress:
    def __init__(self, stream, settings, *, label: str = "", quiet: bool = False, verbose: bool = False):
        self.stream, self.label, self.quiet, self.verbose = stream, label, quiet, verbose
        self.numbers = _Numbers(settings)
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.view = None if quiet else _view(stream, label, self.tty)

    def __call__(self, event: events.Event) -> None:
        """A campaign event (``engine/events.py``), by its class."""
        handlers = {events.ProgressEvent: self._progress, events.WarningEvent: self._warning,
                    events.FindingEvent: self._say, events.RegressionEvent: self._say}
        events.dispatch(handlers, event, default=lambda e: None)  # an event it does not show

    def _progress(self, event: events.ProgressEvent) -> None:
        self.numbers.update(event)
        if self.view is not None:
            self.view.show(self.numbers.text(), self.numbers.fraction())

    def _say(self, event: events.Event) -> None:
        if self.view is not None:
            self.view.say(self._message(event))

    def _warning(self, event: events.WarningEvent) -> None:
        if self.view is not None:
            self.view.say(self._message(event))
        else:  # quiet: warnings still, on their own line; the summary lists findings
            self.stream.write(self._message(event))
            self.stream.flush()

    def _message(self, event: events.Event) -> str:
        return _MESSAGES[type(event)](event, self.verbose)

    def text(self) -> str:
        return f"{self.label}{self.numbers.text()}"

    def done(self, result) -> None:
        if self.view is None:
            return
        self.view.stop()
        if result is not None:
            from .engine.result import stop_text
            n = len(result.replayed) + result.examples  # as the summary counts: replayed, generated, shrinking
            set_up = (getattr(result, "stage_s", None) or {}).get("set-up")
            self.stream.write(f"{self.label}stopped: {stop_text(result.stop_reason)} after {n} "
                              f"case{'s' * (n != 1)} in {result.duration_s:.1f} s of campaign"
                              f"{f' (+ {set_up:.1f} s set-up)' if set_up else ''}\n")
        self.stream.flush()


def _found(event: events.FindingEvent, verbose: bool) -> str:
    from .finding import case_text
    from .sighting import found_text
    f = event.finding
    how = found_text(f.found_by, f.first_found_after_examples).removeprefix("found ")  # "from scratch after 3 ..."
    text = f"  found: {f.signature.short()}{' ' if how.startswith(('from', 'after')) else ', '}{how} " \
           f"({f.found_after_s:.1f} s)\n"
    if verbose:
        text += "".join(f"    {line}\n" for line in case_text(f.case).splitlines())
    return text


_MESSAGES: dict[type, Callable[[Any, bool], str]] = {
    events.FindingEvent: _found,
    events.RegressionEvent: lambda e, verbose: f"  still failing from the corpus: {e.finding.signature.short()}\n",
    events.WarningEvent: lambda e, verbose: f"  warning: {e.message}\n",
}
