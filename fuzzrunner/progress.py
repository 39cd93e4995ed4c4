"""Campaign progress for a person: a live line on a terminal, plain heartbeat lines otherwise.

Fed with the campaign's events (``progress``, ``finding``, ``regression``, ``warning``).
"""

from __future__ import annotations

import time

HEARTBEAT_S = 10.0


class Progress:
    def __init__(self, stream, settings, *, label: str = "", quiet: bool = False, verbose: bool = False):
        self.stream, self.label, self.quiet, self.verbose = stream, label, quiet, verbose
        self.max_examples, self.budget = settings.max_examples, settings.budget_s
        self.tty = stream.isatty()
        self.start = time.monotonic()
        self._last_plain = 0.0
        self.examples = self.generated = self.findings = 0

    def __call__(self, event: dict) -> None:
        kind = event["type"]
        if kind == "progress":
            self.examples, self.findings = event["examples"], event["findings"]
            self.generated = event.get("generated", self.examples)
            if not self.quiet:
                self._line()
            return
        self._clear()
        if kind == "finding":
            from .finding import case_text
            f = event["finding"]
            self.stream.write(f"  found: {f.signature.short()} after {f.first_found_after_examples} "
                              f"examples ({f.found_after_s:.1f} s)\n")
            if self.verbose:
                self.stream.write("".join(f"    {line}\n" for line in case_text(f.case).splitlines()))
        elif kind == "regression":
            self.stream.write(f"  still failing from the corpus: {event['finding'].signature.short()}\n")
        elif kind == "warning":
            self.stream.write(f"  warning: {event['message']}\n")
        self.stream.flush()

    def text(self) -> str:
        el = time.monotonic() - self.start
        rate = self.examples / el if el > 0 else 0.0
        frac = self.generated / self.max_examples if self.max_examples else 0.0
        if self.budget:
            frac = max(frac, el / self.budget)
        eta = f", ETA {max(0.0, el / frac - el):.0f} s" if 0 < frac < 1 else ""
        shrinking = self.examples - self.generated
        return (f"{self.label}{self.generated}/{self.max_examples} generated ({100 * min(frac, 1):.0f}%)"
                f"{f' + {shrinking} shrinking' if shrinking else ''}, {self.findings} "
                f"finding{'s' * (self.findings != 1)}, {rate:.1f} cases/s, {el:.0f} s{eta}")

    def _line(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self.text())
            self.stream.flush()
        elif time.monotonic() - self._last_plain >= HEARTBEAT_S:
            self._last_plain = time.monotonic()
            self.stream.write(self.text() + "\n")
            self.stream.flush()

    def _clear(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")

    def done(self, result) -> None:
        self._clear()
        if result is not None and not self.quiet:
            self.stream.write(f"{self.label}stopped: {result.stop_reason or 'unknown'} after {result.examples} "
                              f"cases in {result.duration_s:.1f} s\n")
        self.stream.flush()
