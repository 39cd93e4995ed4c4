"""``doctor --engines`` loads each target that tests code not fuzzrunner's own in a process of its own
(``target_probe``). In one process, what one target left in ``sys.modules`` broke the next: the
``sglang_lora`` target's stub of ``hf_transformers_utils`` made ``sglang_engine`` "unavailable" where it works
(a new user's trial). A probe that crashes or hangs is said so in one line."""

import pytest

from fuzzrunner import doctor, target

TARGETS = '''
import os, signal, sys, time, types
from fuzzrunner.target import Target

def _target(name):
    return Target(name=name, description=f"{name} loaded", cases=lambda faults, max_ops=4: None,
                  run=lambda case, ctx: None, details=(f"{name} found its engine",),
                  feature_space=("a=1", "a=2") if name == "victim" else ())

def poisoner():  # leaves a stub of a module another target imports, as sglang_lora's stubs did
    sys.modules["probe_engine_dep"] = types.ModuleType("probe_engine_dep")
    return _target("poisoner")

def victim():
    from probe_engine_dep import get_config  # noqa: F401 - the real module has it, the stub not
    return _target("victim")

def crasher():
    os.kill(os.getpid(), signal.SIGSEGV)

def hanger():
    time.sleep(600)
'''


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    (tmp_path / "probe_targets.py").write_text(TARGETS)
    (tmp_path / "probe_engine_dep.py").write_text("get_config = object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    for name in list(target.BUILTIN):  # the registry itself (others hold it), restored after the test
        monkeypatch.delitem(target.BUILTIN, name)

    def lines(*names, timeout_s=None):
        for n in names:
            monkeypatch.setitem(target.BUILTIN, n, f"probe_targets:{n}")
        if timeout_s is not None:
            monkeypatch.setattr("fuzzrunner.target_probe.TIMEOUT_S", timeout_s)
        probes = doctor._start_target_probes(engines=True)
        return [line for n in names for line in doctor._target_lines(n, True, probes.get(n))]
    return lines


def test_each_target_loads_in_a_process_of_its_own_so_none_sees_what_another_left(fakes):
    assert fakes("poisoner", "victim") == [
        "target       poisoner: ok (poisoner loaded)", "               poisoner found its engine",
        "target       victim: ok (victim loaded)", "               victim found its engine",
        "               features: 2 declared here"]


def test_in_one_process_the_first_target_would_have_broken_the_second(fakes):
    """What the probes prevent, shown: the same two targets loaded in this process, one after the other."""
    import sys

    from fuzzrunner.target_probe import probe
    try:
        assert probe("probe_targets:poisoner") == {"description": "poisoner loaded",
                                                   "details": ["poisoner found its engine"], "features": 0}
        assert "cannot import name 'get_config'" in probe("probe_targets:victim")["unavailable"]
    finally:
        sys.modules.pop("probe_engine_dep", None)


def test_a_probe_that_crashes_or_hangs_is_one_line_naming_how_it_ended(fakes):
    crashed, hung = fakes("crasher", "hanger", timeout_s=5)
    assert crashed.startswith("target       crasher: unavailable: its probe (loading it in a process of its own) "
                              "crashed (SIGSEGV): Fatal Python error: Segmentation fault"), crashed
    assert hung == ("target       hanger: unavailable: its probe (loading it in a process of its own) did not "
                    "finish in 5 s and was killed; `fuzzrunner check-target` shows where it hangs")


def test_a_target_unavailable_in_its_probe_says_why():
    from fuzzrunner.target_probe import probe
    said = probe("fuzzrunner/no/such/file.py:TARGET")
    assert said == {"unavailable": "it failed to load: target file 'fuzzrunner/no/such/file.py' does not exist."}
