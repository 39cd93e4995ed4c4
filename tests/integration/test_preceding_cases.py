"""A finding that depended on what its worker's earlier cases left keeps them (``Finding.preceding``), says so when
replayed alone, and replays with them (``fuzzrunner replay --preceding``): the GPU NaN 2f9d344978cd of
sglang_engine could not be replayed, its worker's earlier cases were not recorded."""

import json
import os
import subprocess
import sys
from pathlib import Path

from fuzzrunner.case import Case
from fuzzrunner.engine.finding_book import FindingBook
from fuzzrunner.engine.hub import HISTORY_CAP, Hub
from fuzzrunner.engine.worker_spec import WorkerSpec
from fuzzrunner.finding import Finding

ROOT = Path(__file__).resolve().parents[2]
STATEFUL = str(Path(__file__).with_name("stateful_target.py")) + ":TARGET"


def _case(op):
    return Case("stateful", {}, ({"op": op},))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "fuzzrunner", *args], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)


def test_a_finding_keeps_the_cases_its_worker_ran_before_it_and_replays_with_them(tmp_path):
    with Hub(WorkerSpec(STATEFUL), timeout_s=30.0, standby=False) as hub:
        assert hub.run(_case("noop")).violations == [] and hub.preceding == ((), 0)
        hub.run(_case("arm"))
        vs = hub.run(_case("use")).violations
        assert [v.kind for v in vs] == ["state-violation"]
        assert hub.preceding == ((_case("noop"), _case("arm")), 0) and hub.case == _case("use")
        book = FindingBook(None, "stateful", STATEFUL)
        [(finding, new)] = book.record(vs, hub.case, 3, 1.0, hub.preceding)
        assert new and hub.run(_case("noop"), fresh=True).violations == [] and hub.preceding == ((), 0)
    assert finding.preceding == {"of": _case("use").to_dict(), "cases": [_case("noop").to_dict(),
                                                                         _case("arm").to_dict()], "dropped": 0}
    path = tmp_path / "finding.json"
    path.write_text(json.dumps(finding.to_dict()))
    assert Finding.load(path).preceding == finding.preceding
    alone = _cli("replay", str(path))
    assert alone.returncode == 0, alone.stderr
    assert "NOT REPRODUCED" in alone.stdout and "found after 2 earlier case(s) of its worker" in alone.stdout \
        and "--preceding" in alone.stdout
    again = _cli("replay", "--preceding", str(path))
    assert again.returncode == 1, again.stdout + again.stderr
    assert "REPRODUCED" in again.stdout and "ran the 2 case(s) its worker ran before it first" in again.stderr


def test_the_history_of_a_worker_is_its_own_and_capped(tmp_path):
    with Hub(WorkerSpec(STATEFUL), timeout_s=30.0, standby=False) as hub:
        for _ in range(HISTORY_CAP + 3):
            hub.run(_case("noop"))
        earlier, dropped = hub.preceding
        assert (len(earlier), dropped) == (HISTORY_CAP, 2)
        hub.run(_case("use"), fresh=True)  # a new worker: nothing ran before it there
        assert hub.preceding == ((), 0)


def test_a_campaigns_finding_keeps_its_workers_earlier_cases(tmp_path):
    from fuzzrunner.engine.campaign import run_campaign
    from fuzzrunner.settings import Settings
    r = run_campaign(STATEFUL, Settings(max_examples=30, seed=1, case_timeout_s=30.0, device="cpu"),
                     corpus_dir=tmp_path)
    [f] = r.findings
    assert f.case == _case("use") and f.preceding is not None
    assert {"op": "arm"} in [op for c in f.preceding["cases"] for op in c["ops"]]
    assert Finding.load(next((tmp_path / "findings" / "stateful").glob("*.json"))).preceding == f.preceding
