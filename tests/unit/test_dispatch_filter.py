"""The device shadow's dispatch filter (fuzzrunner/oracles/shadow/gpu/dispatch_filter.py): ops the mode would only
run skip it, the others reach it as before, and without the filter the oracle gives the same reports."""

import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuzzrunner import track
from fuzzrunner.oracles.shadow.gpu import dispatch_filter
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle

needs_filter = pytest.mark.skipif(dispatch_filter.get() is None,
                                  reason=f"the dispatch filter cannot be built here: {dispatch_filter.status()}")


class _Counting(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _case(above: TorchDispatchMode | None = None):
    """Op 0 writes a per-step buffer; op 1 works on untracked tensors (twice: an op is named at its first
    dispatch), then reads the buffer without writing it (a stale read) with an op already named."""
    oracle = GpuShadowOracle("cpu")
    oracle.start()
    seen: list = []
    real = type(oracle._mode)._dispatch

    def counted(self, func, *a, **k):
        seen.append(func.__name__)
        return real(self, func, *a, **k)
    type(oracle._mode)._dispatch = counted
    try:
        buf = track(torch.zeros(8), "buf", per_step=True)
        oracle.begin_op(0, {"op": "step"})
        buf.fill_(1.0)
        oracle.begin_op(1, {"op": "step"})
        a = torch.randn(16)
        if above is not None:
            above.__enter__()
        try:
            for _ in range(2):
                seen.clear()
                b = torch.mul(a + 1, 2)
            untracked = list(seen)
            a.sum()  # ``sum`` named on untracked memory: the tracked read below is the filter's to send on
            buf.sum()
        finally:
            if above is not None:
                above.__exit__(None, None, None)
        assert torch.equal(b, (a + 1) * 2)
    finally:
        type(oracle._mode)._dispatch = real
        vs = oracle.finish()
    return [(v.kind, v.tensor, v.details.get("op_index")) for v in vs], untracked


@pytest.mark.interpreter
@needs_filter
def test_ops_on_untracked_memory_skip_the_mode_and_a_read_of_tracked_memory_reaches_it():
    native, _ = dispatch_filter.get().counts()
    reports, untracked = _case()
    assert reports == [("stale-read", "buf", 1)]
    assert untracked == []  # add and mul on untracked tensors: past the mode, once named
    assert dispatch_filter.get().counts()[0] > native
    assert not dispatch_filter.get().included()  # the key is left as it was before the case


@pytest.mark.interpreter
@needs_filter
def test_a_mode_above_the_oracles_sees_every_op_and_the_oracle_still_reports():
    """Another mode on the stack: the filter lets nothing past (that mode's ops would be lost)."""
    counting = _Counting()
    reports, untracked = _case(above=counting)
    assert reports == [("stale-read", "buf", 1)]
    assert counting.names.count("add.Tensor") == 2 and counting.names.count("mul.Tensor") == 2


@needs_filter
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_result_in_memory_a_record_still_names_drops_the_record(device):
    """A result of an op past the mode, in memory where a record of freed memory lies (one no death watch
    ends: an adopted tensor's), drops that record before the next lookup, as the mode's ``_allocations`` did.
    (CUDA's caching allocator hands the freed block back at once; the CPU's may not.)"""
    oracle = GpuShadowOracle(device)
    oracle.start()
    try:
        oracle.begin_op(0, {"op": "step"})
        a = torch.randn(256, device=device)
        torch.mul(a, 2)  # named by the mode
        ptr, out = _result_on_a_freed_record(oracle, a, device)
        assert oracle.tracked_near([(ptr, 1024)]) == []  # dropped at the lookup
        out.sum()
        oracle.begin_op(1, {"op": "step"})
        out.sum()
    finally:
        vs = oracle.finish()
    assert [v.kind for v in vs] == []  # a written result: nothing read of the freed record's epochs


def _result_on_a_freed_record(oracle, a: torch.Tensor, device: str, paused: bool = False):
    """(address, result): ``a * 2`` made in a freed block that a record of the oracle still names (one no death
    watch ends: an adopted tensor's); in the oracle's own pause if ``paused``. Skips where the allocator never
    hands a freed block back."""
    for _ in range(200):
        with torch._C._DisableTorchDispatch():  # (unseen by the mode: no record, no death watch)
            old = torch.empty(256, device=device)
        ptr = old.data_ptr()
        oracle.shadow.add(ptr, 1024, "freed", per_step=True, initialized=False, itemsize=4, shape=(256,))
        del old
        if paused:
            with oracle.pause():
                out = torch.mul(a, 2)
        else:
            out = torch.mul(a, 2)
        if out.data_ptr() == ptr:
            return ptr, out
        oracle.shadow.remove(oracle.shadow.overlapping(ptr, 1024)[0])
    pytest.skip(f"the {device} allocator never handed a freed block back here")


@pytest.mark.parametrize("filtered", [pytest.param(True, marks=needs_filter), False])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_oracles_own_ops_leave_records_as_the_paused_mode_does(device, filtered, monkeypatch):
    """The oracle's own ops (in its pause) are run as they are: one whose result lands where a record of freed
    memory lies leaves that record, with the filter as without it (the paused mode looks at nothing)."""
    if not filtered:
        monkeypatch.setattr(dispatch_filter, "get", lambda: None)
    oracle = GpuShadowOracle(device)
    oracle.start()
    try:
        assert (oracle._filter is not None) == filtered
        oracle.begin_op(0, {"op": "step"})
        a = torch.randn(256, device=device)
        torch.mul(a, 2)  # named by the mode
        ptr, kept = _result_on_a_freed_record(oracle, a, device, paused=True)
        assert [r.name for r in oracle.tracked_near([(ptr, 1024)])] == ["freed"]
        oracle.shadow.remove(oracle.shadow.overlapping(ptr, 1024)[0])
        ptr, _ = _result_on_a_freed_record(oracle, a, device)  # the pause over: the case's ops looked at again
        assert oracle.tracked_near([(ptr, 1024)]) == []
        del kept
    finally:
        oracle.finish()


def test_without_the_filter_the_oracle_reports_the_same_and_says_why(tmp_path):
    """No compiler (``CXX=false``, a fresh cache): the filter is off, with the reason, and the mode sees every op."""
    code = ("from fuzzrunner.oracles.shadow.gpu import dispatch_filter as d; import test_dispatch_filter as t; "
            "print(d.status()); print(t._case())")
    env = {**os.environ, "CXX": "false", "FUZZRUNNER_CACHE_DIR": str(tmp_path), "FUZZRUNNER_DEVICE": "cpu",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    status, result = out.stdout.strip().splitlines()[-2:]
    assert status.startswith("off (RuntimeError: the C++ build failed (CXX=false, exit 1")
    assert result == "([('stale-read', 'buf', 1)], ['add.Tensor', 'mul.Tensor'])"  # the mode saw them
    assert "building the GPU shadow's dispatch filter" in out.stderr
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "building" not in again.stderr  # the failure is remembered: not every worker tries again
    assert "remembered: delete" in again.stdout.strip().splitlines()[-2]


@pytest.mark.parametrize("shadow, oracles, built", [("device", ("shadow",), True), ("", ("shadow",), False),
                                                    ("device", ("numeric",), False)])
def test_a_campaign_builds_the_filter_before_its_workers_and_says_when_it_is_off(monkeypatch, shadow, oracles,
                                                                                   built):
    """A worker building the filter spends the campaign's budget (about 30 s) and loses the build when stopped:
    the campaign process builds it first, only when its workers run the device mode, and says if it is off."""
    from fuzzrunner.engine import campaign, shard_run
    from fuzzrunner.settings import Settings
    asked: list = []
    monkeypatch.setattr(dispatch_filter, "get", lambda: asked.append(1))  # (returns None: a filter that is off)
    monkeypatch.setattr(dispatch_filter, "status", lambda: "off (RuntimeError: no compiler)")
    plan = campaign.plan_campaign("reference_runner", Settings(device="cpu", oracles=oracles, shadow=shadow or None))
    said: list = []
    shard_run.prepare_shadow(plan, said.append)
    assert bool(asked) == built
    assert [e.message for e in said] == ([
        "the GPU shadow's dispatch filter is off (RuntimeError: no compiler): every torch op goes through its "
        "Python mode (the same reports, slower)"] if built else [])


def test_a_machine_with_a_compiler_builds_the_filter():
    """Where a C++ compiler is, the filter must build: a source that stopped compiling would otherwise only
    make every test above skip, and the GPU shadow slow."""
    import shlex
    import shutil
    compiler = shlex.split(os.environ.get("CXX", "c++"))[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C++ compiler ({compiler}) here: the filter is off, and the mode sees every op")
    assert dispatch_filter.get() is not None, dispatch_filter.status()


@needs_filter
def test_the_filters_copy_of_the_region_index_answers_what_the_index_answers():
    """The filter keeps a copy of DeviceShadow's index, told each insertion and removal (not sent whole)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from fuzzrunner.oracles.shadow.gpu.regions import DeviceShadow, Region
    filt = dispatch_filter.get()
    span = st.tuples(st.integers(0, 200), st.integers(0, 120))  # nested and overlapping regions: a removed one's
    #                                                             end may have been the running maximum past it

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(["add", "inner", "inner", "remove", "remove"]), span,
                              st.integers(0, 30)), max_size=30),
           st.lists(span, min_size=1, max_size=12))
    def check(steps, queries):
        assert dispatch_filter.claim(check)
        shadow = DeviceShadow("cpu")
        shadow.add(500, 8, "before", per_step=False, initialized=True, itemsize=4, shape=(2,))
        shadow.mirror_to(filt)
        try:
            for kind, (start, nbytes), k in steps:
                if kind == "add":
                    shadow.add(start, max(nbytes, 1), "t", per_step=False, initialized=True, itemsize=1, shape=(1,))
                elif kind == "inner":
                    shadow.append(Region(start, max(nbytes, 1), "v", False, 1, (1,), None))
                elif shadow.regions:
                    shadow.remove(shadow.regions[k % len(shadow.regions)])
                for q in queries:
                    assert filt.any_overlapping(*q) == shadow.any_overlapping([q])
        finally:
            shadow.mirror_to(None)
            filt.set_regions([], [])
            dispatch_filter.release(check)
    check()


@pytest.mark.parametrize("filtered", [pytest.param(True, marks=needs_filter), False])
def test_views_of_a_tensor_subclass_stay_that_subclass(filtered, monkeypatch):
    """A view op skips the mode, but not a subclass's own dispatch: its views are still of its class. And an op
    on a wrapper subclass (no data of its own) runs in the mode: it raised there before (an invalid storage)."""
    from torch.testing._internal.two_tensor import TwoTensor
    if not filtered:
        monkeypatch.setattr(dispatch_filter, "get", lambda: None)
    oracle = GpuShadowOracle("cpu")
    oracle.start()
    try:
        oracle.begin_op(0, {"op": "step"})
        x = torch.randn(4, 4)
        x.t(), x.view(16), x.detach()  # named by the mode: views
        t = TwoTensor(torch.ones(4), torch.ones(4))
        d, v = t.detach(), t.view(2, 2)
        assert type(d) is TwoTensor and type(v) is TwoTensor
        assert torch.equal((v + 1).a, torch.full((2, 2), 2.0))
    finally:
        oracle.finish()


def _stale(read, warm=None) -> list:
    oracle = GpuShadowOracle("cpu")
    oracle.start()
    try:
        buf = track(torch.zeros(4, 4), "buf", per_step=True)
        oracle.begin_op(0, {"op": "step"})
        buf.fill_(1.0)
        if warm is not None:
            warm()
        oracle.begin_op(1, {"op": "step"})
        read(buf)
    finally:
        vs = oracle.finish()
    return [(v.kind, v.tensor) for v in vs]


@pytest.mark.interpreter
@needs_filter
@pytest.mark.parametrize("read", ["reshape", "contiguous", "to"])
def test_an_op_made_of_others_is_checked_after_the_mode_saw_it_whole_under_inference_mode(read):
    """Under ``torch.inference_mode`` (no autograd keys) the mode sees ``reshape`` whole and names it a view; in
    autograd dispatch it is made of a ``clone``, which reads: the copy must still be checked."""
    ops = {"reshape": lambda b: b.t().reshape(16), "contiguous": lambda b: b.t().contiguous(),
           "to": lambda b: b.to(torch.float64)}

    def warm():
        with torch.inference_mode():
            w = torch.randn(4, 4)
            ops[read](w)
    assert _stale(ops[read], warm) == [("stale-read", "buf")]


@pytest.mark.interpreter
@needs_filter
def test_a_read_through_functionalization_reaches_the_mode():
    """A functional wrapper's storage has no address: its ops go to the mode, which sees the real op beneath."""
    torch.mul(torch.randn(2), 2)  # ``mul`` named
    assert _stale(lambda b: torch.func.functionalize(lambda x: (x * 2).sum())(b)) == [("stale-read", "buf")]


@pytest.mark.interpreter
@needs_filter
def test_of_two_oracles_one_holds_the_filter_and_both_report():
    """One oracle at a time holds the filter (its mode and its index); a second one's mode sees every op. A starts,
    B starts, B finishes (A still holds it), A finishes (oracles end in the reverse order, as ``execute`` ends
    them): both report, and the filter's key is left as before."""
    filt = dispatch_filter.get()
    a, b = GpuShadowOracle("cpu"), GpuShadowOracle("cpu")
    a.start()
    b.start()
    assert a._filter is filt and b._filter is None
    buf = track(torch.zeros(8), "buf", per_step=True)
    for o in (a, b):
        o.begin_op(0, {"op": "step"})
    buf.fill_(1.0)
    for o in (a, b):
        o.begin_op(1, {"op": "step"})
    buf.sum()
    got_b = [(v.kind, v.tensor) for v in b.finish()]
    assert filt.included()  # still A's
    buf.sum()
    got_a = [(v.kind, v.tensor) for v in a.finish()]
    assert got_a == got_b == [("stale-read", "buf")]
    assert not filt.included()
    c = GpuShadowOracle("cpu")  # released: the next oracle holds it
    c.start()
    try:
        assert c._filter is filt
    finally:
        c.finish()


@pytest.mark.parametrize("shadow, built", [("device", True), ("cpu", False)])
def test_a_replay_builds_the_filter_before_its_worker_starts(monkeypatch, shadow, built):
    """``fuzzrunner replay`` and the plugin's corpus items: a worker building the filter would spend the case's
    timeout on it (a finding found under a 10 s timeout replays under 10 s): the replaying process builds it
    before its worker, only where the worker runs the device mode."""
    from fuzzrunner.engine import replay
    from fuzzrunner.settings import Settings
    order: list = []
    monkeypatch.setattr(dispatch_filter, "get", lambda: order.append("build"))
    monkeypatch.setattr(dispatch_filter, "status", lambda: "off (RuntimeError: no compiler)")
    monkeypatch.setattr(replay, "Hub", lambda *a, **k: order.append("worker"))
    replayer = replay.Replayer(Settings(device="cpu", oracles=("shadow",), shadow=shadow))
    replayer.hub("reference_runner")
    replayer.hub("reference_runner")  # (one hub per target: built once)
    assert order == (["build", "worker"] if built else ["worker"])


def test_a_campaign_on_cuda_from_a_process_that_interprets_still_builds_for_its_compiled_workers(monkeypatch):
    """``TRITON_INTERPRET=1`` here (a user's export, a ``--device cpu`` session replaying a cuda case): the GPU
    workers run compiled Triton (they do not inherit it), so the device mode, and the build is needed here."""
    from fuzzrunner.context import Context
    from fuzzrunner.oracles.shadow import prepare_device_mode
    from fuzzrunner.settings import Settings
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    asked: list = []
    monkeypatch.setattr(dispatch_filter, "get", lambda: asked.append(1) or object())
    assert prepare_device_mode(Context.resolve(Settings(device="cuda"), on_cluster=True)) is None and asked == [1]
    assert prepare_device_mode(Context.resolve(Settings(device="cpu"))) is None and asked == [1]  # a CPU worker
    #                                                                        interprets: the CPU oracle


def test_the_cpu_shadow_forced_on_a_gpu_campaign_says_that_triton_kernels_go_unchecked(monkeypatch):
    """``FUZZRUNNER_SHADOW=cpu`` with ``--device cuda``: the workers run compiled Triton, which the CPU oracle
    cannot see (it checks kernels in the interpreter): said once, never a silent pass over every kernel."""
    from fuzzrunner.engine import campaign, shard_run
    from fuzzrunner.settings import Settings
    monkeypatch.setattr(dispatch_filter, "get", lambda: object())  # (a filter that is on)
    said: list = []
    for shadow in ("cpu", None):
        plan = campaign.plan_campaign("reference_runner", Settings(device="cuda", oracles=("shadow",), shadow=shadow),
                                      on_cluster=True)  # (no GPU needed to plan)
        said.clear()
        shard_run.prepare_shadow(plan, said.append)
        assert [("Triton kernels run compiled and unchecked" in e.message) for e in said] == (
            [True] if shadow == "cpu" else [])
