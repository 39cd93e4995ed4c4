"""The engine survives the crashes it provokes and never loses a finding."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.context import Context
from fuzzrunner.corpus import Corpus
from fuzzrunner.engine import Hub, WorkerSpec, run_campaign
from fuzzrunner.errors import HarnessError
from fuzzrunner.finding import Finding
from fuzzrunner.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# One xdist group: under `--dist loadgroup` a module's ungrouped tests spread over both workers, each
# setting up the module's fixtures; grouped, `hub` (a forked and a started worker) is set up once per CI run.
pytestmark = pytest.mark.xdist_group("engine")
CRASHY = str(Path(__file__).with_name("crashy_target.py")) + ":TARGET"


def _case(*actions):
    return Case("crashy", {}, tuple({"op": a} for a in actions))


@pytest.fixture(scope="module", params=[True, False], ids=["forked", "started"])
def hub(request):
    """Workers forked by the zygote (the default), and started directly (under a sanitizer)."""
    with Hub(WorkerSpec(CRASHY), timeout_s=3.0, zygote=request.param) as h:
        yield h


@pytest.mark.parametrize("action, kind, where", [
    ("segfault", "crash", "SIGSEGV"),
    ("exit", "crash", "exit status 7"),
    ("hang", "timeout", ""),
])
def test_a_dying_worker_becomes_a_finding_and_is_replaced(hub, action, kind, where):
    result = hub.run(_case("ok", action))
    assert result.crashed
    [v] = result.violations
    assert (v.kind, v.location) == (kind, where)
    assert v.details["op_index"] == 1 and v.details["op"] == action
    assert hub.run(_case("ok")).violations == []  # a fresh worker took over


def test_a_python_exception_is_a_crash_finding_without_killing_the_worker(hub):
    pid = hub.worker.proc.pid if hub.worker else None
    result = hub.run(_case("raise"))
    [v] = result.violations
    assert (v.tool, v.kind, v.kernel) == ("python", "crash", "ValueError")
    assert v.location.endswith("crashy_target.py:25") and "planted exception" in v.message
    assert not result.crashed
    if pid is not None:
        assert hub.worker.proc.pid == pid


def test_a_target_that_cannot_be_set_up_is_a_harness_error_not_a_finding(tmp_path):
    bad = tmp_path / "bad_target.py"
    bad.write_text("raise ImportError('no such runner')\n")
    with pytest.raises(HarnessError, match="no such runner"):
        with Hub(WorkerSpec(f"{bad}:TARGET")) as h:
            h.run(_case("ok"))


def test_campaign_completes_with_each_planted_failure_one_finding(tmp_path):
    # 20 cases (seed 3) find all four; each case with a bad op costs a worker, a hang 3 s more
    settings = Settings(max_examples=20, seed=3, case_timeout_s=3.0, device="cpu")
    r = run_campaign(CRASHY, settings, corpus_dir=tmp_path)
    kinds = sorted((f.violation.kind, f.violation.location or f.violation.kernel) for f in r.findings)
    assert kinds == sorted([("crash", "SIGSEGV"), ("crash", "exit status 7"),
                            ("crash", "crashy_target.py:25"), ("timeout", "hang")])
    for f in r.findings:
        assert f.minimized and len(f.case.ops) == 1  # shrunk to the one bad op
        on_disk = Finding.load(Corpus(tmp_path).finding_path("crashy", f.id))
        assert on_disk.case == f.case


def test_kill_9_of_the_campaign_leaves_every_finding_on_disk(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "fuzzrunner", "fuzz", "--target", "reference_runner",
                             "--fault", "dummy_run_skips_mapping", "--max-examples", "100000",
                             "--corpus", str(tmp_path), "--seed", "1"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    findings = tmp_path / "expected" / "reference_runner"  # a campaign with planted faults
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(findings.glob("*.json")):
        time.sleep(0.2)
    time.sleep(1.0)  # let it shrink a little: rewrites must stay atomic too
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    files = list(findings.glob("*.json"))
    assert files, "no finding was written before the kill"
    for p in files:
        f = Finding.load(p)
        assert f.case.faults == ("dummy_run_skips_mapping",)
        json.loads(p.read_text())
    assert not list(findings.glob(".*.tmp"))


def test_a_shard_picks_among_the_gpus_it_may_use():
    from fuzzrunner.gpus import gpu_for_index, visible_gpus
    assert [gpu_for_index(i, visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5"})) for i in range(3)] == ["3", "5", "3"]
    assert [gpu_for_index(i, visible_gpus({}, lambda: ["0", "1"])) for i in range(3)] == ["0", "1", "0"]
    assert gpu_for_index(0, visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-abc"})) == "GPU-abc"
    assert gpu_for_index(0, visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"})) is None
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,1"}) == ["0"]


def test_spares_grow_with_the_rate_of_deaths_and_never_past_the_limit():
    hub = Hub(WorkerSpec(CRASHY), standby=True, max_spares=3)  # no worker starts until a case runs
    assert hub.wanted_spares() == 1
    hub._start_s = 2.0  # measured start-up
    hub._deaths = [0.0, 10.0, 20.0]      # a death every 10 s: a spare started after one is ready
    assert hub.wanted_spares() == 1
    hub._deaths = [0.0, 0.5, 1.0, 1.5]   # every 0.5 s, start-up 2 s: 4 wanted, capped at 3
    assert hub.wanted_spares() == 3
    assert Hub(WorkerSpec(CRASHY), standby=False).wanted_spares() == 0
    hub.close()


def test_a_deep_tmpdir_still_gives_a_socket_path_short_enough_for_af_unix(tmp_path, monkeypatch):
    import tempfile

    from fuzzrunner.engine import hub as hub_module
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    d = hub_module._hub_dir()
    try:
        assert len(os.path.join(d, "s").encode()) <= hub_module.SOCKET_PATH_MAX and d.startswith("/tmp/")
        with Hub(WorkerSpec(CRASHY), timeout_s=30.0) as h:  # and a worker really starts there
            assert h.run(_case("ok")).violations == []
    finally:
        import shutil
        shutil.rmtree(d, ignore_errors=True)


def test_the_targets_seed_cases_run_with_the_campaigns_planted_faults(tmp_path):
    """A seed case is a starting shape for this campaign: under --fault it runs with that fault,
    so the seed that is the bug's shape finds it before any generated case."""
    settings = Settings(max_examples=1, seed=3, device="cpu", shrink=False)
    r = run_campaign("reference_runner", settings, faults=("dummy_run_skips_mapping",), corpus_dir=tmp_path)
    hits = [p for p, _, hit in r.replayed if hit]
    assert any(p.endswith("dummy_run_first.json") for p in hits), r.replayed
    assert [f.case.faults for f in r.findings] == [("dummy_run_skips_mapping",)]


NAPPING = '''
import time
from hypothesis import strategies as st
from fuzzrunner.case import Case
from fuzzrunner.target import Target

def cases(faults=(), *, max_ops=5):
    return st.integers(0, 10**6).map(lambda n: Case("napping", {"n": n}, ({"op": "nap"},), tuple(faults)))

def run(case, ctx):
    with ctx.op(0, case.ops[0]):
        time.sleep(0.1)

TARGET = Target("napping", "each case naps 0.1 s in its worker", cases, run)
'''


def test_the_report_says_how_long_the_worker_spent_on_cases(tmp_path):
    from fuzzrunner.report import report_dict
    (tmp_path / "napping_target.py").write_text(NAPPING)
    r = run_campaign(f"{tmp_path / 'napping_target.py'}:TARGET", Settings(max_examples=6, seed=1, device="cpu"),
                     corpus_dir=tmp_path / "c")
    assert r.examples >= 6 and 0.1 * r.examples <= r.worker_s < r.duration_s  # each nap, and not the start-up
    [run] = report_dict(r)["runs"]
    assert run["worker_s"] == round(r.worker_s, 3)


def test_shards_sum_their_worker_seconds():
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.engine.sharding import Merger
    merged = CampaignResult("t", Settings(), 0, ())
    merger = Merger(2, None, merged)
    for s in (1.5, 2.25):
        r = CampaignResult("t", Settings(), 0, ())
        r.worker_s = s
        merger.done(r)
    assert merged.worker_s == 3.75


class _FakeGpuWorker:
    """A worker whose case loses the CUDA context: an asynchronous launch names a later kernel than the
    culprit; with ``CUDA_LAUNCH_BLOCKING=1`` it names the culprit (``crashes``: whether it crashes at all)."""

    def __init__(self, spec, crashes):
        self.spec, self.crashes = spec, crashes
        self.proc = type("P", (), {"poll": staticmethod(lambda: None), "pid": 0})()
        self.rss = type("R", (), {"check": staticmethod(lambda pid: "")})()

    def cut_log(self, cap):
        pass

    def run(self, case, oracles, timeout_s, stop_early=False, cut_at=None, linger_s=0.0):
        from fuzzrunner.engine.hub import RunResult
        from fuzzrunner.violation import Violation
        blocking = self.spec.env.get("CUDA_LAUNCH_BLOCKING") == "1"
        self.crashes["runs"].append(blocking)
        if blocking and self.crashes["blocking"] == "cannot start":
            raise HarnessError("worker failed outside the target: worker set-up failed")
        if blocking and self.crashes["blocking"] == "refuses":  # the target refuses the case in that worker
            from fuzzrunner.errors import InvalidCase
            raise InvalidCase("the target refused the case")
        if blocking and self.crashes["blocking"] == "cut":  # the campaign's budget ran out during the rerun
            return RunResult([], 0.01, True, 1, budget_cut=True)
        if not self.crashes["blocking" if blocking else "async"]:
            return RunResult([], 0.01)
        kernel = "_culprit_kernel" if blocking else "_a_later_kernel"
        return RunResult([Violation("python", "crash", kernel, "", "", f"CUDA error: an illegal memory access; "
                                    f"last kernel launch: {kernel}"),
                          Violation("cuda", "crash", kernel, "an illegal memory access", "", "context lost")],
                         0.01, True, 1)

    def close(self):
        pass


@pytest.mark.parametrize("blocking_crashes", [True, False, "cannot start", "cut", "refuses"])
def test_a_lost_cuda_context_runs_again_with_blocking_launches_to_name_its_kernel(monkeypatch, blocking_crashes):
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    crashes = {"async": True, "blocking": blocking_crashes, "runs": []}
    monkeypatch.setattr(Hub, "_new_worker", lambda self, by=math.inf: _FakeGpuWorker(self.spec, crashes))
    confirmed = blocking_crashes is True
    with Hub(WorkerSpec(CRASHY, Context.of("cuda")), standby=False, zygote=False) as hub:
        r = hub.run(_case("ok"))
        assert crashes["runs"] == [False, True]  # launched asynchronously, then again blocking
        assert r.crashed and r.confirmed == confirmed and hub.reruns == (blocking_crashes not in ("cannot start",
                                                                                                 "refuses"))
        assert {v.kernel for v in r.violations} == {"_culprit_kernel" if confirmed else "_a_later_kernel"}
        how = {True: "blocking (the rerun)", False: "asynchronous: the blocking rerun did not lose the context",
               "cannot start": "asynchronous: the blocking rerun failed (HarnessError",
               "cut": "asynchronous: the blocking rerun was cut by the budget",
               "refuses": "asynchronous: the blocking rerun's target refused the case"}[blocking_crashes]
        assert all(v.details["launches"].startswith(how) for v in r.violations), r.violations  # said in the report
        assert hub.restarts == 1  # the rerun's worker is not the shard's: its death counts against no limit
        if blocking_crashes == "cannot start":  # the first run's report stands; no more reruns are tried
            again = hub.run(_case("ok"))
            assert "set-up failed" in hub.rerun_error and again.crashed
            assert again.violations[0].details["launches"].startswith("asynchronous: no blocking rerun (HarnessError")
            assert crashes["runs"] == [False, True, False] and hub._blocking is None  # closed
            return
        assert hub.rerun_error is None  # reruns go on (a refused case refuses only itself)
        assert hub._blocking.worker is None  # retired after each rerun: the next one gets a fresh worker
        crashes["async"] = False
        assert hub.run(_case("ok")).violations == [] and crashes["runs"] == [False, True, False]  # no crash, no rerun
    blocking = WorkerSpec(CRASHY, Context.of("cuda"), env={"CUDA_LAUNCH_BLOCKING": "1"})
    with Hub(blocking, standby=False, zygote=False) as h:
        crashes["runs"].clear()
        crashes.update({"async": True, "blocking": True})
        r = h.run(_case("ok"))
        assert crashes["runs"] == [True] and h.reruns == 0  # launching blocking already: nothing to run again
        assert r.violations[0].details["launches"] == "blocking"


def test_no_blocking_rerun_under_a_sanitizer_on_the_cpu_or_with_too_little_budget_left(monkeypatch):
    import time as _time

    from fuzzrunner.engine.hub import RERUN_MIN_S
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    crashes = {"async": True, "blocking": True, "runs": []}
    monkeypatch.setattr(Hub, "_new_worker", lambda self, by=math.inf: _FakeGpuWorker(self.spec, crashes))
    sanitizer = WorkerSpec(CRASHY, Context.of("cuda"), wrapper=["compute-sanitizer"],
                           env={"CUDA_LAUNCH_BLOCKING": "1"})
    for spec, cut_at in ((sanitizer, math.inf),
                         (WorkerSpec(CRASHY, Context.of("cuda"), wrapper=["nsys", "profile"]), math.inf),
                         (WorkerSpec(CRASHY, Context.of("cpu")), math.inf),
                         (WorkerSpec(CRASHY, Context.of("cuda")), _time.monotonic() + RERUN_MIN_S / 2)):
        crashes["runs"].clear()
        with Hub(spec, standby=False, zygote=False) as hub:
            r = hub.run(_case("ok"), cut_at=cut_at)
        assert crashes["runs"] == [spec is sanitizer] and not r.confirmed and hub.reruns == 0, spec  # one run
        how = None if spec.device == "cpu" else "blocking" if spec is sanitizer else \
            "asynchronous: no blocking rerun (the workers run under a wrapper)" if spec.wrapper else \
            "asynchronous: no blocking rerun (under 30 s of the budget left)"
        assert [v.details.get("launches") for v in r.violations] == [how, how], spec  # how the run launched, why


def test_a_gpu_death_by_a_signal_says_it_was_not_run_again_with_blocking_launches(monkeypatch):
    from fuzzrunner.engine.hub import RunResult
    from fuzzrunner.violation import Violation
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    runs = []

    class Segfaulting(_FakeGpuWorker):
        def run(self, case, oracles, timeout_s, stop_early=False, cut_at=None, linger_s=0.0):
            runs.append(self.spec.env.get("CUDA_LAUNCH_BLOCKING") == "1")
            return RunResult([Violation("worker", "crash", "_a_later_kernel", "SIGSEGV", "", "killed by SIGSEGV")],
                             0.01, True, 1)
    monkeypatch.setattr(Hub, "_new_worker", lambda self, by=math.inf: Segfaulting(self.spec, {}))
    with Hub(WorkerSpec(CRASHY, Context.of("cuda")), standby=False, zygote=False) as hub:
        r = hub.run(_case("ok"))
    assert runs == [False] and hub.reruns == 0  # no lost context: not run again here (the shard confirms it)
    assert r.violations[0].details["launches"] == "asynchronous: a death by a signal or a hang is not run again"


def test_a_campaign_worker_on_a_gpu_launches_asynchronously():
    from fuzzrunner.engine.plan import worker_spec
    assert "CUDA_LAUNCH_BLOCKING" not in worker_spec(CRASHY, Settings(), 0, Context.of("cuda")).env


def test_a_crash_the_hub_confirmed_with_its_blocking_rerun_is_not_run_a_third_time(tmp_path, monkeypatch):
    from fuzzrunner.engine.hub import RunResult
    from fuzzrunner.violation import Violation
    calls = []

    def lost_context(self, case, cut_at=None, **kwargs):  # every case breaks the context; the hub's rerun confirmed it
        calls.append(case)
        return RunResult([Violation("cuda", "crash", "_culprit_kernel", "an illegal memory access", "",
                                    "the CUDA context was lost")], 0.01, True, 1, confirmed=True)
    monkeypatch.setattr(Hub, "run", lost_context)
    r = run_campaign(CRASHY, Settings(max_examples=3, seed=3, device="cpu", shrink=False), corpus_dir=tmp_path)
    [f] = r.findings
    assert f.violation.kernel == "_culprit_kernel" and not f.flaky and not r.flaky
    assert len(calls) == r.examples  # one call per case: no confirmation run on top of the hub's


def test_a_worker_that_loads_other_code_than_the_campaign_is_a_harness_error(tmp_path):
    from fuzzrunner.engine.hub import Worker, WorkerSpec
    from fuzzrunner.errors import HarnessError
    target = tmp_path / "t.py"
    target.write_text("import os\nfrom fuzzrunner import Target\nfrom hypothesis import strategies as st\n"
                      "TARGET = Target('t', 't', lambda faults, max_ops=8: st.nothing(), lambda case, ctx: None,\n"
                      "                code_under_test={'engine': 'e', 'release': os.environ.get('REL', '1')})\n")
    spec = WorkerSpec(f"{target}:TARGET", code={"engine": "e", "release": "2"})
    with pytest.raises(HarnessError, match=r"loaded other code than the campaign: e 1 .*not e 2"):
        Worker(spec)
    w = Worker(WorkerSpec(f"{target}:TARGET", env={"REL": "2"}, code={"engine": "e", "release": "2"}))
    w.close()
