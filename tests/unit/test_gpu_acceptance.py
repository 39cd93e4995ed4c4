"""The GPU acceptance run's CPU side (scripts/gpu_acceptance.py, scripts/gpu/step_runner.py): budgets, RESULT
lines, lanes running at once, an alone step, a step that hangs stopped with its children, the plan. The steps
themselves need a GPU; here they are small Python commands. No timed assertions: order and overlap are read
from each outcome's start and end."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

import acceptance_steps  # noqa: E402
import acceptance_tools  # noqa: E402
import step_runner as sr  # noqa: E402

PY = sys.executable


def say(text: str) -> str:
    return f"print({text!r})"


def step(name, code, budget=60.0, **kw) -> sr.Step:
    return sr.Step(name, (PY, "-c", code), budget, **kw)


def run(steps, tmp_path, **kw):
    lines: list[str] = []
    outcomes = sr.Runner(steps, str(tmp_path / "logs"), say=lines.append, poll_s=0.02, **kw).run()
    return outcomes, [ln for ln in lines if ln.startswith("RESULT ")]


def test_each_step_prints_exactly_one_result_line_with_its_own_verdict(tmp_path):
    steps = [step("good", say("VERDICT PASS: 3 of 3 found")),
             step("bad", say("VERDICT FAIL: exit 0, expected 1") + "; import sys; sys.exit(1)"),
             step("absent", say("VERDICT SKIP: no archive")),
             step("silent", "import sys; sys.exit(3)"),
             step("changed-its-mind", say("VERDICT FAIL: first") + "; " + say("VERDICT PASS: then fine"))]
    outcomes, results = run(steps, tmp_path)
    assert [(o.step, o.verdict) for o in outcomes] == [("good", "PASS"), ("bad", "FAIL"), ("absent", "SKIP"),
                                                       ("silent", "FAIL"), ("changed-its-mind", "PASS")]
    assert len(results) == len(steps) and sorted(results) == sorted(o.line() for o in outcomes)
    assert results.count([r for r in results if r.startswith("RESULT good:")][0]) == 1
    assert any(r.startswith("RESULT good: PASS (3 of 3 found") for r in results)
    assert any(r.startswith("RESULT silent: FAIL (exit 3 without a VERDICT line") for r in results)
    assert "VERDICT PASS: 3 of 3 found" in Path(outcomes[0].log).read_text()  # its output is in its log


def test_a_step_that_hangs_is_stopped_at_its_budget_with_its_children(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    code = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
            f" open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(600)")
    # (10 s: time for a busy machine to start the step and its child before the budget stops them)
    outcomes, results = run([step("hangs", code, budget=10), step("next", say("VERDICT PASS: ran"))], tmp_path)
    hung, nxt = outcomes
    assert hung.verdict == "FAIL" and hung.why.startswith("timed out after 10 s")
    assert results[0].startswith("RESULT hangs: FAIL (timed out after 10 s")
    grandchild = int(pid_file.read_text())
    assert not _alive(grandchild), "the step's own child outlived it"
    assert nxt.verdict == "PASS" and nxt.started >= hung.ended  # the lane went on after it


def test_a_step_that_ignores_sigterm_is_killed_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(sr, "GRACE_S", 0.5)
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
    outcomes, _ = run([step("stubborn", code, budget=5)], tmp_path)
    assert outcomes[0].verdict == "FAIL" and "timed out" in outcomes[0].why


def test_steps_of_two_lanes_run_at_once_and_of_one_lane_in_order(tmp_path):
    # each of a and b waits for the other's file: only at once can both pass (in sequence: a times out)
    a_file, b_file = tmp_path / "a", tmp_path / "b"
    meet = ("import pathlib, time; pathlib.Path({mine!r}).touch(); t = time.time()\n"
            "while not pathlib.Path({theirs!r}).exists() and time.time() - t < 30: time.sleep(0.02)\n"
            "print('VERDICT ' + ('PASS: met' if pathlib.Path({theirs!r}).exists() else 'FAIL: alone'))")
    steps = [step("a", meet.format(mine=str(a_file), theirs=str(b_file)), lane="gpu"),
             step("b", meet.format(mine=str(b_file), theirs=str(a_file)), lane="cpu"),
             step("a2", say("VERDICT PASS: after a"), lane="gpu")]
    outcomes, _ = run(steps, tmp_path)
    a, b, a2 = outcomes
    assert a.verdict == b.verdict == "PASS", (a.why, b.why)
    assert a2.started >= a.ended  # one lane: one after another, in the order given


def test_an_alone_step_overlaps_nothing_and_holds_back_what_comes_after(tmp_path):
    slow = "import time; time.sleep(0.5); print('VERDICT PASS: ok')"
    steps = [step("gpu1", slow, lane="gpu"), step("cpu1", slow, lane="cpu"),
             step("timing", slow, lane="gpu", alone=True), step("cpu2", slow, lane="cpu")]
    outcomes, _ = run(steps, tmp_path)
    by = {o.step: o for o in outcomes}
    t = by["timing"]
    for other in ("gpu1", "cpu1", "cpu2"):
        o = by[other]
        assert o.ended <= t.started or o.started >= t.ended, f"{other} overlapped the alone step"
    assert by["cpu2"].started >= t.ended  # declared after it: not started before it


def test_needs_skip_after_a_failure_and_after_waits_for_any_verdict(tmp_path):
    steps = [step("tree", say("VERDICT FAIL: no archive")),
             step("campaign", say("VERDICT PASS: x"), needs=("tree",)),
             step("report", say("VERDICT PASS: wrote it"), lane="cpu", after=("tree",))]
    outcomes, results = run(steps, tmp_path)
    tree, campaign, report = outcomes
    assert campaign.verdict == "SKIP" and "needs tree, which did not pass (FAIL)" in campaign.why
    assert report.verdict == "PASS" and report.started >= tree.ended
    assert "RESULT campaign: SKIP (needs tree, which did not pass (FAIL))" in results


def test_the_runs_own_deadline_fails_what_it_cannot_start(tmp_path):
    outcomes, results = run([step("late", say("VERDICT PASS: x"))], tmp_path, deadline_s=0)
    assert outcomes[0].verdict == "FAIL" and "not started" in outcomes[0].why
    assert results == ["RESULT late: FAIL (not started: the run's own time limit was spent)"]


def test_exit_code_passes_only_when_every_step_passed_or_an_optional_one_skipped():
    steps = [sr.Step("a", ("x",), 1), sr.Step("multi", ("x",), 1, optional=True)]
    o = lambda name, v: sr.Outcome(name, v, "")  # noqa: E731
    assert sr.exit_code(steps, [o("a", "PASS"), o("multi", "SKIP")]) == 0
    assert sr.exit_code(steps, [o("a", "SKIP"), o("multi", "SKIP")]) == 1  # a needed archive missing: not a pass
    assert sr.exit_code(steps, [o("a", "PASS"), o("multi", "FAIL")]) == 1
    assert sr.exit_code(steps, [o("a", "PASS")]) == 1


def test_names_must_be_unique():
    with pytest.raises(ValueError, match="unique: a"):
        sr.Runner([sr.Step("a", ("x",), 1), sr.Step("a", ("y",), 1)], "/tmp")


def test_worst_case_follows_lanes_needs_and_alone_steps():
    steps = [sr.Step("g1", ("x",), 10), sr.Step("c1", ("x",), 30, lane="cpu"),
             sr.Step("g2", ("x",), 5, needs=("c1",)), sr.Step("t", ("x",), 7, alone=True),
             sr.Step("c2", ("x",), 1, lane="cpu")]
    assert sr.worst_case_s(steps) == 30 + 5 + 7 + 1


def test_the_acceptance_plan_dry_run_lists_each_part_and_every_step_has_a_body():
    from importlib import util
    spec = util.spec_from_file_location("gpu_acceptance", ROOT / "scripts" / "gpu_acceptance.py")
    ga = util.module_from_spec(spec)
    spec.loader.exec_module(ga)
    every = ga.plan("all")
    assert {s.name for s in every} == set(acceptance_steps.STEPS)
    # every step in one part, vllm-tree in both parts that need it (part 4: the real-engine campaigns)
    assert ga.plan("1") + ga.plan("2") + ga.plan("3") + ga.plan("4")[1:] == every
    assert ga.plan("4")[0].name == "vllm-tree" and all("vllm-tree" in s.needs for s in ga.plan("4")[1:])
    for part in ("1", "2", "3", "4"):  # each part, as it usually runs, fits one device call
        assert sr.worst_case_s(ga.plan(part), typical=True) <= ga.DEADLINE_S
    r = subprocess.run([PY, "scripts/gpu_acceptance.py", "--dry-run", "--part", "2"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for s in ga.plan("2"):
        assert f" {s.name} " in r.stdout
    assert "expected" in r.stdout.splitlines()[-1]
    bad = subprocess.run([PY, "scripts/gpu_acceptance.py", "--steps", "doctor,nope", "--dry-run"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "unknown step(s) nope" in bad.stderr


def test_pytest_counts_and_verdict_lines_are_read_from_real_shapes():
    out = "....\n= 1290 passed, 80 skipped, 2 failed, 1 error in 301.2s (0:05:01) =\n"
    assert acceptance_tools.pytest_counts(out) == {"passed": 1290, "skipped": 80, "failed": 2, "error": 1}
    assert sr.verdict_of("noise\nVERDICT SKIP: needs 2 GPUs\n", 0) == ("SKIP", "needs 2 GPUs")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead: its parent (the killed step) is gone, init reaps it
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
    return True


def test_report_checks_prints_a_line_per_job_in_order_and_fails_on_an_unexpected_or_broken_one(capsys):
    """The scripts/gpu checks' one shape (csgmv_check, sglang_engine_nan_check, sglang_engine_device_shadow)."""
    def broken():
        raise RuntimeError("no GPU")
    ok = [("first", lambda: (True, "silent", 0.5)), ("second", lambda: (True, "found", 1.0))]
    assert acceptance_tools.report_checks("X-CHECK", ok, width=6) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("RUN first  OK") and out[0].endswith("silent") and out[1].startswith("RUN second OK")
    assert out[2].startswith("X-CHECK: PASS (2/2 runs as expected")
    assert acceptance_tools.report_checks("X-CHECK", ok + [("third", lambda: (False, "silent", 0.1)),
                                                           ("fourth", broken)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "UNEXPECTED" in out[2] and "UNEXPECTED" in out[3] and "no result (RuntimeError: no GPU)" in out[3]
    assert out[4].startswith("X-CHECK: FAIL (2/4 runs as expected")
