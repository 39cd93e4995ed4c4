"""``fuzzrunner check-target``: whether and where a target can be tested, and what to fix (issue 22)."""

import os
import signal

import pytest

from fuzzrunner import check_target
from fuzzrunner.cli import main

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))


def test_a_target_that_honours_ctx_device_can_be_prechecked_and_names_its_tracked_buffers(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the CPU run is checked here, on any machine
    code = main(["check-target", os.path.join(ROOT, "examples", "toy_runner_target.py") + ":TARGET"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "cpu   ran the case" in out and "CPU pre-check and CPU triage of a GPU campaign: can run" in out
    assert "per step (stale reads seen): slot_of_token" in out and "registered: adapter_table" in out
    assert "verdict      ok" in out and "torch.empty tracked automatically (never-written reads only): torch.empty@" in out


def test_a_target_that_builds_on_cuda_itself_is_told_to_honour_ctx_device(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a machine without a GPU (on one, it says "GPU campaigns only")
    code = main(["check-target", os.path.join(HERE, "gpu_only_target.py") + ":TARGET"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "cpu   could not run the case: a device error" in out
    assert "CPU pre-check and CPU triage of a GPU campaign: cannot run" in out
    assert "fix          build every tensor of the runner on ctx.device" in out
    assert "verdict      cannot test here: the target runs on neither device of this machine (no GPU here)" in out


def test_an_unknown_target_is_one_line_and_exit_2(capsys):
    assert main(["check-target", "no_such_target"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# -- issue 47: what the one case did decides the advice; a timeout, progress; nothing left running -----------

def _hardening(name: str) -> str:
    return os.path.join(HERE, "hardening_targets.py") + ":" + name


@pytest.mark.parametrize("target,says,fix", [
    ("INTERRUPTS", "cpu   could not run the case: the target raised KeyboardInterrupt itself at hardening_targets.py:",
     "fuzzrunner takes it as a crash of the case, never as a stop"),
    ("RAISES", "cpu   could not run the case: the target's run raised ValueError at hardening_targets.py:",
     "fix the target's run: it raised ValueError"),
    ("SEGFAULTS", "cpu   could not run the case: the case crashed the process (SIGSEGV) in op 0 (x) at "
                  "hardening_targets.py:", "a crash of the code under test"),
    ("EXITS", "cpu   could not run the case: the case crashed the process (exit status 3) in op 0 (x)",
     "a crash of the code under test"),
])
def test_a_first_case_that_crashes_or_raises_is_said_as_such_not_as_a_device_problem(capsys, target, says, fix):
    code = main(["check-target", _hardening(target)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert says in out and fix in out, out
    assert "ctx.device" not in out, out


def test_a_hang_is_stopped_at_the_timeout_with_progress_meanwhile(capsys, monkeypatch, no_hang):
    monkeypatch.setattr(check_target, "PROGRESS_S", 0.5)
    with no_hang(120):
        code = main(["check-target", _hardening("SLEEPY"), "--timeout", "2"])
    captured = capsys.readouterr()
    assert code == 1
    assert "cpu   could not run the case: the case did not finish within 2 s in op 0 (x); it was stopped" in captured.out
    assert "the case hangs in op 0 (x)" in captured.out and "--timeout SECONDS" in captured.out
    assert "verdict      cannot tell: the case hung" in captured.out and "ctx.device" not in captured.out
    assert "check-target: cpu: running the case in a child process (timeout 2 s)" in captured.err
    assert "check-target: cpu: still running the case after" in captured.err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_timeout_that_is_not_a_positive_number_is_one_line(capsys, value):
    assert main(["check-target", _hardening("SLEEPY"), "--timeout", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be a positive number of seconds" in err


def test_a_process_the_case_forks_is_ended_and_not_waited_for(tmp_path, capsys, monkeypatch, no_hang):
    """The child's forked process held its output pipe: check-target waited 300 s, then left it running."""
    pids = tmp_path / "pids"
    monkeypatch.setenv("HOSTILE_PID_FILE", str(pids))
    monkeypatch.setenv("HOSTILE_FORK", "popen")
    with no_hang(120):
        code = main(["check-target", os.path.join(HERE, "hostile_targets.py") + ":FORKER", "--timeout", "60"])
    assert code == 1 and "cpu   ran the case" in capsys.readouterr().out
    [pid] = [int(p) for p in pids.read_text().split()]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    os.kill(pid, signal.SIGKILL)
    pytest.fail(f"the case's child {pid} was left running")
