"""The deadline reaches the phases that run in other processes: a replay in a worker (CPU triage) stops at it,
and a shard process ends as soon as its result is sent. Mechanism
only: the hang guards below are not timings (benchmarks/budget_overrun.py measures budget against wall time)."""

import multiprocessing
import time
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.engine import sharding
from fuzzrunner.engine import triage as triage_module
from fuzzrunner.engine.replay import OutOfTime, Replayer
from fuzzrunner.finding import Finding
from fuzzrunner.settings import Settings
from fuzzrunner.violation import Violation

ROOT = Path(__file__).resolve().parents[2]
SLEEPY = str(ROOT / "tests" / "integration" / "hostile_targets.py") + ":SLEEPY"


def sleepy_case() -> Case:
    return Case("sleepy", {}, ({"op": "sleepy", "n": 1},))


def test_a_replay_still_running_at_its_deadline_is_stopped_and_gives_no_verdict(monkeypatch, no_hang):
    monkeypatch.setenv("HOSTILE_SLEEP_S", "600")  # the worker inherits it: the case would take 10 minutes
    with no_hang(240), Replayer(Settings(device="cpu", case_timeout_s=900)) as replayer:
        with pytest.raises(OutOfTime):
            replayer.run(sleepy_case(), SLEEPY, cut_at=time.monotonic() + 2)


def test_cpu_triage_stops_at_its_end_and_names_the_findings_it_could_not_reach(monkeypatch, no_hang):
    monkeypatch.setenv("HOSTILE_SLEEP_S", "600")  # each replay would take 10 minutes
    v = Violation("worker", "crash", "sleepy", "SIGABRT", "", "died", {"op_index": 0})
    findings = [Finding.of(v, [], sleepy_case(), target_spec=SLEEPY) for _ in range(2)]
    with no_hang(240):
        unreached = triage_module.triage_on_cpu(findings, SLEEPY, Settings(case_timeout_s=900), end=time.time() + 3)
    assert unreached == 2
    assert [f.triage["reason"] for f in findings] == [triage_module.OUT_OF_TIME] * 2


def _shard_like(queue, mark: str) -> None:
    import atexit
    atexit.register(lambda: open(mark, "w").write("the interpreter's exit ran"))
    queue.put("result")
    sharding._exit_now(queue)


def test_a_shard_process_ends_as_soon_as_its_result_is_sent(tmp_path):
    """The campaign waits for its shard processes to end; each ends once its result is in the pipe, without
    the interpreter's exit after torch's import (seconds on a busy machine)."""
    ctx = multiprocessing.get_context("spawn")
    queue, mark = ctx.Queue(), tmp_path / "exit.txt"
    p = ctx.Process(target=_shard_like, args=(queue, str(mark)))
    p.start()
    assert queue.get(timeout=120) == "result"
    p.join(timeout=120)
    assert p.exitcode == 0 and not mark.exists()
