"""What the command line prints, and the exit codes it maps results and verdicts to."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from ..text import plural

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


class _SafeStream:
    """stdout or stderr that never ends a command. Once its reader has gone (``fuzzrunner replay ... |
    head``) later writes are dropped and the command runs to its end (reports written, exit code
    kept) instead of dying with "internal error: BrokenPipeError"; the descriptor is pointed at
    /dev/null, so the interpreter's last flush does not raise either (Python's documented recipe).
    A path with undecodable bytes (a non-UTF-8 folder) that the stream cannot encode is written
    with backslash escapes instead of raising UnicodeEncodeError."""

    def __init__(self, stream):
        self.stream, self.gone = stream, False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                try:
                    return self.stream.write(text)
                except UnicodeEncodeError:
                    encoding = getattr(self.stream, "encoding", None) or "utf-8"
                    return self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self.gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no real descriptor (a test's capture): just drop
            pass

    def __getattr__(self, name):
        return getattr(self.stream, name)


MAX_ECHO = 200  # characters of one user value (a path, a fault name) quoted back in a message


def clip(message: str, limit: int = MAX_ECHO) -> str:
    """``message`` with each run of more than ``limit`` non-blank characters cut in its middle, and
    the whole kept under a few lines' length: a 100 KB ``--fault`` name is not echoed in full."""

    def cut(m) -> str:
        word = m.group(0)
        return f"{word[:limit // 2]}...[{len(word) - limit * 3 // 4} characters]...{word[-(limit // 4):]}"
    message = re.sub(rf"\S{{{limit + 1},}}", cut, message)
    if len(message) > 8 * limit:
        message = f"{message[:6 * limit]} ...[{len(message) - 7 * limit} characters]... {message[-limit:]}"
    return message


def _error(message: str) -> None:
    """The one-line error of every command, with long user values cut (``clip``)."""
    print(f"fuzzrunner: error: {clip(message)}", file=sys.stderr)


def _unlabelled_text(findings) -> str:
    """How many findings no known bug names, beside the known bugs' count: "all known" or "2 new or untriaged". Before,
    "11 findings (9 known bugs: ...)" left it to the reader whether the other two were new (new-user trial: all 11
    were known, two bugs had two findings each)."""
    unlabelled = sum(not isinstance((f.triage or {}).get("known"), dict) for f in findings)
    return "all known" if not unlabelled else f"{unlabelled} new or untriaged"


def _summary(result, out) -> None:
    from ..engine.result import stop_text
    from ..finding import render
    from ..report.json_report import cluster_text, skip_lines
    from ..sighting import known_bugs_text
    n = len(result.findings)
    known = known_bugs_text(result.findings)
    labels = f", {_unlabelled_text(result.findings)} ({known})" if known else ""
    out.write(f"{result.target}: {_cases_text(result)} in {campaign_time(result)} (seed {result.seed}), "
              f"stopped: {stop_text(result.stop_reason)}; {n} finding{'s' * (n != 1)}{labels}\n")
    if getattr(result, "cluster", None):
        out.write(f"  {cluster_text(result.cluster)}\n")
    if getattr(result, "code_under_test", None):
        from ..target import describe_code
        out.write(f"  code under test: {describe_code(result.code_under_test)}\n")
    for line in getattr(result, "target_details", None) or ():  # what of it the target drives on this release
        out.write(f"    {line}\n")
    causes = [{"id": i, **c} for i, c in result.known_crash_causes.items()]
    for line in skip_lines(result.known_crash_skips, causes, result.generated):
        out.write(f"  {line}\n")
    for c in result.tool_limitations.values():
        out.write(f"  tool limitation ({c['count']} case(s)): {c['message']}\n")
    if getattr(result, "worker_recycles", 0):
        out.write(f"  {result.worker_recycles} worker recycle(s): a worker's memory grew past the limit "
                  f"(--max-worker-rss); not crashes, not findings\n")
    for f in result.findings:
        out.write("\n  " + render(f, indent="    ") + "\n")
    for f in result.flaky:
        out.write(f"\n  flaky (kept apart): {f.signature.short()}\n")
    _coverage_line(result, out)
    for w in result.warnings:
        out.write(f"  warning: {w}\n")
    for e in result.errors:
        out.write(f"  ERROR: {e}\n")


def campaign_time(result) -> str:
    """'41.6 s of campaign (+ 10.9 s set-up)': the summary's time, labelled as ``--stage-times``' wall line splits it
    (the set-up, from the command's start to the shards', is not in ``duration_s``)."""
    set_up = (getattr(result, "stage_s", None) or {}).get("set-up")
    return f"{result.duration_s:.1f} s of campaign" + (f" (+ {set_up:.1f} s set-up)" if set_up else "")


def _cases_text(result) -> str:
    """'105 cases: 5 replayed, 100 generated (0 invalid), 0 shrinking' ('1 re-run' under ``--no-shrink``): every
    number the run prints (coverage's valid cases = replayed + generated - invalid; "found after N examples" counts
    them all)."""
    from ..engine.result import rerun_text
    replayed, shrinking = len(result.replayed), max(0, result.examples - result.generated)
    shrink = getattr(getattr(result, "settings", None), "shrink", True)
    return (f"{plural(replayed + result.examples, 'case')}: {replayed} replayed (corpus and seeds), {result.generated} "
            f"generated ({result.invalid} invalid), {rerun_text(shrinking, shrink)}")


def _coverage_line(result, out) -> None:
    """'N declared features never reached': a clean pass says nothing about states never reached."""
    from ..coverage import shown_lines, summary_line
    coverage = getattr(result, "coverage", None)
    if coverage is not None and (coverage.declared or coverage.features):
        out.write(f"  {summary_line(coverage.to_dict())}\n")
        for line in shown_lines(coverage.to_dict()):  # what the target says a user must see ran (sglang_engine: path)
            out.write(f"  {line}\n")


def _say_replay(path, replay, finding) -> None:
    """The verdict's line(s): on stdout what was seen, on stderr why nothing could be concluded. Under a violation
    whose root cause the target names a known bug, the label a campaign's summary gives its finding
    (``known: P1: ...``)."""
    from ..engine.replay import Verdict
    from ..finding import group, known_text

    def known(v, indent: str) -> None:
        label = replay.known_label(v)
        if label is not None:
            print(f"{indent}{known_text(label)}")
    verdict, violations = replay.verdict, replay.violations
    if verdict is Verdict.LIMITED:
        print(f"fuzzrunner: error: could not run {path}: a tool limitation (above)", file=sys.stderr)
    elif verdict is Verdict.CANNOT_CHECK:
        _error(f"could not check {path}: not reproduced, but {replay.unchecked}")
    elif verdict in (Verdict.REPRODUCED, Verdict.MOVED):
        where = replay.same[0].site or replay.same[0].location  # a moved bug's "same" is its access elsewhere
        note = f" (its access is now in {where}: a renamed or moved function or file)" \
            if verdict is Verdict.MOVED else ""
        print(f"{path}: REPRODUCED {finding.signature.short()}{note}\n    {replay.same[0].message}")
        known(replay.same[0], "    ")
    elif verdict is Verdict.GONE:
        print(f"{path}: NOT REPRODUCED ({finding.signature.short()})" if finding is not None else f"{path}: ok")
    else:  # OTHERS
        print(f"{path}: the original violation is gone, but others appear:" if finding is not None
              else f"{path}: {len(violations)} violation{'s' * (len(violations) != 1)}")
        heads = {id(head) for head, _ in group(violations)}  # one label per root cause, under its head
        for v in violations:
            print(f"    {v.signature.short()}: {v.message}")
            if id(v) in heads:
                known(v, "      ")


def _said_written(path: Path) -> None:
    """``wrote X: run it with ...``; for a script written to a stream (``-o /dev/stdout``, a FIFO), on
    stderr without the hint: the stream holds the script alone."""
    from ..safe_write import streamed
    if streamed(path):
        print(f"wrote the repro script to {path}", file=sys.stderr)
    else:
        print(f"wrote {path}: run it with `python {path}` (exit 1 reproduced, 0 not, 2 could not run)")


def _nightly_line(results: list, skipped: dict, errors: list, code: int) -> str:
    """The nightly's last line: every target at once, and what the exit code says."""
    ran = ", ".join(f"{r.target} {plural(len(r.replayed) + r.examples, 'case')} {plural(len(r.findings), 'finding')}"
                    for r in results) or "no target ran"
    notes = [f"{len(skipped)} skipped" if skipped else "", f"{len(errors)} failed" if errors else ""]
    meaning = {0: "no finding", 1: "findings", EXIT_INTERRUPTED: "interrupted"}.get(code, "error")
    return f"nightly: {ran}{''.join(f'; {n}' for n in notes if n)}: exit {code} ({meaning})"


def _print_trend(report: dict) -> None:
    from ..report.trend import trend_text
    for run in report["runs"]:
        sys.stdout.write(trend_text(run, report.get("previous")))


def _exit_code(results) -> int:
    from ..engine.result import StopReason
    if any(r.stop_reason is StopReason.INTERRUPTED for r in results):
        return EXIT_INTERRUPTED
    if any(r.errors for r in results):
        return EXIT_ERROR
    return EXIT_FINDINGS if any(r.findings for r in results) else EXIT_OK


def _replay_exits() -> dict:
    from ..engine.replay import Verdict
    return {Verdict.REPRODUCED: EXIT_FINDINGS, Verdict.MOVED: EXIT_FINDINGS, Verdict.OTHERS: EXIT_FINDINGS,
            Verdict.GONE: EXIT_OK, Verdict.CANNOT_CHECK: EXIT_ERROR, Verdict.LIMITED: EXIT_ERROR}
