"""Shared fixtures. The device is decided first: TRITON_INTERPRET=1 must be set before Triton loads."""

from fuzzrunner import _env

_env.configure()  # before any test module imports fuzzrunner.kernels

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture
def device() -> str:
    """"cpu" (Triton interpreter) or "cuda" (compiled kernels, real CUDA graphs)."""
    return _env.device_type()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
