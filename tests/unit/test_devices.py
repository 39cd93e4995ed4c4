"""The one owner of the device: resolved once, a typed error where it cannot be had."""

import os

import pytest

from fuzzrunner import _env, devices, fuzz
from fuzzrunner.errors import DeviceUnavailable, InvalidArgument
from fuzzrunner.settings import Settings


def test_nothing_asked_is_this_machines_device_and_a_cluster_decides_its_own_gpus():
    assert devices.resolve(None) == _env.device_type()
    assert devices.resolve("cpu") == "cpu"
    assert devices.resolve("cuda", on_cluster=True) == "cuda"                 # the nodes' GPUs, not ours
    assert devices.resolve(None, sanitizer="initcheck", on_cluster=True) == "cuda"


@pytest.mark.skipif(_env.cuda_present(), reason="needs a machine without a GPU")
def test_a_gpu_that_is_not_here_is_a_device_error_naming_what_asked_for_it():
    with pytest.raises(DeviceUnavailable, match="device 'cuda' needs a CUDA GPU"):
        devices.resolve("cuda")
    with pytest.raises(DeviceUnavailable, match="compute-sanitizer --tool memcheck needs a CUDA GPU"):
        devices.resolve(None, sanitizer="memcheck")
    with pytest.raises(DeviceUnavailable, match="nothing on the CPU checks what it checks"):
        devices.resolve(None, sanitizer="racecheck")
    assert issubclass(DeviceUnavailable, InvalidArgument)  # the CLI's exit 2, as every bad argument


def test_use_is_undone_by_restore():
    before = os.environ.get(devices.ENV)
    old = devices.use("cpu")
    assert devices.current() == "cpu" and old == before
    devices.restore(old)
    assert os.environ.get(devices.ENV) == before


def test_fuzz_takes_a_settings_or_a_profile_never_both():
    with pytest.raises(InvalidArgument, match="pass one of the two"):
        fuzz("reference_runner", settings=Settings(), profile="ci")
    with pytest.raises(InvalidArgument, match="takes a fuzzrunner.Settings, not dict"):
        fuzz("reference_runner", settings={"max_examples": 5})
