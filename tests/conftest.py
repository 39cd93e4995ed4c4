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
    _xdist_groups(config, items)
    if not _env.interpreted():  # compiled Triton (the GPU machine's cuda-tests): CPU tensors cannot reach a kernel
        compiled = pytest.mark.skip(reason="launches Triton kernels on CPU tensors: needs Triton's interpreter "
                                           "(FUZZRUNNER_DEVICE=cpu)")
        for item in items:
            if "interpreter" in item.keywords:
                item.add_marker(compiled)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _xdist_groups(config, items) -> None:
    """``--dist loadgroup`` (scripts/test.sh) sends the tests of one ``xdist_group`` to one worker by the "@GROUP" its
    worker appends to their node ids (xdist.remote); from pytest 9.2 a node id is read from ``item._id`` and xdist
    3.8's write of ``item._nodeid`` is lost, so every group was spread over both workers: test_ray.py's tests started
    two local clusters, and each grouped module's fixture was set up twice. The same suffix, where this pytest reads
    node ids (an older pytest has no ``_id``: xdist's own write works there). ``config.option.loadgroup``: a worker's
    ``dist`` reads "no"."""
    if not getattr(config.option, "loadgroup", False) or not items or not hasattr(items[0], "_id"):
        return
    from _pytest.nodeid import NodeId
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and not item.nodeid.endswith("@" + "_".join(names)):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


@pytest.fixture
def no_hang():
    """``with no_hang(seconds):`` fails the test instead of letting it block (a FIFO opened for reading,
    a wait that never ends): SIGALRM, main thread only."""
    import signal
    from contextlib import contextmanager

    @contextmanager
    def guard(seconds: int):
        def fail(*_):
            raise AssertionError(f"blocked for {seconds} s (a FIFO opened for reading?)")
        old = signal.signal(signal.SIGALRM, fail)
        signal.alarm(seconds)
        try:
            yield
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    return guard
