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
from hypothesis import strategies as st

import fuzzrunner
from fuzzrunner.case import Case
from fuzzrunner.context import Context
from fuzzrunner.execute import RunContext, _caller_outside_this_file, _limitation, crash_violation, run_case
from fuzzrunner.runner.uploads import upload, write
from fuzzrunner.target import Target, load_target


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
    ctx = RunContext(Case("reference_runner", {}, ()), Context.of("cpu"), [])
    kept, pending = torch.ones(2), torch.full((2,), 3.0)
    ctx.outputs = {(0, "step", "hidden"): kept, (1, "step", "hidden"): pending}
    ctx._pending.append((pending, torch.device("cuda", 0)))

    def broken(_device):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "synchronize", broken)
    ctx.drop_unsettled()
    assert list(ctx.outputs) == [(0, "step", "hidden")] and not ctx._pending
    ctx.drop_unsettled()  # nothing pending: nothing happens
    assert list(ctx.outputs) == [(0, "step", "hidden")]


def test_settled_outputs_are_all_kept(monkeypatch):
    ctx = RunContext(Case("reference_runner", {}, ()), Context.of("cpu"), [])
    out = torch.ones(2)
    ctx.outputs = {(0, "step", "hidden"): out}
    ctx._pending.append((out, torch.device("cuda", 0)))
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    ctx.drop_unsettled()
    assert waited == [torch.device("cuda", 0)] and list(ctx.outputs) == [(0, "step", "hidden")]


KEPT: list = []


def _keep_gpu_outputs(case, ctx):
    """Two ops, each keeping an output as a GPU tensor does: copied without a wait, pending until the case
    settles (a CPU tensor stands in for it)."""
    KEPT.clear()
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            ctx.output("y", torch.full((2,), float(i)))
            host = ctx._current().outputs["y"]
            ctx._pending.append((host, torch.device("cuda", 0)))
            ctx.output_site = _caller_outside_this_file()
            KEPT.append(host)


KEEPER = Target("keeper", "keeps outputs the way a GPU run does",
                lambda faults=(), *, max_ops=4: st.just(Case("keeper", {}, ())), _keep_gpu_outputs)


def test_a_case_waits_for_its_outputs_once_at_its_end(monkeypatch):
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    ops = ({"op": "a"}, {"op": "b"})
    assert run_case(Case("keeper", {}, ops), KEEPER, oracles=[], device="cpu") == []
    assert waited == [torch.device("cuda", 0)]  # once, for both outputs


def test_a_device_fault_at_the_cases_end_is_its_crash_where_it_kept_its_last_output(monkeypatch):
    """The fault surfaces while the case waits for its outputs: a crash of this case at its last op,
    located at the target's line that kept the output (not in torch), never the next case's."""
    from fuzzrunner.execute import _one_run

    def broken(_device):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "synchronize", broken)
    record = _one_run(Case("keeper", {}, ({"op": "a"}, {"op": "b"})), KEEPER, "cpu", [], None)
    (v,) = record.violations
    assert (v.tool, v.kind, v.details["op_index"]) == ("python", "crash", 1)
    assert v.site.endswith("test_host_waits.py::_keep_gpu_outputs") and "illegal memory access" in v.message
    assert record.outputs == {}  # neither copy can be known to have landed


def test_a_device_fault_surfacing_in_an_oracles_read_is_the_runners_crash_not_the_tools():
    """A kernel's fault surfaces at the next wait, whoever waits: when that is an oracle reading a
    result, it is still a crash, not a tool-limitation; the oracle's own errors stay the tool's."""
    code = compile("def read(e):\n    raise e\n", os.path.join(os.path.dirname(fuzzrunner.__file__), "oracles",
                                                               "numeric.py"), "exec")
    space: dict = {}
    exec(code, space)
    for error, tool_limit in ((RuntimeError("CUDA error: an illegal memory access was encountered"), False),
                              (RuntimeError("device-side assert triggered"), False),
                              (KeyError("the oracle's own bug"), True)):
        try:
            space["read"](error)
        except Exception as exc:  # noqa: BLE001
            assert (_limitation(exc, 0) is not None) == tool_limit, error
            assert (crash_violation(exc, 0, ()).kind == "tool-limitation") == tool_limit


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
def test_upload_and_write_do_not_wait(device, monkeypatch):
    if device != "cuda":
        pytest.skip("FUZZRUNNER_DEVICE is not cuda")
    d = torch.device(device)
    dst = torch.zeros(12, dtype=torch.int32, device=d)
    seen = _waits(lambda: (upload(torch.arange(10), d), write(dst[:10], torch.arange(10, dtype=torch.int32))))
    assert seen == {}
    pinned = []  # the copies start from pinned memory (a non_blocking copy from pageable memory still waits,
    real = torch.Tensor.pin_memory  # and the sync debug mode does not say so)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t, *a: pinned.append(t) or real(t, *a))
    upload(torch.arange(3), d)
    write(dst[:3], torch.arange(3, dtype=torch.int32))
    assert len(pinned) == 2
    assert _waits(lambda: dst[:3].copy_(torch.arange(3, dtype=torch.int32))), "the check sees a pageable copy"


@pytest.mark.gpu
def test_a_reference_runner_case_waits_only_where_vllm_does(device):
    """A plain case waits in the mapping's preparation alone (``torch.all`` read on the host and
    ``torch.unique``, as vLLM's ``LoRAKernelMeta.prepare_tensors`` does); its wait at the end
    (``torch.cuda.synchronize``) is one the sync debug mode does not count."""
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

