"""``FUZZRUNNER_SHADOW`` is the front ends' default for the shadow oracle's mode (``Settings.shadow``); a value
it does not know is refused by name (a new user's typo once ran the other mode in silence). Below the front
ends the mode is the run's context's (``Context.shadow``), never the environment's."""

import pytest

from fuzzrunner import _env, env_defaults, fuzz, replay
from fuzzrunner.case import Case
from fuzzrunner.context import Context
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.oracles.shadow import ShadowOracle, shadow_oracle
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
from fuzzrunner.settings import Settings


@pytest.mark.parametrize("value, mode", [("device", GpuShadowOracle), ("cpu", ShadowOracle), (" cpu ", ShadowOracle)])
def test_a_named_mode_is_the_mode_given(monkeypatch, value, mode):
    monkeypatch.setenv("FUZZRUNNER_SHADOW", value)
    settings = env_defaults.apply(Settings(device="cpu"))
    assert settings.shadow == value.strip()
    assert type(shadow_oracle(Context.resolve(settings))) is mode


def test_unset_on_the_cpu_is_the_cpu_oracle(monkeypatch):
    monkeypatch.delenv("FUZZRUNNER_SHADOW", raising=False)
    assert type(shadow_oracle(Context.resolve(env_defaults.apply(Settings(device="cpu"))))) is ShadowOracle


def test_below_the_front_ends_the_mode_is_the_contexts_whatever_the_environment_says(monkeypatch):
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    assert type(shadow_oracle(Context.of("cpu"))) is ShadowOracle
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "cpu")
    assert type(shadow_oracle(Context.of("cpu", shadow="device"))) is GpuShadowOracle


def test_an_unknown_mode_is_refused_in_one_line_before_anything_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "gpu")
    with pytest.raises(InvalidArgument, match=r"^FUZZRUNNER_SHADOW='gpu': expected one of device, cpu, or unset"):
        env_defaults.shadow()
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


@pytest.mark.parametrize("run_device", ["cpu", "cuda"])
def test_the_device_mode_checks_the_runs_device_even_where_a_gpu_is_present(monkeypatch, run_device):
    """``--device cpu`` with the device mode on a GPU machine: the oracle once took the GPU because one was
    present, and the case's CPU tensors went unchecked (a planted uninitialized read, no report)."""
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("FUZZRUNNER_DEVICE", "cuda" if run_device == "cpu" else "cpu")  # the process's: not the run's
    oracle = shadow_oracle(Context.of(run_device, shadow="device"))
    assert type(oracle) is GpuShadowOracle and oracle.device == torch.device(run_device, *(
        [0] if run_device == "cuda" else []))


@pytest.mark.skipif(not _env.interpreted(), reason="runs Triton's kernels in this process on CPU tensors: the "
                    "interpreter's (scripts/gpu/run_context.py checks it on a GPU, in a worker)")
def test_a_replay_in_this_process_checks_the_memory_of_the_device_it_was_asked_for(monkeypatch):
    """``fuzzrunner.replay(case, device="cpu")`` in the process of a GPU machine, with the device mode set: its
    oracle checked the GPU's memory (the process's device) while the case's tensors were on the CPU, and the
    planted uninitialized read went unreported."""
    import torch

    from fuzzrunner.oracles import shadow
    made = []
    real = shadow.shadow_oracle
    monkeypatch.setattr(shadow, "shadow_oracle", lambda context: made.append(real(context)) or made[-1])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("FUZZRUNNER_DEVICE", "cuda")   # this process's device, as on a GPU machine
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    case = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
                [{"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}], ["dummy_run_skips_mapping"])
    violations = replay(case, device="cpu", oracles=["shadow"])
    assert [o.device for o in made] == [torch.device("cpu")]
    assert any(v.kind == "uninitialized-read" for v in violations), violations


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
    monkeypatch.setattr(dispatch_filter, "get", lambda: None)
    monkeypatch.setattr(dispatch_filter, "status", lambda: "off (RuntimeError: no compiler)")
    assert doctor.shadow_line(Context.of(device, shadow=shadow or None)).startswith(says)


@pytest.mark.parametrize("before", [None, "cuda"])
def test_a_commands_device_flag_is_the_processs_for_the_command_only(monkeypatch, tmp_path, capsys, before):
    """``cli.main([..., "--device", "cpu"])`` in a test session left ``FUZZRUNNER_DEVICE=cpu`` and
    ``TRITON_INTERPRET=1`` behind: on the GPU machine every later test of that worker drew the CPU with compiled
    Triton (2026-12-07: 176 unit tests failed, "Pointer argument cannot be accessed from Triton (cpu tensor?)")."""
    import os

    from fuzzrunner import cli
    if before is None:
        monkeypatch.delenv("FUZZRUNNER_DEVICE", raising=False)
    else:
        monkeypatch.setenv("FUZZRUNNER_DEVICE", before)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    seen = {}

    def command(args):
        seen.update(device=os.environ.get("FUZZRUNNER_DEVICE"), interpret=os.environ.get("TRITON_INTERPRET"))
        return 0
    monkeypatch.setitem(cli.COMMANDS, "replay", command)
    assert cli.main(["replay", str(tmp_path / "case.json"), "--device", "cpu"]) == 0, capsys.readouterr().err
    assert seen == {"device": "cpu", "interpret": "1"}  # the command ran on its flag's device, interpreted
    assert os.environ.get("FUZZRUNNER_DEVICE") == before and "TRITON_INTERPRET" not in os.environ
