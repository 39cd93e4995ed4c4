"""Where the host waits for the GPU: the reference runner's uploads and the kept outputs do not.

On a GPU shared by several processes (a campaign's workers) each host wait costs a switch between their
contexts (scripts/gpu/contention.py: about 7,100 waits/s over all processes of an H200, however many), so
a wait that is not needed bounds every GPU campaign. The runner uploads through pinned memory without
waiting (as vLLM does); ``ctx.output`` copies to the host without waiting and the case waits once, at
its end (``RunContext.settle``), where a device fault is still this case's.
"""

import os
import traceback
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from fuzzrunner.case import Case
from fuzzrunner.execute import RunContext, run_case
from fuzzrunner.runner.uploads import upload, write
from fuzzrunner.target import load_target


def test_upload_and_write_give_the_values_on_the_device(device):
    d = torch.device(device)
    host = torch.arange(10, dtype=torch.int32)
    up = upload(host, d)
    dst = torch.zeros(12, dtype=torch.int32, device=d)
    write(dst[1:11], host)
    if d.type == "cuda":  # the host tensor changes after the copies were asked for: they keep what it held
        host.fill_(-7)
    assert up.device.type == d.type and up.cpu().tolist() == list(range(10))
    assert dst.cpu().tolist() == [0, *range(10), 0]


def test_a_failed_runs_outputs_whose_copies_never_landed_are_dropped(monkeypatch):
    """After a run that broke the device, an output copied without waiting may hold memory the copy never
    wrote: it is dropped (a poison comparison of it would cry wolf); outputs copied before stay."""
    ctx = RunContext(Case("reference_runner", {}, ()), "cpu", [])
    kept, pending = torch.ones(2), torch.full((2,), 3.0)
    ctx.outputs = {(0, "step", "hidden"): kept, (1, "step", "hidden"): pending}
    ctx._pending[id(pending)] = torch.device("cuda", 0)

    def broken(_device):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "synchronize", broken)
    ctx.drop_unsettled()
    assert list(ctx.outputs) == [(0, "step", "hidden")] and not ctx._pending
    ctx.drop_unsettled()  # nothing pending: nothing happens
    assert list(ctx.outputs) == [(0, "step", "hidden")]


def test_settled_outputs_are_all_kept(monkeypatch):
    ctx = RunContext(Case("reference_runner", {}, ()), "cpu", [])
    out = torch.ones(2)
    ctx.outputs = {(0, "step", "hidden"): out}
    ctx._pending[id(out)] = torch.device("cuda", 0)
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    ctx.drop_unsettled()
    assert waited == [torch.device("cuda", 0)] and list(ctx.outputs) == [(0, "step", "hidden")]


def _waits(fn) -> dict:
    """Each synchronising call torch reports (sync debug mode) while ``fn`` runs, by its innermost
    file:function outside torch."""
    seen: dict = {}
    own = os.sep + "torch" + os.sep

    def note(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" not in str(message):  # torch's other warnings (one when the debug mode is set)
            return
        frames = [f for f in traceback.extract_stack()[:-1] if own not in f.filename and "warnings" not in f.filename]
        key = f"{os.path.basename(frames[-1].filename)}:{frames[-1].name}" if frames else "?"
        seen[key] = seen.get(key, 0) + 1

    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = note
        torch.cuda.set_sync_debug_mode("warn")
        seen.clear()  # torch warns once per process as the mode is set (seen on an H200): not fn's
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return seen


@pytest.mark.gpu
def test_upload_and_write_do_not_wait(device):
    if device != "cuda":
        pytest.skip("FUZZRUNNER_DEVICE is not cuda")
    d = torch.device(device)
    dst = torch.zeros(12, dtype=torch.int32, device=d)
    seen = _waits(lambda: (upload(torch.arange(10), d), write(dst[:10], torch.arange(10, dtype=torch.int32))))
    assert seen == {}
    assert _waits(lambda: dst[:3].copy_(torch.arange(3, dtype=torch.int32))), "the check sees a pageable copy"


@pytest.mark.gpu
def test_a_reference_runner_case_waits_only_where_vllm_does(device):
    """A plain case waits in the mapping's preparation alone (``torch.all`` read on the host and
    ``torch.unique``, as vLLM's ``LoRAKernelMeta.prepare_tensors`` does) and once at its end."""
    if device != "cuda":
        pytest.skip("FUZZRUNNER_DEVICE is not cuda")
    target = load_target("reference_runner")
    sites: dict = {}

    @settings(max_examples=6, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(target.cases(()))
    def check(case):
        for k, n in _waits(lambda: run_case(case, target, oracles=[], device="cuda")).items():
            sites[k] = sites.get(k, 0) + n

    check()
    assert sites and set(sites) <= {"kernel_meta.py:prepare"}, sites

