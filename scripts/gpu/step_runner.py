"""Run a list of steps, each a child process with its own time budget, and print one RESULT line per step.

A step is a command that ends by printing ``VERDICT PASS|FAIL|SKIP: why`` (the last such line counts); its
output goes to its own log. Steps of one *lane* run one after another, in the order given; lanes run at
once. A step marked ``alone`` waits until nothing else runs and nothing starts while it runs (a timing).
A step that outlives its budget (or the run's own deadline) is stopped, its whole process group, and is
a FAIL "timed out"; one whose ``needs`` did not pass is a SKIP; an ``optional`` step's SKIP (hardware this
machine lacks) does not fail the run. Each outcome prints exactly one line, as the step ends:

    RESULT <step>: PASS|FAIL|SKIP (<why, numbers>)

Standard library only: it runs on the GPU machine's image as it is.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

VERDICTS = ("PASS", "FAIL", "SKIP")
VERDICT_LINE = re.compile(r"^VERDICT (PASS|FAIL|SKIP): ?(.*)$")
GRACE_S = 5.0  # between SIGTERM (a campaign writes its partial report) and SIGKILL


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    budget_s: float
    lane: str = "gpu"
    alone: bool = False                      # nothing else runs meanwhile (the step times something)
    needs: tuple[str, ...] = ()              # steps that must have passed first (else: SKIP)
    after: tuple[str, ...] = ()              # steps that must have ended first, whatever their verdict
    optional: bool = False                   # its SKIP does not fail the run
    env: Mapping[str, str] = field(default_factory=dict)
    what: str = ""                           # one line for the plan
    typical_s: float | None = None           # what it usually takes (the plan's estimate; else its budget)


@dataclass
class Outcome:
    step: str
    verdict: str
    why: str
    started: float = 0.0                     # monotonic; 0 for a step never started
    ended: float = 0.0
    log: str = ""

    @property
    def seconds(self) -> float:
        return max(0.0, self.ended - self.started) if self.started else 0.0

    def line(self) -> str:
        return f"RESULT {self.step}: {self.verdict} ({self.why})"


def verdict_of(text: str, returncode: int) -> tuple[str, str]:
    """The step's own verdict (its last ``VERDICT`` line), or FAIL when it gave none."""
    found = None
    for line in text.splitlines():
        m = VERDICT_LINE.match(line.strip())
        if m:
            found = (m.group(1), m.group(2).strip())
    if found is None:
        return "FAIL", f"exit {returncode} without a VERDICT line"
    return found


@dataclass
class _Running:
    step: Step
    proc: subprocess.Popen
    log: object
    started: float
    kill_at: float
    limit_s: float
    term_sent: float = 0.0


class Runner:
    """Runs ``steps`` (in their order, by lane); ``deadline_s``: the whole run's limit (a device call's)."""

    def __init__(self, steps: list[Step], log_dir: str, *, deadline_s: float | None = None,
                 say: Callable[[str], None] | None = None, poll_s: float = 0.1):
        names = [s.name for s in steps]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"step names must be unique: {', '.join(dup)} appear(s) twice")
        self.steps, self.log_dir, self.poll_s = list(steps), log_dir, poll_s
        self.say = say or (lambda line: print(line, flush=True))
        self.start = time.monotonic()
        self.end = self.start + deadline_s if deadline_s is not None else float("inf")
        self.outcomes: dict[str, Outcome] = {}
        self.running: dict[str, _Running] = {}

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> list[Outcome]:
        os.makedirs(self.log_dir, exist_ok=True)
        try:
            while len(self.outcomes) < len(self.steps):
                self._reap()
                self._start_what_can()
                if len(self.outcomes) < len(self.steps):
                    time.sleep(self.poll_s)
        finally:
            for r in list(self.running.values()):  # interrupted: nothing outlives the run
                self._kill(r)
        return [self.outcomes[s.name] for s in self.steps]

    def _pending(self) -> list[Step]:
        return [s for s in self.steps if s.name not in self.outcomes and s.name not in self.running]

    def _start_what_can(self) -> None:
        if any(r.step.alone for r in self.running.values()):
            return
        busy = {r.step.lane for r in self.running.values()}
        seen_lanes: set[str] = set()
        for step in self._pending():
            if step.lane in seen_lanes:  # only the first waiting step of each lane may start
                continue
            seen_lanes.add(step.lane)
            if step.lane in busy:
                if step.alone:
                    return  # nothing declared after an alone step starts before it
                continue
            ready = self._needs_ready(step)
            if ready is None:
                continue  # a needed step is still to come
            if ready:
                self._finish_unstarted(step, "SKIP", ready)
                continue
            if step.alone:
                if not self.running:
                    self._launch(step)
                return  # an alone step starts first, or waits with everything after it
            self._launch(step)
            busy.add(step.lane)

    def _needs_ready(self, step: Step) -> str | None:
        """'' when every needed step passed, a reason to skip when one did not, None while one is to come."""
        here = {s.name for s in self.steps}
        if any(a in here and a not in self.outcomes for a in step.after):
            return None
        for need in step.needs:
            o = self.outcomes.get(need)
            if o is None:
                return None if need in here else f"needs {need}, which is not in this run"
            if o.verdict != "PASS":
                return f"needs {need}, which did not pass ({o.verdict})"
        return ""

    def _launch(self, step: Step) -> None:
        now = time.monotonic()
        left = self.end - now
        if left <= 0:
            self._finish_unstarted(step, "FAIL", "not started: the run's own time limit was spent")
            return
        limit = min(step.budget_s, left)
        path = os.path.join(self.log_dir, f"{step.name}.log")
        log = open(path, "w")
        log.write(f"$ {' '.join(step.argv)}\n")
        log.flush()
        proc = subprocess.Popen(list(step.argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **step.env}, start_new_session=True)
        self.running[step.name] = _Running(step, proc, log, now, now + limit, limit)
        self.say(f"-- {step.name}: started ({step.lane} lane, budget {limit:.0f} s{', alone' if step.alone else ''})")

    def _reap(self) -> None:
        now = time.monotonic()
        for r in list(self.running.values()):
            if r.proc.poll() is not None:
                self._finish(r, *verdict_of(self._read(r), r.proc.returncode))
            elif now >= r.kill_at and not r.term_sent:
                self._signal(r, signal.SIGTERM)
                r.term_sent = now
            elif r.term_sent and now >= r.term_sent + GRACE_S:
                self._kill(r)
                self._finish(r, "FAIL", f"timed out after {r.limit_s:.0f} s (stopped)")

    def _finish(self, r: _Running, verdict: str, why: str) -> None:
        if r.term_sent and "timed out" not in why:
            verdict, why = "FAIL", f"timed out after {r.limit_s:.0f} s (stopped; it said: {verdict} {why})"
        r.log.close()
        del self.running[r.step.name]
        o = Outcome(r.step.name, verdict, why, r.started, time.monotonic(), r.log.name)
        self._record(o)

    def _finish_unstarted(self, step: Step, verdict: str, why: str) -> None:
        self._record(Outcome(step.name, verdict, why))

    def _record(self, o: Outcome) -> None:
        self.outcomes[o.step] = o
        took = f", {o.seconds:.0f} s" if o.started else ""
        o.why = f"{o.why}{took}" if o.why else took.lstrip(", ")
        self.say(o.line())

    @staticmethod
    def _read(r: _Running) -> str:
        r.log.flush()
        try:
            with open(r.log.name, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    @staticmethod
    def _signal(r: _Running, sig: int) -> None:
        try:
            os.killpg(r.proc.pid, sig)  # the step's whole process group (it started a session of its own)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill(self, r: _Running) -> None:
        self._signal(r, signal.SIGKILL)
        try:
            r.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def exit_code(steps: list[Step], outcomes: list[Outcome]) -> int:
    """0 only if every step passed (an optional step may have skipped)."""
    optional = {s.name for s in steps if s.optional}
    ok = all(o.verdict == "PASS" or (o.verdict == "SKIP" and o.step in optional) for o in outcomes)
    return 0 if ok and len(outcomes) == len(steps) else 1


def plan_lines(steps: list[Step], deadline_s: float | None = None) -> list[str]:
    """The plan, one line per step, and the longest the run can take (every step at its full budget)."""
    lines = []
    for i, s in enumerate(steps, 1):
        flags = ", ".join(x for x in (s.lane + " lane", "alone" if s.alone else "", "optional" if s.optional else "",
                                      f"needs {'+'.join(s.needs)}" if s.needs else "",
                                      f"after {'+'.join(s.after)}" if s.after else "") if x)
        usual = f" (usually ~{s.typical_s:.0f} s)" if s.typical_s is not None else ""
        lines.append(f"{i:2}. {s.name:<18} budget {s.budget_s:4.0f} s{usual}  [{flags}]  {s.what}")
        lines.append(f"      $ {' '.join(s.argv)}")
    limit = f"; no step runs past {deadline_s:.0f} s" if deadline_s is not None else ""
    lines.append(f"expected {worst_case_s(steps, typical=True):.0f} s (each step as it usually takes); at most "
                 f"{worst_case_s(steps):.0f} s (each at its full budget){limit}")
    return lines


def worst_case_s(steps: list[Step], typical: bool = False) -> float:
    """How long the run takes if every step uses its whole budget (``typical``: what it usually takes),
    scheduled as ``Runner`` does."""
    lane_free: dict[str, float] = {}
    ends: dict[str, float] = {}
    barrier = 0.0  # nothing declared after an alone step starts before it ended
    for s in steps:
        start = max([lane_free.get(s.lane, 0.0), barrier, *(ends.get(n, 0.0) for n in (*s.needs, *s.after))])
        if s.alone:
            start = max([start, *ends.values()])
        took = s.typical_s if typical and s.typical_s is not None else s.budget_s
        ends[s.name] = lane_free[s.lane] = start + took
        if s.alone:
            barrier = ends[s.name]
    return max(ends.values(), default=0.0)


def main_for(steps: list[Step], log_dir: str, deadline_s: float | None) -> int:
    """Run the steps, print their RESULT lines and a last line; the exit code (``exit_code``)."""
    runner = Runner(steps, log_dir, deadline_s=deadline_s)
    outcomes = runner.run()
    code = exit_code(steps, outcomes)
    counts = {v: sum(1 for o in outcomes if o.verdict == v) for v in VERDICTS}
    print(f"ACCEPTANCE: {'PASS' if code == 0 else 'FAIL'} ({counts['PASS']} passed, {counts['FAIL']} failed, "
          f"{counts['SKIP']} skipped; {time.monotonic() - runner.start:.0f} s)", flush=True)
    return code


if __name__ == "__main__":  # a smoke run: python step_runner.py (two steps, one lane each)
    py = sys.executable
    demo = [Step("ok", (py, "-c", "print('VERDICT PASS: fine')"), 10, lane="a"),
            Step("slow", (py, "-c", "import time; time.sleep(60)"), 1, lane="b")]
    sys.exit(main_for(demo, "/tmp/step_runner_demo", None))
