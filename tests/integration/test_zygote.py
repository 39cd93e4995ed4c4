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


def test_a_hub_takes_the_zygote_started_ahead_for_its_spec():
    from fuzzrunner.engine import hub as hub_module
    spec = WorkerSpec(CRASHY)
    hub_module.prestart_zygote(spec)
    ((_, early),) = hub_module._EARLY
    assert early.sock is None  # started, not waited for
    try:
        with Hub(spec, timeout_s=5.0, standby=False) as hub:
            assert hub.run(_case("ok")).violations == []
            assert hub._zygote is early and not hub_module._EARLY
            assert _ppid(hub.worker.proc.pid) == early.proc.pid
    finally:
        hub_module.drop_prestarted()
    assert not alive(early.proc.pid)


def test_a_zygote_started_ahead_for_another_spec_is_not_taken_and_is_closed():
    from fuzzrunner.engine import hub as hub_module
    hub_module.prestart_zygote(WorkerSpec(CRASHY, env={"FUZZRUNNER_TEST_OTHER": "1"}))
    ((_, early),) = hub_module._EARLY
    try:
        with Hub(WorkerSpec(CRASHY), timeout_s=5.0, standby=False) as hub:
            assert hub.run(_case("ok")).violations == []
            assert hub._zygote is not early and [z for _, z in hub_module._EARLY] == [early]
    finally:
        hub_module.drop_prestarted()
    early.proc.wait(timeout=30)
    assert not hub_module._EARLY and not os.path.exists(early.directory)


def test_a_zygote_started_ahead_is_taken_when_the_target_sets_variables_as_it_is_imported(tmp_path, monkeypatch):
    """vLLM's and SGLang's modules set environment variables when imported: the shard imports the target
    after the zygote started, so its environment differs by those; the zygote imports the target too (and
    sets them in its own), and is taken."""
    target = tmp_path / "setter.py"
    target.write_text(f"import os, sys\nsys.path.insert(0, {str(Path(CRASHY.split(':')[0]).parent)!r})\n"
                      "os.environ['FUZZRUNNER_TEST_SET_AT_IMPORT'] = '1'\n"
                      "from crashy_target import TARGET\n")
    monkeypatch.delenv("FUZZRUNNER_TEST_SET_AT_IMPORT", raising=False)
    from fuzzrunner.engine import hub as hub_module
    from fuzzrunner.target import load_target
    spec = WorkerSpec(f"{target}:TARGET")
    hub_module.prestart_zygote(spec)
    ((_, early),) = hub_module._EARLY
    load_target(spec.target)  # as the shard does, after the prestart
    assert os.environ["FUZZRUNNER_TEST_SET_AT_IMPORT"] == "1"
    try:
        with Hub(spec, timeout_s=5.0, standby=False) as hub:
            assert hub.run(_case("ok")).violations == []
            assert hub._zygote is early and not hub_module._EARLY
    finally:
        hub_module.drop_prestarted()


def test_a_zygote_started_ahead_that_cannot_serve_costs_only_the_fallback(tmp_path):
    target = tmp_path / "picky.py"
    target.write_text(f"import os, sys\nsys.path.insert(0, {str(Path(CRASHY.split(':')[0]).parent)!r})\n"
                      "if os.environ.get('FUZZRUNNER_ZYGOTE_SOCKET'):\n"
                      "    raise ImportError('not in a zygote')\n"
                      "from crashy_target import TARGET\n")
    from fuzzrunner.engine import hub as hub_module
    spec = WorkerSpec(f"{target}:TARGET")
    hub_module.prestart_zygote(spec)
    try:
        with Hub(spec, timeout_s=5.0, standby=False) as hub:
            assert hub.run(_case("ok")).violations == []
            assert "not in a zygote" in hub.zygote_error and hub._zygote is None
            assert _ppid(hub.worker.proc.pid) == os.getpid()
    finally:
        hub_module.drop_prestarted()


def test_a_shard_process_forks_its_workers_from_the_zygote_it_started_first(tmp_path):
    """The real path (``sharding._shard_process``, in a fresh interpreter, the reference runner loaded
    there): one zygote is started, before the shard imports torch, and the shard's hub takes it."""
    import subprocess
    import textwrap
    root = str(Path(__file__).resolve().parents[2])
    prog = tmp_path / "shard.py"
    prog.write_text(textwrap.dedent(f"""
        import os, sys
        from fuzzrunner.engine import forking
        made = []
        real = forking.Zygote.__init__
        def spy(self, *args, wait=True, **kwargs):
            made.append(("torch" in sys.modules, wait))
            real(self, *args, wait=wait, **kwargs)
        forking.Zygote.__init__ = spy
        from fuzzrunner.context import Context
        from fuzzrunner.engine.plan import CampaignPlan
        from fuzzrunner.engine.sharding import _shard_process
        from fuzzrunner.settings import Settings
        s = Settings(max_examples=2, seed=1, device="cpu", workers=2, cpu_triage=False)
        plan = CampaignPlan("reference_runner", "reference_runner", s, (), 1, Context.of("cpu"),
                                {str(tmp_path / 'corpus')!r})

        class Q(list):
            put = list.append
        q = Q()
        _shard_process(q, os.getppid(), plan, 0, 2)
        print(made, [e.get("type") for e in q][-1:])
    """))
    p = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": root})
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == "[(False, False)] ['done']", p.stdout + p.stderr[-2000:]
