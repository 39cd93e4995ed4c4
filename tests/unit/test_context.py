"""The run's context: decided once from the settings and the machine (``Context.resolve``), a typed error
where its device cannot be had; the environment only a front end's default."""

import os

import pytest

from fuzzrunner import _env, env_defaults
from fuzzrunner.context import Context, default_shadow
from fuzzrunner.errors import DeviceUnavailable, InvalidArgument
from fuzzrunner.settings import Settings


def test_nothing_asked_is_this_machines_device_and_a_cluster_decides_its_own_gpus():
    assert Context.resolve(Settings()).device == _env.device_type()
    assert Context.resolve(Settings(device="cpu")) == Context("cpu", True, "cpu")
    assert Context.resolve(Settings(device="cuda"), on_cluster=True) == Context("cuda", False, "device")  # the nodes'
    assert Context.resolve(Settings(sanitizer="initcheck"), on_cluster=True) == Context("cuda", False, "device",
                                                                                        "initcheck")


@pytest.mark.skipif(_env.cuda_present(), reason="needs a machine without a GPU")
def test_a_gpu_that_is_not_here_is_a_device_error_naming_what_asked_for_it():
    with pytest.raises(DeviceUnavailable, match="device 'cuda' needs a CUDA GPU"):
        Context.resolve(Settings(device="cuda"))
    with pytest.raises(DeviceUnavailable, match="compute-sanitizer --tool memcheck needs a CUDA GPU"):
        Context.resolve(Settings(sanitizer="memcheck"))
    with pytest.raises(DeviceUnavailable, match="nothing on the CPU checks what it checks"):
        Context.resolve(Settings(sanitizer="racecheck"))
    with pytest.raises(DeviceUnavailable, match="^--device cuda needs"):
        Context.resolve(Settings(device="cuda"), asked_as="--device cuda")
    assert issubclass(DeviceUnavailable, InvalidArgument)  # the CLI's exit 2, as every bad argument


@pytest.mark.parametrize("device, interpreted, forced, mode", [
    ("cuda", False, None, "device"), ("cpu", True, None, "cpu"), ("cuda", True, None, "cpu"),
    ("cuda", False, "cpu", "cpu"), ("cpu", True, "device", "device")])
def test_the_shadow_mode_is_the_settings_else_the_device_mode_only_with_compiled_triton_on_a_gpu(
        device, interpreted, forced, mode):
    assert Context.of(device, interpreted=interpreted, shadow=forced).shadow == mode
    assert default_shadow(device, interpreted) == ("device" if (device, interpreted) == ("cuda", False) else "cpu")


def test_a_campaigns_workers_interpret_on_the_cpu_and_compile_on_a_gpu_a_replay_here_runs_as_this_process():
    assert Context.resolve(Settings(device="cpu")).interpreted
    assert not Context.resolve(Settings(device="cuda"), on_cluster=True).interpreted
    assert Context.resolve(Settings(device="cpu"), in_process=True).interpreted == _env.interpreted()


def test_the_settings_shadow_mode_is_checked_and_forced():
    assert Context.resolve(Settings(device="cpu", shadow="device")).shadow == "device"
    with pytest.raises(InvalidArgument, match=r"^shadow='gpu' must be one of device, cpu, or None"):
        Settings(shadow="gpu")
    with pytest.raises(InvalidArgument, match="shadow='gpu' must be one of device, cpu"):
        Context("cpu", True, "gpu")
    with pytest.raises(InvalidArgument, match="device='tpu' must be one of cpu, cuda"):
        Context("tpu", True, "cpu")


def test_the_cpu_check_of_a_gpu_campaign_interprets_and_keeps_only_a_forced_shadow_mode():
    assert Context.cpu_check(Settings(device="cuda", sanitizer="initcheck")) == Context("cpu", True, "cpu")
    assert Context.cpu_check(Settings(shadow="device")) == Context("cpu", True, "device")


def test_a_context_is_recorded_and_read_back_and_an_unreadable_record_is_none():
    c = Context("cuda", False, "device", "initcheck", "0")
    assert Context.from_dict(c.to_dict()) == c
    for bad in (None, [], {"device": "tpu", "shadow": "cpu"}, {"device": "cpu"}, {"device": "cpu", "shadow": "x"}):
        assert Context.from_dict(bad) is None
    assert Context.from_dict({"device": "cpu", "shadow": "cpu"}) == Context("cpu", True, "cpu")


def test_the_environment_is_a_front_ends_default_that_explicit_settings_override(monkeypatch):
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    assert env_defaults.apply(Settings()) == Settings(shadow="device")
    assert env_defaults.apply(Settings(device="cuda", shadow="cpu")) == Settings(device="cuda", shadow="cpu")
    assert Context.resolve(Settings()).shadow == default_shadow(_env.device_type(), _env.device_type() != "cuda")


def test_use_device_is_undone_by_restore_device():
    before = os.environ.get(env_defaults.DEVICE_ENV)
    old = env_defaults.use_device("cpu")
    assert os.environ[env_defaults.DEVICE_ENV] == "cpu" and old == before
    env_defaults.restore_device(old)
    assert os.environ.get(env_defaults.DEVICE_ENV) == before
