"""``fuzzrunner check-target``: whether and where a target can be tested, and what to fix (issue 22)."""

import os

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
