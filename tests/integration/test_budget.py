"""The deadline reaches the phases that run in other processes: a replay in a worker (CPU triage) stops at it,
a shard process ends as soon as its result is sent, and the command ends once its work is done. Mechanism
only: the hang guards below are not timings (benchmarks/budget_overrun.py measures budget against wall time)."""

import multiprocessing
import os
import subprocess
import sys
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
    sharding.end_shard(queue)


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


HANGS_AT_EXIT = '''
import atexit, threading, time
from hypothesis import strategies as st
from fuzzrunner import Case, Target

atexit.register(lambda: open({mark!r}, "w").write("atexit ran"))
threading.Thread(target=lambda: time.sleep(3600), daemon=False).start()  # a target's own non-daemon thread

def run(case, ctx):
    pass

TARGET = Target("hangs_at_exit", "a target whose import leaves a non-daemon thread", lambda faults=(), *, max_ops=3:
                st.builds(lambda n: Case("hangs_at_exit", {{}}, ({{"op": "x", "n": n}},)), st.integers(0, 3)), run)
'''


def test_the_command_ends_with_its_exit_code_once_its_work_is_done(tmp_path):
    """A target's non-daemon thread in the campaign process does not hold the command after its report (its
    budget, and the exit code a CI job reads); its exit handlers run (a handler that blocks is cut after
    EXIT_GRACE_S: tests/integration/test_process_hardening.py)."""
    mark = tmp_path / "atexit.txt"
    (tmp_path / "hangs_at_exit.py").write_text(HANGS_AT_EXIT.format(mark=str(mark)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]))
    p = subprocess.run([sys.executable, "-m", "fuzzrunner", "fuzz", "--target", "hangs_at_exit:TARGET", "--device",
                        "cpu", "--max-examples", "2", "--seed", "1", "--corpus", str(tmp_path / "c"), "--report",
                        str(tmp_path / "r.json"), "-q"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "r.json").exists() and "wrote" in p.stdout  # the work was done, the output flushed
    assert mark.read_text() == "atexit ran"  # the exit handlers ran (for at most EXIT_GRACE_S), the thread was not waited for


SLOW_START = '''
import os, time
from hypothesis import strategies as st
from fuzzrunner import Case, Target

if os.environ.get("FUZZRUNNER_HUB_SOCKET") or os.environ.get("FUZZRUNNER_ZYGOTE_SOCKET"):
    time.sleep(600)  # a worker's set-up that takes longer than the campaign has left (a GPU engine's imports)

def run(case, ctx):
    pass

TARGET = Target("slow_start", "its workers take minutes to start", lambda faults=(), *, max_ops=3:
                st.builds(lambda n: Case("slow_start", {{}}, ({{"op": "x", "n": n}},)), st.integers(0, 3)), run)
'''


@pytest.mark.parametrize("standby", [False, True], ids=["started-for-the-case", "a-spare"])
def test_a_worker_still_starting_at_the_deadline_is_a_budget_cut_not_a_wait(tmp_path, no_hang, standby):
    """The campaign's deadline reaches a worker's start-up: a GPU engine's imports took 37 s of a 45 s budget on
    an H100, and the hub waited them out (up to its 300 s start-up timeout) before cutting the case; the
    campaign overran its budget by 17%. Now the start-up ends at the deadline: a budget cut, no finding."""
    from fuzzrunner.engine.hub import Hub, WorkerSpec
    (tmp_path / "slow_start.py").write_text(SLOW_START.format())
    spec = f"{tmp_path / 'slow_start.py'}:TARGET"
    case = Case("slow_start", {}, ({"op": "x", "n": 0},))
    with no_hang(120), Hub(WorkerSpec(spec), standby=standby) as hub:
        result = hub.run(case, cut_at=time.monotonic() + 3)
    assert result.budget_cut and result.violations == [] and not result.crashed


SLOW_SHARD_LOAD = '''
import multiprocessing, os, time
from hypothesis import strategies as st
from fuzzrunner import Case, Target

if multiprocessing.parent_process() is not None and not (os.environ.get("FUZZRUNNER_HUB_SOCKET")
                                                         or os.environ.get("FUZZRUNNER_ZYGOTE_SOCKET")):
    time.sleep(600)  # a shard process loading the target: an engine's imports on a busy machine (175 s seen)

def run(case, ctx):
    pass

TARGET = Target("slow_load", "its shard processes take minutes to load it", lambda faults=(), *, max_ops=3:
                st.builds(lambda n: Case("slow_load", {{}}, ({{"op": "x", "n": n}},)), st.integers(0, 3)), run)
'''


def test_a_shard_still_loading_the_target_at_the_deadline_is_a_budget_stop_not_a_wait(tmp_path, no_hang):
    """Two shards of vllm_lora on a busy 2-core machine each spent 175 s importing vLLM; the campaign process
    waited for them, and a 120 s campaign took 285 s. Now a shard whose search has not begun by the search's
    end is stopped: the campaign ends at its budget with a budget stop, and says why it ran no case."""
    import fuzzrunner
    from fuzzrunner.engine.result import StopReason
    (tmp_path / "slow_load.py").write_text(SLOW_SHARD_LOAD.format())
    with no_hang(150):
        result = fuzzrunner.fuzz(f"{tmp_path / 'slow_load.py'}:TARGET", workers=2, budget_s=20, max_examples=10_000,
                                 device="cpu", corpus=str(tmp_path / "corpus"))
    assert result.stop_reason is StopReason.BUDGET and result.examples == 0
    assert any("had not begun its search" in w for w in result.warnings), result.warnings
    [error] = result.errors  # no case ran: never a silent pass
    assert "only 0 valid case(s) ran" in error and "budget ended first" in error
