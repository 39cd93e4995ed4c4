"""Shared fixtures. ``import fuzzrunner`` comes first: it sets TRITON_INTERPRET before Triton loads."""

import fuzzrunner  # noqa: F401  (must precede any fuzzrunner.kernels import)
import pytest
import torch
from fuzzrunner import _env


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
