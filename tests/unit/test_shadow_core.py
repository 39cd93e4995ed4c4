"""The shadow oracle's core (fuzzrunner/oracles/shadow/core/), which both modes report and install through:
the reporter's words, the span record, the stack of installed hooks. The modes' whole reports are pinned in
tests/power/test_shadow_reports.py."""

import threading

import pytest

from fuzzrunner.oracles.shadow.core import BadAccess, Hooks, Reporter, ShadowCore, Span
from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
from fuzzrunner.oracles.shadow.gpu.regions import Region
from fuzzrunner.oracles.shadow.memory import Allocation
from fuzzrunner.oracles.shadow.oracle import ShadowOracle


def _reporter(threads: bool) -> Reporter:
    r = Reporter(threads=threads)
    for i, name in enumerate(["add_adapter", "step", "dummy_run"]):
        r.begin_op(i, {"op": name})
    return r


MAPPING = Span(0x1000, 32, "token_lora_mapping", True, 4, (2, 4))


@pytest.mark.parametrize("kind, written, said, why", [
    ("stale-read", 2, "last written in op 1, not in this op 2", "last written in op 1 (step)"),
    ("stale-read", 0, "last written in set-up, before op 0, not in this op 2", "written at set-up only"),
    ("uninitialized-read", -1, "never written", "never written by any op"),
])
def test_a_bad_read_of_a_per_step_span_names_its_element_and_the_op_that_did_not_write_it(kind, written, said, why):
    r = _reporter(threads=False)
    r.bad_access(BadAccess(kind, MAPPING, 0x1000 + 20, 20, 0, 3, written_epoch=written), "_kernel", "k.py:7",
                 r.at(0x1014, program_id=[1, 0, 0]))
    [v] = r.violations()
    assert (v.tool, v.kind, v.kernel, v.location, v.tensor) == ("shadow", kind, "_kernel", "k.py:7",
                                                                 "token_lora_mapping")
    assert v.message == f"_kernel (program (1, 0, 0)) read token_lora_mapping[1, 1] (byte 20): {said}"
    assert v.details["unwritten_by"] == f"op 2 (dummy_run) never wrote token_lora_mapping[1, 1]; {why}"
    assert list(v.details)[:4] == ["address", "op_index", "op", "program_id"] and v.details["count"] == 3


def test_the_cpu_mode_names_the_thread_the_device_mode_cannot():
    made = {}

    def report(threads: bool):
        r = _reporter(threads)
        r.index_out_of_range("aten.take.default", "ranks", 5, 3, 1, "r.py:3")
        made[threads] = r.violations()[0]

    report(True)
    worker = threading.Thread(target=report, args=(False,), name="worker")
    worker.start()
    worker.join()
    on_cpu, on_device = made[True], made[False]
    assert on_device.details == {"index": 5, "rows": 3, "op_index": 2, "op": "dummy_run", "count": 1,
                                 "seq": on_device.details["seq"]}
    assert on_cpu.details["thread"] == threading.current_thread().name
    assert on_cpu.message == on_device.message == (
        "aten.take.default indexed row 5 of ranks (size 3 along the indexed dim); 1 such index(es); "
        "redirected to row 0 so the case could go on")
    r = _reporter(True)
    worker = threading.Thread(target=r.index_out_of_range, args=("f", "t", 1, 1, 1, "x.py:1"), name="pool-1")
    worker.start()
    worker.join()
    assert r.violations()[0].message.endswith(" (on thread 'pool-1')")


def test_both_modes_records_are_spans_with_one_element_rule():
    alloc = Allocation(0x2000, 24, "t", False, 4, (2, 3))
    region = Region(0x2000, 24, "t", False, 4, (2, 3), None)
    assert alloc.end == region.end == 0x2018
    assert alloc.element(16) == region.element(16) == (1, 1)
    assert Span(0, 10, "odd", False, 4, (3,)).element(8) == (2,)  # a shape that does not fill the span: flat


def test_both_modes_are_back_ends_of_the_core():
    assert issubclass(ShadowOracle, ShadowCore) and issubclass(GpuShadowOracle, ShadowCore)
    assert ShadowOracle.finish is GpuShadowOracle.finish is ShadowCore.finish
    assert ShadowOracle().reporter.threads and not GpuShadowOracle("cpu").reporter.threads


class _Hook:
    def __init__(self, log, name, fails=False):
        self.log, self.name, self.fails = log, name, fails

    def install(self):
        self.log.append(f"+{self.name}")

    def uninstall(self):
        self.log.append(f"-{self.name}")
        if self.fails:
            raise RuntimeError(f"planted: {self.name} would not come off")


def test_hooks_come_off_last_first_and_one_that_raises_leaves_none_of_the_others_on():
    log: list = []
    hooks = Hooks()
    hooks.add(_Hook(log, "watch"))
    hooks.add(_Hook(log, "launches", fails=True))
    hooks.push(lambda: log.append("-mode"))
    hooks.add(_Hook(log, "threads", fails=True))
    with pytest.raises(RuntimeError, match="threads would not come off"):  # the first that raised
        hooks.undo()
    assert log == ["+watch", "+launches", "+threads", "-threads", "-mode", "-launches", "-watch"]
    hooks.undo()  # each once
    assert log[-1] == "-watch" and len(log) == 7


@pytest.mark.parametrize("make", [ShadowOracle, lambda: GpuShadowOracle("cpu")], ids=["cpu", "device"])
def test_a_report_made_inside_a_runners_region_names_the_innermost(make):
    """``tracking.region(name)``: what the runner is doing when an access goes wrong (vllm_engine: which logits call,
    known.py's P1), in ``details["region"]``; none outside, and a region left by an exception is closed."""
    from fuzzrunner import tracking
    oracle = make()
    oracle.reporter.begin_op(0, {"op": "step"})

    def report() -> dict:
        oracle.reporter.index_out_of_range("aten.take.default", "ranks", 5, 3, 1, "r.py:3")
        return oracle.reporter.violations()[-1].details

    with tracking.watch(oracle):
        with tracking.region("step.prompt_logits[0]"):
            with tracking.region("step.prompt_token_id_logits[1]"):
                assert report()["region"] == "step.prompt_token_id_logits[1]"
            oracle.reporter.begin_op(1, {"op": "step"})  # a new op: one report per bad read per op
            assert report()["region"] == "step.prompt_logits[0]"
        with pytest.raises(ValueError), tracking.region("raised"):
            raise ValueError
        oracle.reporter.begin_op(2, {"op": "step"})
        assert "region" not in report()
    oracle.reporter.begin_op(3, {"op": "step"})
    with tracking.region("unwatched"):  # nothing watches: a no-op
        assert "region" not in report()
