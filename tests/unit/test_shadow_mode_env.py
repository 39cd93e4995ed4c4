"""``FUZZRUNNER_SHADOW`` picks the shadow oracle's mode; a value it does not know is refused by name
(a new user's typo once ran the other mode in silence)."""

import pytest

from fuzzrunner import fuzz, replay
from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.oracles.shadow import ShadowOracle, shadow_oracle
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle


@pytest.mark.parametrize("value, mode", [("device", GpuShadowOracle), ("cpu", ShadowOracle), (" cpu ", ShadowOracle)])
def test_a_named_mode_is_the_mode_given(monkeypatch, value, mode):
    monkeypatch.setenv("FUZZRUNNER_SHADOW", value)
    assert type(shadow_oracle()) is mode


def test_unset_on_the_cpu_is_the_cpu_oracle(monkeypatch):
    monkeypatch.delenv("FUZZRUNNER_SHADOW", raising=False)
    monkeypatch.setenv("FUZZRUNNER_DEVICE", "cpu")
    assert type(shadow_oracle()) is ShadowOracle


def test_an_unknown_mode_is_refused_in_one_line_before_anything_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "gpu")
    with pytest.raises(InvalidArgument, match=r"^FUZZRUNNER_SHADOW='gpu': expected one of device, cpu, or unset"):
        shadow_oracle()
    with pytest.raises(InvalidArgument, match="FUZZRUNNER_SHADOW='gpu'"):
        fuzz("reference_runner", max_examples=1, corpus=str(tmp_path / "c"))
    with pytest.raises(InvalidArgument, match="FUZZRUNNER_SHADOW='gpu'"):
        replay(Case("reference_runner", {"max_loras": 2}, []), oracles=["shadow"])
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("command", [["replay", "{case}"], ["check-target", "reference_runner"], ["doctor"]])
def test_every_command_refuses_an_unknown_mode_in_one_line(monkeypatch, tmp_path, capsys, command):
    """``replay`` once printed a worker's traceback for the typo, and ``check-target`` blamed the
    target; every command now gives ``fuzz``'s one line and exit 2."""
    from fuzzrunner import cli
    case = tmp_path / "case.json"
    case.write_text(Case("reference_runner", {"max_loras": 2}, []).to_json())
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "gpu")
    code = cli.main([part.format(case=case) for part in command])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "FUZZRUNNER_SHADOW='gpu': expected one of device, cpu" in err[0], err


@pytest.mark.parametrize("process_device", ["cpu", "cuda"])
def test_the_device_mode_checks_the_processs_device_even_where_a_gpu_is_present(monkeypatch, process_device):
    """``--device cpu`` with the device mode on a GPU machine: the oracle once took the GPU because one was
    present, and the case's CPU tensors went unchecked (a planted uninitialized read, no report)."""
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("FUZZRUNNER_DEVICE", process_device)
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    oracle = shadow_oracle()
    assert type(oracle) is GpuShadowOracle and oracle.device == torch.device(process_device, *(
        [0] if process_device == "cuda" else []))


@pytest.mark.parametrize("shadow, device, says", [
    ("", "cpu", "shadow       CPU mode (Triton's interpreter, torch dispatch)"),
    ("device", "cpu", "shadow       device mode on cpu, dispatch filter off (RuntimeError: no compiler): every torch "
                      "op goes through Python"),
    ("", "cuda", "shadow       device mode on cuda, dispatch filter off (RuntimeError: no compiler)"),
    ("cpu", "cuda", "shadow       CPU mode (Triton's interpreter, torch dispatch): on cuda it sees torch ops only"),
])
def test_doctor_says_which_shadow_mode_the_workers_run_and_the_filters_state(monkeypatch, shadow, device, says):
    """Once only on a GPU machine ("shadow on GPU"); a CPU machine forcing the device mode, which builds and
    uses the filter there too, was told nothing (a new user's try)."""
    from fuzzrunner import doctor
    from fuzzrunner.oracles.shadow.gpu import dispatch_filter
    monkeypatch.setenv("FUZZRUNNER_SHADOW", shadow)
    monkeypatch.setattr(dispatch_filter, "get", lambda: None)
    monkeypatch.setattr(dispatch_filter, "status", lambda: "off (RuntimeError: no compiler)")
    assert doctor.shadow_line(device).startswith(says)
