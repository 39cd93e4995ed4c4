"""The parts of campaigns on a Ray cluster that need no Ray: one writer of the corpus, the install
line without Ray, a GPU per shard, the target's packaging. (The cluster itself: integration/test_ray.py.)"""

import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fuzzrunner import cli
from fuzzrunner.case import Case
from fuzzrunner.context import Context
from fuzzrunner.corpus import Corpus
from fuzzrunner.engine import events
from fuzzrunner.engine.corpus_stream import CorpusWriter, StreamedCorpus
from fuzzrunner.engine.deadline import Deadline
from fuzzrunner.engine.plan import CampaignPlan
from fuzzrunner.engine.ray_shards import RESEED, ShardJob, _Driver, packaged, shard_options
from fuzzrunner.engine.result import CampaignResult
from fuzzrunner.engine.sharding import Merger
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.finding import Finding
from fuzzrunner.settings import Settings
from fuzzrunner.violation import Violation

TARGET = str(Path(__file__).resolve().parents[1] / "integration" / "ray_target.py") + ":TARGET"


def _finding(*values, minimized=False, spec="ray_target.py:TARGET") -> Finding:
    case = Case("ray_toy", {}, tuple({"op": "step", "n": v} for v in values), ("planted",))
    v = Violation("python", "crash", "ValueError", "ray_target.py:29", "", "planted fault", {"op_index": 0},
                  site="ray_target.py::run")
    return Finding.of(v, [], case, minimized=minimized, target_spec=spec)


def test_without_ray_the_ray_option_says_how_to_install_it_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as on the GPU image: import ray fails
    assert cli.main(["fuzz", "--target", TARGET, "--ray", "local", "--corpus", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "pip install 'fuzzrunner[ray]'" in err and err.count("\n") == 1
    assert cli.main(["nightly", "--ray", "auto", "--corpus", str(tmp_path), "--report-dir", str(tmp_path / "r")]) == 2
    assert "fuzzrunner[ray]" in capsys.readouterr().err


def test_under_cuda_each_shard_asks_ray_for_one_gpu_and_on_the_cpu_for_none():
    gpu, cpu = shard_options("cuda"), shard_options("cpu")
    assert gpu["num_gpus"] == 1 and gpu["num_cpus"] == 1 and "num_gpus" not in cpu and cpu["num_cpus"] == 1
    assert gpu["max_restarts"] >= 1  # Ray brings a dead shard back


def test_on_a_cluster_the_driver_needs_no_gpu_of_its_own_for_device_cuda():
    from fuzzrunner.env_defaults import resolved
    s, context = resolved(Settings(device="cuda"), on_cluster=True)
    assert s.device == context.device == "cuda"
    from fuzzrunner import _env
    if not _env.cuda_present():
        with pytest.raises(InvalidArgument, match="needs a CUDA GPU"):
            resolved(Settings(device="cuda"))


def test_a_file_target_travels_as_its_folder_and_a_module_target_as_it_is(tmp_path):
    assert packaged(f"{tmp_path}/my_target.py:TARGET") == ("my_target.py:TARGET", {"working_dir": str(tmp_path)})
    assert packaged("fuzzrunner.targets.reference_runner:TARGET") == ("fuzzrunner.targets.reference_runner:TARGET", {})


def test_a_streamed_corpus_writes_nothing_itself_and_replays_the_drivers_snapshot(tmp_path):
    sent = []
    entries = [(tmp_path / "a.json", _finding(3).case, None)]
    c = StreamedCorpus(str(tmp_path), ("planted",), entries, sent.append)
    c.save_finding("ray_toy", _finding(12))
    assert list(tmp_path.iterdir()) == [] and [m.kind for m in sent] == ["corpus-save"]
    assert c.entries("ray_toy") == entries and c.entries("other") == [] and c.load_finding("ray_toy", "x") is None


def test_the_driver_writes_each_bug_once_the_smaller_case_winning_under_the_users_spec(tmp_path):
    corpus = Corpus(tmp_path, faults=("planted",))
    w = CorpusWriter(corpus, "/abs/ray_target.py:TARGET")
    big, small = _finding(12, 13, 14), _finding(10, minimized=True)
    for f in (big, small, big):  # shard A, shard B, then A again with its bigger case
        w.apply(events.CorpusSave("ray_toy", f))
    [path] = list((tmp_path / "expected" / "ray_toy").iterdir())
    on_disk = Finding.load(path)
    assert [op["n"] for op in on_disk.case.ops] == [10] and on_disk.minimized
    assert on_disk.target_spec == "/abs/ray_target.py:TARGET" == w.findings[big.id].target_spec
    w.apply(events.CorpusSetAside("ray_toy", big))
    assert not path.exists() and w.findings == {} and list((tmp_path / "flaky" / "ray_toy").iterdir())


def _plan(deadline: Deadline | None = None) -> CampaignPlan:
    settings = Settings(budget_s=deadline.budget_s if deadline else None, seed=7)
    return CampaignPlan("ray_target.py:TARGET", "ray_toy", settings, ("planted",), 7, Context.of("cpu"),
                        deadline=deadline)


def test_a_resumed_shard_gets_the_campaigns_plan_whole_and_its_deadline_decides():
    """The driver resumes a dead shard by the campaign's deadline (the budget from the command's start),
    and the resumed shard's plan is the campaign's with a new seed. It used to count the budget from the
    driver loop's own start (after the Ray session began) and hand the shard settings with a re-derived
    budget: it resumed shards the deadline had no room for, and their budget messages named that budget."""
    def driver(plan):
        return _Driver(None, Merger(2, None, CampaignResult("ray_toy", plan.settings, 7, ())), CorpusWriter(None, "t"),
                       plan)
    plan = _plan(Deadline.of(60.0, time.time() - 50.0))  # 50 s of the 60 s budget went before the driver began
    d = driver(plan)
    resumed = d._resumed(ShardJob(plan, 1, 0, 10, [], None, None, None), generated=4)
    assert resumed is not None and (resumed.run, resumed.quota) == (1, 6)
    assert resumed.plan == replace(plan, seed=7 + RESEED)  # settings (its budget) and deadline: the campaign's
    assert 5.0 < d._wait_s() <= 10.0
    late = _plan(Deadline.of(60.0, time.time() - 59.5))
    assert driver(late)._resumed(ShardJob(late, 1, 0, 10, [], None, None, None), generated=4) is None
    endless = _plan()
    again = driver(endless)._resumed(ShardJob(endless, 1, 0, 10, [], None, None, None), generated=4)
    assert again is not None and again.plan == replace(endless, seed=7 + RESEED)


def test_a_resumed_shard_adds_its_cases_to_those_of_its_dead_run():
    heard: list = []
    merged = CampaignResult("ray_toy", Settings(), 1, ())
    d = _Driver(None, Merger(2, heard.append, merged), CorpusWriter(None, "t"), _plan())
    d.handle(1, 0, events.ProgressEvent(10, 8, 0, 1.0, 1))
    d.handle(1, 1, events.ProgressEvent(4, 4, 0, 1.0, 1))
    d.handle(0, 0, events.ProgressEvent(3, 3, 0, 1.0, 0))
    assert (heard[-1].examples, heard[-1].generated) == (17, 15)


def test_the_redis_database_of_db_is_one_store_for_every_shard_under_the_campaign_prefix():
    fakeredis = pytest.importorskip("fakeredis")
    from fuzzrunner.engine.database import campaign_database
    from fuzzrunner.engine.shared_db import close_database, database_from_url
    url = "redis://fuzz-db:6379/0"
    # each shard opens its own client from the URL, as ShardActor.run does
    a, b = (database_from_url(url, client_class=fakeredis.FakeRedis) for _ in range(2))
    other = database_from_url("redis://fuzz-db:6379/1", client_class=fakeredis.FakeRedis)
    try:
        shard_a, shard_b = (campaign_database(db, None, "ray_toy", ("planted",), 1) for db in (a, b))
        elsewhere = campaign_database(b, None, "ray_toy", (), 1)  # another campaign, same store
        shard_a.save(b"test", b"example")
        assert list(shard_b.fetch(b"test")) == [b"example"]
        assert list(elsewhere.fetch(b"test")) == []
        assert list(campaign_database(other, None, "ray_toy", ("planted",), 1).fetch(b"test")) == []
    finally:
        for db in (a, b, other):
            close_database(db)


def test_db_without_ray_or_not_redis_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["fuzz", "--target", TARGET, "--db", "redis://h:1/0", "--corpus", str(tmp_path)]) == 2
    assert "add --ray ADDRESS" in capsys.readouterr().err
    assert cli.main(["fuzz", "--target", TARGET, "--ray", "local", "--db", "http://h/", "--corpus",
                     str(tmp_path)]) == 2
    assert "not a Redis URL" in capsys.readouterr().err


def test_what_a_shard_found_before_it_died_is_in_the_result_also_without_a_corpus():
    merged = CampaignResult("ray_toy", Settings(), 1, ("planted",))
    d = _Driver(None, Merger(2, None, merged), CorpusWriter(None, "/abs/t.py:TARGET"), _plan())
    d.handle(1, 0, events.FindingEvent(_finding(12), 1))
    d.handle(1, 0, events.ProgressEvent(5, 5, 0, 1.0, 1))
    d.deaths.append((1, 0, "shard 1's Ray actor died"))  # and no done from it
    d.finish(merged)
    [f] = merged.findings
    assert f.id == _finding(12).id and f.target_spec == "/abs/t.py:TARGET"
    assert merged.examples == 5 and merged.warnings == ["shard 1's Ray actor died"]


def test_a_shard_on_a_node_builds_the_dispatch_filter_before_its_search_and_says_when_it_is_off(monkeypatch):
    """A Ray shard whose worker runs the GPU shadow's device mode builds the filter in the actor, before
    ``run_shard`` starts its worker and budget (in the worker the build spent the budget), and its warning
    reaches the driver; a shard that does not run the device mode builds nothing."""
    import fuzzrunner.engine.shard_run as shard_run
    from fuzzrunner.engine import campaign, ray_shards
    from fuzzrunner.oracles.shadow.gpu import dispatch_filter
    order: list = []
    monkeypatch.setattr(dispatch_filter, "get", lambda: order.append("build"))  # (None: a filter that is off)
    monkeypatch.setattr(dispatch_filter, "status", lambda: "off (RuntimeError: no compiler)")
    monkeypatch.setattr(shard_run, "run_shard", lambda *a, **k: order.append("search") or CampaignResult("t", Settings(), 0, ()))
    sent: list = []

    class _Put:
        @staticmethod
        def remote(item):
            sent.append(item[2])

    class _Inbox:
        put = _Put

    monkeypatch.setitem(sys.modules, "ray", type(sys)("ray"))
    sys.modules["ray"].get = lambda ref: ref  # type: ignore[attr-defined]
    for shadow, built in (("device", True), ("cpu", False)):
        order.clear()
        sent.clear()
        plan = campaign.plan_campaign("reference_runner", Settings(device="cpu", oracles=("shadow",), shadow=shadow))
        job = ray_shards.ShardJob(plan, 0, 0, 10, [], None, None, _Inbox())
        monkeypatch.setenv("FUZZRUNNER_DEVICE", "cuda")  # a process of its own (a test's, on the GPU machine)
        ray_shards.ShardActor().run(job)
        # the job's device was the actor's for the job only: it once stayed, and on the GPU machine every later
        # test of the worker drew the CPU with compiled Triton (2026-12-07)
        assert os.environ["FUZZRUNNER_DEVICE"] == "cuda"
        assert order == (["build", "search"] if built else ["search"])
        warned = [m["message"] for m in sent if m["type"] == "warning"]
        assert warned == (["the GPU shadow's dispatch filter is off (RuntimeError: no compiler): every torch op "
                           "goes through its Python mode (the same reports, slower)"] if built else [])
        assert sent[-1]["type"] == "done", sent[-1]
