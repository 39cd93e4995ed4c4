"""Issue 47, the process half: what a case's own threads and processes do after it returned.

Each test drives the real engine (``Hub``), the real command line (``fuzzrunner.cli.main``), or
``python -m fuzzrunner`` where the process's own exit or a signal must be seen, on the targets of
hostile_targets.py, loaded as a user's FILE.py:OBJ. Nothing waits by sleeping: a thread acts when the
next case starts (or after a bounded wait), a signal is sent by the command itself at a set point
(``HOSTILE_SIGNAL_AT``), and a process's end is polled for with a deadline.
"""

import os
import time
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.cli import main
from fuzzrunner.engine import Hub, WorkerSpec
from fuzzrunner.report import load_report

TARGETS = str(Path(__file__).with_name("hostile_targets.py"))


def spec(name: str) -> str:
    return f"{TARGETS}:{name}"


def _line(text: str) -> int:
    return next(i for i, line in enumerate(Path(TARGETS).read_text().splitlines(), 1) if text in line)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead: only its parent's wait is missing
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def until(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def threaded(n: int, do: str = "exit") -> Case:
    """A case whose op starts the thread (n >= 0) that does ``do`` once the next case starts, or 3 s after (a
    loaded machine may take longer than the default half second between two cases); n < 0: no thread."""
    return Case("threaded", {}, ({"op": "x", "n": n, "do": do, "wait": 3.0},))


# -- 3. what a case's threads do after it returned is that case's ----------------------------------------

@pytest.fixture(scope="module")
def thread_hub():
    with Hub(WorkerSpec(spec("THREADED")), timeout_s=60.0) as hub:
        yield hub


def test_a_death_by_an_earlier_cases_thread_names_that_case_as_suspect_in_plain_words(thread_hub):
    hub = thread_hub
    assert hub.run(threaded(1)).violations == []
    result = hub.run(threaded(-1))  # its start is when case 1's thread ends the worker
    assert result.crashed
    [suspect] = result.suspects
    assert suspect.case == threaded(1) and suspect.threads == ["hostile-later"]
    [v] = result.violations
    assert v.message.startswith("the worker died with exit status 7 before the case's first op"), v.message
    assert "@@" not in v.message and "in before" not in v.message  # item 15: no markers, plain grammar


@pytest.mark.parametrize("do,how", [("exit", "exit status 7"), ("kill", "SIGKILL"), ("segv", "SIGSEGV")])
def test_a_rerun_that_waits_for_the_cases_threads_dies_of_them_in_its_own_run(thread_hub, do, how):
    result = thread_hub.run(threaded(1, do), linger_s=5.0, fresh=True)
    assert result.crashed and not result.suspects
    [v] = result.violations
    assert v.details["exit"] == how and v.details["threads"] == ["hostile-later"]
    assert "after the case returned (last op 0, x), while waiting for the thread it started ('hostile-later')" \
        in v.message


def test_a_worker_found_dead_between_cases_says_how_and_whose_it_may_be(thread_hub):
    hub = thread_hub
    assert hub.run(threaded(1)).violations == []
    until(lambda: hub.worker.proc.poll() is not None)  # no next case: the thread ends it after 3 s
    result = hub.run(threaded(-1))
    assert result.violations == [] and result.died_before is not None
    assert result.died_before.how == "exit status 7" and result.died_before.suspects[0].case == threaded(1)


def test_an_exception_on_a_thread_is_a_crash_of_its_case_during_it_or_after_it_returned(thread_hub):
    hub = thread_hub
    during = hub.run(threaded(2, "raise"), linger_s=5.0, fresh=True)  # raised while the case waits for it
    [v] = during.violations
    assert (v.tool, v.kind, v.kernel) == ("python", "crash", "ValueError") and v.details["thread"] == "hostile-later"
    assert v.location.endswith(f"hostile_targets.py:{_line('raised on a thread the case started')}")
    assert "on thread 'hostile-later'" in v.message
    assert hub.run(threaded(3, "raise")).violations == []
    late: list = []  # case 3's thread raises as the next case starts; the hub reads it during that case or a later one
    for n in range(-1, -50, -1):
        result = hub.run(threaded(n))
        assert result.violations == []
        late += result.late
        if late:
            break
    [earlier] = late
    assert earlier.case == threaded(3, "raise") and earlier.violations[0].details["after_case"] is True


def test_a_campaign_whose_every_case_ends_its_worker_later_finds_it_once_and_calls_nothing_flaky(tmp_path, capsys):
    """Each case's thread ends the worker as the next case starts: every death was blamed on the next case,
    whose rerun did not die, so the campaign called them all flaky (one id listed several times) and passed."""
    code = main(["fuzz", "--target", spec("THREADED"), "--max-examples", "3", "--seed", "1", "-q", "--no-shrink",
                 "--corpus", str(tmp_path / "corpus"), "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 1, out
    [run] = load_report(tmp_path / "r.json")["runs"]
    [f] = run["findings"]
    assert "after the case returned" in f["violation"]["message"] and run["flaky"] == []
    assert "flaky" not in out and "@@" not in out


# -- 6. the processes a case leaves behind end with it --------------------------------------------------

@pytest.fixture(scope="module")
def fork_hub(tmp_path_factory):
    pids = tmp_path_factory.mktemp("forks") / "pids"
    pids.touch()
    with Hub(WorkerSpec(spec("FORKER"), env={"HOSTILE_PID_FILE": str(pids)}), timeout_s=60.0) as hub:
        yield hub, pids


def _forked(pids: Path, op: dict) -> Case:
    return Case("forker", {}, ({"op": "x", "n": 0, **op},))


def _last_pid(pids: Path) -> int:
    return int(pids.read_text().split()[-1])


@pytest.mark.parametrize("how", ["fork", "popen", "setsid"])
def test_the_processes_a_case_started_are_ended_when_it_returns(fork_hub, how):
    """``setsid``: the child left the worker's process group, and only the worker, its subreaper, can find it."""
    hub, pids = fork_hub
    assert hub.run(_forked(pids, {"how": how})).violations == []
    assert not alive(_last_pid(pids))


def test_a_worker_that_dies_takes_what_its_case_forked_with_it(fork_hub):
    hub, pids = fork_hub
    result = hub.run(_forked(pids, {"how": "fork", "then": "exit"}))
    assert result.crashed
    until(lambda: not alive(_last_pid(pids)), 10)  # killed with the worker's process group (a signal: at once)


def test_forked_children_are_not_counted_as_the_workers_memory_growth(fork_hub):
    """Each child shares the worker's pages and counted them again: 10 forks of a 330 MB worker read as a leak
    of 1.1 GB and recycled it."""
    hub, pids = fork_hub
    before = hub.recycles
    for _ in range(10):
        hub.run(_forked(pids, {"how": "fork"}))
    assert hub.recycles == before
