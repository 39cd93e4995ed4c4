"""What the worker adds to a case's violations before they go to the hub."""

from fuzzrunner.context import Context
from fuzzrunner.engine.worker import _Session
from fuzzrunner.violation import Violation


def _cuda_error() -> Violation:
    return Violation("python", "crash", "AcceleratorError", "fuzzrunner/runner/punica.py:103", "",
                     "op 0: AcceleratorError: CUDA error: device-side assert triggered", {"op_index": 0})


def test_a_cuda_error_raised_in_python_names_the_last_kernel_launched_and_keeps_its_identity():
    session = _Session(None, None, Context.of("cuda"))
    session.reporter.last = "_lora_shrink_kernel"
    v = _cuda_error()
    named = session._with_last_launch(v)
    assert named.details["last_kernel"] == "_lora_shrink_kernel" and named.details["op_index"] == 0
    assert named.message.endswith("; last kernel launch: _lora_shrink_kernel")
    assert named.signature == v.signature  # the same bug, whatever ran before it


def test_other_violations_and_cpu_runs_are_left_alone():
    session = _Session(None, None, Context.of("cuda"))
    session.reporter.last = "_lora_shrink_kernel"
    plain = Violation("python", "crash", "ValueError", "x.py:1", "", "op 0: ValueError: no", {})
    assert session._with_last_launch(plain) is plain
    cpu = _Session(None, None, Context.of("cpu"))
    cpu.reporter.last = "_lora_shrink_kernel"
    assert cpu._with_last_launch(_cuda_error()) == _cuda_error()


def test_a_case_refused_after_a_kernel_broke_the_context_is_that_crash(monkeypatch):
    """Launches are asynchronous on a GPU: the context can be gone when the target refuses the case; the
    worker then reports the crash (and retires), not an invalid case that would leave the next one blamed."""
    import fuzzrunner.execute
    from fuzzrunner.engine import protocol, worker
    from fuzzrunner.errors import InvalidCase
    sent = []
    monkeypatch.setattr(protocol, "send", lambda sock, msg: sent.append(msg))
    monkeypatch.setattr(fuzzrunner.execute, "run_case", lambda *a, **k: (_ for _ in ()).throw(InvalidCase("no")))
    case = {"target": "t", "config": {}, "ops": [{"op": "x"}]}
    for lost, expect in ((None, protocol.Invalid), (Violation("cuda", "crash", "k", "illegal", "", "lost"),
                                                     protocol.Result)):
        monkeypatch.setattr(worker, "_context_lost", lambda last, lost=lost: lost)
        sent.clear()
        code = _Session(None, None, Context.of("cuda")).run(protocol.Run(case, ["shadow"], False))
        [msg] = sent
        assert isinstance(msg, expect)
        assert code == (protocol.EXIT_CONTEXT_LOST if lost else None)
        if lost:
            assert msg.fatal and [v["tool"] for v in msg.violations] == ["cuda"]
