"""Where a campaign's time goes (engine/stages.py): recorded by the engine, in the result, the JSON report and
``fuzzrunner fuzz --stage-times``; a shard's stages add up to at most its wall time (nothing counted twice)."""

import json
import re

from fuzzrunner import names
from fuzzrunner.cli import main
from fuzzrunner.engine.stages import CAMPAIGN
from fuzzrunner.settings import Settings

NAPPING = '''
import time
from hypothesis import strategies as st
from fuzzrunner.case import Case
from fuzzrunner.target import Target

def cases(faults=(), *, max_ops=5):
    return st.integers(0, 10**6).map(lambda n: Case("napping", {"n": n}, ({"op": "nap"},), tuple(faults)))

def run(case, ctx):
    with ctx.op(0, case.ops[0]):
        time.sleep(0.05)

TARGET = Target("napping", "each case naps 0.05 s in its worker", cases, run)
'''


def test_the_report_and_the_command_say_where_the_time_went(tmp_path, capsys):
    (tmp_path / "napping_target.py").write_text(NAPPING)
    report = tmp_path / "r.json"
    code = main(["fuzz", "--target", f"{tmp_path / 'napping_target.py'}:TARGET", "--max-examples", "6", "--seed",
                 "1", "--device", "cpu", "--corpus", str(tmp_path / "c"), "-q", "--stage-times",
                 "--report", str(report)])
    assert code == 0
    [run] = json.loads(report.read_text())["runs"]
    stages = run["stage_s"]
    oracles = names.effective_oracles(None, "cpu", "none")
    assert {"start-up", "generate", "dispatch", "run", *(f"oracle:{o}" for o in oracles)} <= set(stages)
    assert stages["run"] >= 0.05 * run["examples"]  # each case's nap is in its run
    shard = sum(v for k, v in stages.items() if k not in CAMPAIGN)  # "other" included: the shard's whole time
    assert abs(shard - run["duration_s"]) < 0.01  # exclusive: no second counted twice, none lost
    assert stages["set-up"] > 0  # the command's start to the shard's: imports, the target loaded, the plan
    # the table's rows are all in the report (a new user's trial: report, other and the wall were not)
    assert {"report", "other"} <= set(stages)
    assert abs(run["wall_s"] - (run["duration_s"] + stages["set-up"] + stages["report"])) < 0.01
    out = capsys.readouterr().out
    table = out[out.index("where the time went (napping, cpu):"):].splitlines()
    assert table[1].split() == ["stage", "s", "%"] and table[-1].startswith("wall ")
    assert {"run", "report", "other", "total"} <= {line.split()[0] for line in table[2:-1]}
    # the summary's time is the table's campaign part, both labelled so
    summary = next(line for line in out.splitlines() if line.startswith("napping: "))
    said = re.search(r" in ([\d.]+) s of campaign \(\+ ([\d.]+) s set-up\)", summary)
    assert said and abs(float(said[1]) - run["duration_s"]) < 0.06 and abs(float(said[2]) - stages["set-up"]) < 0.06
    in_table = re.search(r"campaign ([\d.]+) s \(the summary's time\)", table[-1])
    assert in_table and abs(float(in_table[1]) - run["duration_s"]) < 0.006, table[-1]


def test_shard_processes_add_their_stages_and_their_start(tmp_path):
    from fuzzrunner.engine import run_campaign
    (tmp_path / "napping_target.py").write_text(NAPPING)
    r = run_campaign(f"{tmp_path / 'napping_target.py'}:TARGET",
                     Settings(max_examples=6, seed=1, device="cpu", workers=2), corpus_dir=tmp_path / "c")
    assert r.stage_s["run"] >= 0.05 * r.examples and r.stage_s["shard-start"] > 0
    assert sum(v for k, v in r.stage_s.items() if k not in CAMPAIGN) <= 2 * r.duration_s + 0.01  # twice the wall


def test_the_merger_sums_the_shards_stages():
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.engine.sharding import Merger
    merged = CampaignResult("t", Settings(), 0, ())
    merger = Merger(2, None, merged)
    for s in ({"run": 1.5, "oracle:shadow": 0.5}, {"run": 2.25}):
        r = CampaignResult("t", Settings(), 0, ())
        r.stage_s = dict(s)
        merger.done(r)
    assert merged.stage_s == {"run": 3.75, "oracle:shadow": 0.5}
    assert CampaignResult.from_dict(merged.to_dict()).stage_s == merged.stage_s  # across processes and Ray
