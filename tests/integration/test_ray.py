"""Campaigns on a Ray cluster: a 2-node local cluster (``ray.cluster_utils.Cluster``) on the CPU.

One module-scoped cluster serves every test (starting one costs ~15 s on 2 cores): a head node
and node ``b``, one CPU each, so the two shards of a campaign run one on each node. Node ``b``'s
raylet has ``FUZZ_NODE=b``: with the ``by_node`` fault, its shard finds a bug (``KeyError``) the
head's shard cannot. Campaigns go through the same entry points as a user's (``cli.main`` or
``fuzzrunner.fuzz``), so each connects to the cluster and disconnects at its end.
"""

import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the Ray cluster tests need Ray: pip install 'fuzzrunner[ray]'")

from fuzzrunner import cli  # noqa: E402
from fuzzrunner.api import fuzz  # noqa: E402
from fuzzrunner.corpus import Corpus  # noqa: E402
from fuzzrunner.engine.events import FindingEvent, ProgressEvent  # noqa: E402
from fuzzrunner.engine.result import StopReason  # noqa: E402
from fuzzrunner.finding import Finding  # noqa: E402
from fuzzrunner.report.json_report import load_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TARGET = str(Path(__file__).with_name("ray_target.py")) + ":TARGET"
FAST = ["--device", "cpu", "--case-timeout", "30", "--seed", "1", "--max-ops", "4"]
# One xdist worker runs them all, on one cluster (scripts/test.sh: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("ray_cluster")


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(ROOT)  # the nodes' processes import this checkout from anywhere
    # A lost node is noticed in ~2 s instead of ~30 s.
    system = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_timeout_ms": 500}
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                      "_system_config": system})
    try:
        c.add_node(num_cpus=1, env_vars={"FUZZ_NODE": "b"})
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _node_b(c):
    return next(n for n in c.worker_nodes if n is not c.head_node)


def _files(corpus: Path) -> list[Path]:
    return sorted((corpus / "expected" / "ray_toy").glob("*.json")) + sorted((corpus / "findings").rglob("*.json"))


def test_a_planted_fault_is_found_once_by_two_shards_on_two_nodes_and_exits_1(cluster, tmp_path, capsys):
    report = tmp_path / "r.json"
    code = cli.main(["fuzz", "--target", TARGET, "--fault", "planted", "--ray", cluster.address, "--workers", "2",
                     "--max-examples", "20", "--corpus", str(tmp_path / "c"), "--report", str(report), *FAST])
    assert code == 1, capsys.readouterr()
    [data] = load_report(report)["runs"]  # the one run of the report (schema 2), its shape checked
    assert data["cluster"]["nodes"] == 2 and data["cluster"]["ray"] == cluster.address
    assert data["cluster"]["example_database"] == "driver" and data["cluster"]["ray_version"] == ray.__version__
    [finding] = data["findings"]
    assert finding["violation"]["kernel"] == "ValueError"
    [path] = _files(tmp_path / "c")  # one file: the driver wrote it once, not once per shard
    on_disk = Finding.load(path)
    assert on_disk.id == finding["id"] and on_disk.target_spec == TARGET  # the spec the user gave
    assert on_disk.minimized and [op["n"] for op in on_disk.case.ops] == [10]
    # the shards' Hypothesis examples went through the database the driver serves, into the corpus
    assert list((tmp_path / "c" / "hypothesis" / "ray_toy").rglob("*"))


def test_no_fault_exits_0_and_writes_no_finding(cluster, tmp_path, capsys):
    code = cli.main(["fuzz", "--target", TARGET, "--ray", cluster.address, "--workers", "2",
                     "--max-examples", "10", "--corpus", str(tmp_path), *FAST])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 findings" in out and "10 generated" in out  # both shards' cases counted once
    assert f"on Ray {ray.__version__} ({cluster.address}): 2 nodes" in out
    assert _files(tmp_path) == []


def test_the_driver_serves_one_example_database_to_shards_on_both_nodes(cluster, tmp_path):
    from hypothesis.database import DirectoryBasedExampleDatabase

    from fuzzrunner.engine.ray_shards import ray_session
    from fuzzrunner.engine.shared_db import ServedDatabase, serve
    with ray_session(cluster.address) as r:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        here = NodeAffinitySchedulingStrategy(node_id=r.get_runtime_context().get_node_id(), soft=False)
        server = serve(str(tmp_path / "db"), here)

        @r.remote(num_cpus=1)
        def shard(action: str, value: bytes):
            db = ServedDatabase(server)
            if action == "save":
                db.save(b"k", value)
            return os.environ.get("FUZZ_NODE"), sorted(db.fetch(b"k"))

        on_b = NodeAffinitySchedulingStrategy(node_id=_node_b(cluster).node_id, soft=False)
        assert r.get(shard.options(scheduling_strategy=on_b).remote("save", b"from-b")) == ("b", [b"from-b"])
        node, seen = r.get(shard.options(scheduling_strategy=here).remote("fetch", b""))
        assert node is None and seen == [b"from-b"]  # saved on node b, fetched on the head
        r.kill(server)
    assert list(DirectoryBasedExampleDatabase(str(tmp_path / "db")).fetch(b"k")) == [b"from-b"]


def test_db_reaches_every_shard_which_opens_the_redis_database_itself(cluster, tmp_path, capsys):
    # Nothing listens on port 1: shards that open the --db URL fail to connect, and say so (exit 2).
    code = cli.main(["fuzz", "--target", TARGET, "--ray", cluster.address, "--workers", "2", "--db",
                     "redis://127.0.0.1:1/0", "--max-examples", "4", "--corpus", str(tmp_path), *FAST])
    out = capsys.readouterr().out
    assert code == 2
    assert out.count("ConnectionError") >= 2 and "shard 0 failed" in out and "shard 1 failed" in out, out
    assert not (tmp_path / "hypothesis").exists()  # nothing went to the corpus' own database


def test_losing_a_node_mid_campaign_loses_no_finding_and_the_campaign_ends_normally(cluster, tmp_path):
    node_b, events = _node_b(cluster), []

    def on_event(e):
        events.append(e)
        if isinstance(e, FindingEvent) and e.finding.violation.kernel == "KeyError" and node_b in cluster.worker_nodes:
            cluster.remove_node(node_b, allow_graceful=False)  # the node is gone, its shard with it

    try:
        r = fuzz(TARGET, faults=("planted", "by_node", "slow"), corpus=tmp_path, ray=cluster.address, workers=2,
                 max_examples=16, seed=2, device="cpu", case_timeout_s=30, budget_s=240, on_event=on_event)
    finally:
        if node_b not in cluster.worker_nodes:
            cluster.add_node(num_cpus=1, env_vars={"FUZZ_NODE": "b"})
    assert node_b not in cluster.worker_nodes, ([f.violation.kernel for f in r.findings], r.warnings, r.errors, [e for e in events if not isinstance(e, ProgressEvent)])  # removed mid-campaign
    kinds = sorted(f.violation.kernel for f in r.findings)
    assert kinds == ["KeyError", "ValueError"]  # KeyError: only node b's shard could find it
    assert sorted(Finding.load(p).violation.kernel for p in _files(tmp_path)) == ["KeyError", "ValueError"]
    deaths = [w for w in r.warnings if "died" in w]
    assert len(deaths) == 1, r.warnings
    death = deaths[0]
    assert "resumed with seed" in death
    assert r.errors == [] and r.stop_reason is StopReason.MAX_EXAMPLES
    assert r.generated >= 16  # the resumed shard ran what its dead run had left
    assert Corpus(tmp_path, faults=r.faults).findings_dir.name == "expected"


@pytest.mark.slow  # ~20 s more; the tests above are the CI set
def test_an_interrupted_campaign_stops_its_shards_and_keeps_what_they_sent(cluster, tmp_path):
    def on_event(e):
        if isinstance(e, FindingEvent):
            raise KeyboardInterrupt  # as SIGINT/SIGTERM reach the driver (cli: sigterm_as_interrupt)

    r = fuzz(TARGET, faults=("planted", "slow"), corpus=tmp_path, ray=cluster.address, workers=2,
             max_examples=2000, seed=3, device="cpu", case_timeout_s=30, on_event=on_event)
    assert r.stop_reason is StopReason.INTERRUPTED and 0 < r.generated <= r.examples < 2000  # counted though cut short
    [f] = r.findings
    assert [Finding.load(p).id for p in _files(tmp_path)] == [f.id]
