"""Run on a GPU machine with `pytest -n 2 -p fuzzrunner.pytest_plugin scripts/gpu/test_xdist_pinning.py`:
each xdist worker reports the GPU it was pinned to and runs a fuzz test there (not collected by CI)."""

import os

import pytest


@pytest.mark.parametrize("i", range(4))
def test_worker_sees_one_device(i):
    import torch
    print(f"{os.environ.get('PYTEST_XDIST_WORKER')}: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "
          f"device_count={torch.cuda.device_count()}")
    assert torch.cuda.device_count() == 1
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "pinning.txt"), "a") as f:
        f.write(f"{os.environ.get('PYTEST_XDIST_WORKER')} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "  # noqa: E501
                f"{torch.cuda.get_device_properties(0).pci_bus_id if hasattr(torch.cuda.get_device_properties(0), 'pci_bus_id') else ''}\n")  # noqa: E501


@pytest.mark.fuzzrunner(target="reference_runner", faults=["graph_freezes_active_loras"], max_examples=40, seed=1)
def test_graph_fault_found_on_gpu(fuzzrunner_campaign):
    fuzzrunner_campaign.assert_finds("numeric-mismatch")


@pytest.mark.fuzzrunner(target="reference_runner", max_examples=40, seed=1)
def test_no_finding_on_gpu(fuzzrunner_campaign):
    fuzzrunner_campaign.assert_no_findings()
