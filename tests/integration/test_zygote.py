"""Workers forked by the zygote: a restart skips the imports; the hub falls back when it must."""

import os
import signal
import sys
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.engine import Hub, WorkerSpec
from fuzzrunner.engine.lifeline import alive

CRASHY = str(Path(__file__).with_name("crashy_target.py")) + ":TARGET"

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the zygote needs os.pidfd_open (Linux)")


def _case(*actions):
    return Case("crashy", {}, tuple({"op": a} for a in actions))


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_every_worker_after_a_crash_is_forked_by_the_same_zygote():
    with Hub(WorkerSpec(CRASHY), timeout_s=5.0, standby=False) as hub:
        assert hub.run(_case("ok")).violations == []
        zygote = hub._zygote
        assert zygote is not None and _ppid(hub.worker.proc.pid) == zygote.proc.pid
        for action, where in (("segfault", "SIGSEGV"), ("exit", "exit status 7")):
            r = hub.run(_case(action))
            assert r.crashed and r.violations[0].location == where  # the status comes from the zygote
        assert hub.run(_case("ok")).violations == []
        assert hub._zygote is zygote and _ppid(hub.worker.proc.pid) == zygote.proc.pid
        assert hub.restarts == 2 and hub.zygote_error is None
        pid = zygote.proc.pid
    assert not alive(pid) and not os.path.exists(zygote.directory)


def test_a_target_the_zygote_cannot_load_gets_workers_started_directly(tmp_path):
    target = tmp_path / "picky.py"
    target.write_text(f"import os, sys\nsys.path.insert(0, {str(Path(CRASHY.split(':')[0]).parent)!r})\n"
                      "if os.environ.get('FUZZRUNNER_ZYGOTE_SOCKET'):\n"
                      "    raise ImportError('not in a zygote')\n"
                      "from crashy_target import TARGET\n")
    with Hub(WorkerSpec(f"{target}:TARGET"), timeout_s=5.0) as hub:
        assert hub.run(_case("ok")).violations == []
        assert "not in a zygote" in hub.zygote_error and hub._zygote is None
        assert _ppid(hub.worker.proc.pid) == os.getpid()


def test_a_killed_zygote_costs_no_finding_and_workers_are_then_started_directly():
    with Hub(WorkerSpec(CRASHY), timeout_s=5.0, standby=False) as hub:
        assert hub.run(_case("ok")).violations == []
        os.kill(hub._zygote.proc.pid, signal.SIGKILL)  # its worker dies with it (parent-death signal)
        hub.worker.proc.wait(timeout=30)
        r = hub.run(_case("ok"))
        assert r.violations == [] and not r.crashed
        assert hub.zygote_error == "the zygote died" and _ppid(hub.worker.proc.pid) == os.getpid()


def test_a_sanitized_hub_never_forks():
    spec = WorkerSpec(CRASHY, wrapper=[sys.executable, "-c", "pass"])
    assert Hub(spec)._use_zygote is False
