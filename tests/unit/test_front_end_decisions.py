"""What the CLI used to decide itself is the library's (issue 45 item 3: the CLI is parse, render, exit): each
decision is callable without the command line, and says the same as the CLI did."""

import math
import os

import pytest

from fuzzrunner.case import Case
from fuzzrunner.check_target import CHILD_TIMEOUT_S, check_timeout
from fuzzrunner.engine.ray_shards import check_cluster
from fuzzrunner.engine.replay import recorded_target, replay_target, replay_timeout
from fuzzrunner.engine.result import CampaignResult, StopReason
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.finding import Finding
from fuzzrunner.nightly import report_files
from fuzzrunner.report import load_previous
from fuzzrunner.repro import export_output, export_path
from fuzzrunner.settings import Settings
from fuzzrunner.target import BUILTIN
from fuzzrunner.violation import Violation

CASE = Case("reference_runner", {}, ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))


def _finding(spec="", timeout=5.0) -> Finding:
    v = Violation("shadow", "uninitialized-read", "k", "x.py:1", "ids", "ids[0]: never written", {"op_index": 0})
    f = Finding.of(v, [], CASE, target_spec=spec)
    f.case_timeout_s = timeout
    return f


def test_which_target_and_timeout_a_file_replays_under(tmp_path):
    mine = _finding("/abs/my_target.py:T")
    assert recorded_target(CASE, mine) == "/abs/my_target.py:T" and recorded_target(CASE, None) == "reference_runner"
    assert replay_target(CASE, mine) == "/abs/my_target.py:T"
    assert replay_target(CASE, None, "t.py:T") == os.path.abspath("t.py") + ":T"  # a file spec made absolute
    stranger = Case("not_a_builtin", {}, ())
    with pytest.raises(InvalidArgument, match=r"it is a case of target 'not_a_builtin', which is not built in: name "
                                              r"yours with --target path/to/file.py:OBJ"):
        replay_target(stranger, None)
    assert replay_target(stranger, None, "reference_runner") == "reference_runner"
    assert (replay_timeout(3.0, mine), replay_timeout(None, mine), replay_timeout(None, None)) == (3.0, 5.0, None)


def test_the_previous_report_and_the_nightlys_folder():
    assert load_previous(None) is None
    with pytest.raises(InvalidArgument, match="--previous: an empty path names no report"):
        load_previous("")
    names = {p.name for p in report_files("reports")}
    assert {"report.json", "junit.xml", "report.html"} <= names
    assert all(f"{t}.json" in names and f"{t}.xml" in names for t in BUILTIN)


def test_check_targets_timeout_and_the_cluster_flags():
    assert check_timeout(None) == CHILD_TIMEOUT_S and check_timeout(30.0) == 30.0
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(InvalidArgument, match="must be a positive number of seconds"):
            check_timeout(bad)
    with pytest.raises(InvalidArgument, match="add --ray ADDRESS"):
        check_cluster(None, "redis://h:1/0")
    check_cluster(None, None)  # a local campaign: nothing to check


def test_where_export_writes(tmp_path):
    with pytest.raises(InvalidArgument, match="-o: an empty path names no file"):
        export_output("", ["a.json"])
    with pytest.raises(InvalidArgument, match="2 finding files were given and -o 'one.py' names one script"):
        export_output("one.py", ["a.json", "b.json"])
    out = export_output(str(tmp_path / "repros"), ["a.json", "b.json"])
    assert out.is_dir()  # made, for one script each
    f = _finding()
    first = export_path(out, f, set(), [])
    assert first == out / f"repro_{f.id}.py" and export_path(out, f, {first}, []) != first  # never over the first
    finding_file = tmp_path / "f.json"
    finding_file.write_text("{}")
    with pytest.raises(InvalidArgument, match="it is the finding file"):
        export_path(finding_file, f, set(), [str(finding_file)])


def test_a_campaign_stopped_before_it_began():
    r = CampaignResult.interrupted_at_start("t.py:T", Settings(seed=None), ["planted"])
    assert (r.stop_reason, r.examples, r.faults, r.seed) == (StopReason.INTERRUPTED, 0, ("planted",), None)
