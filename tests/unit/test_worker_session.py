"""What the worker adds to a case's violations before they go to the hub."""

from fuzzrunner.engine.worker import _Session
from fuzzrunner.violation import Violation


def _cuda_error() -> Violation:
    return Violation("python", "crash", "AcceleratorError", "fuzzrunner/runner/punica.py:103", "",
                     "op 0: AcceleratorError: CUDA error: device-side assert triggered", {"op_index": 0})


def test_a_cuda_error_raised_in_python_names_the_last_kernel_launched_and_keeps_its_identity():
    session = _Session(None, None, "cuda")
    session.reporter.last = "_lora_shrink_kernel"
    v = _cuda_error()
    named = session._with_last_launch(v)
    assert named.details["last_kernel"] == "_lora_shrink_kernel" and named.details["op_index"] == 0
    assert named.message.endswith("; last kernel launch: _lora_shrink_kernel")
    assert named.signature == v.signature  # the same bug, whatever ran before it


def test_other_violations_and_cpu_runs_are_left_alone():
    session = _Session(None, None, "cuda")
    session.reporter.last = "_lora_shrink_kernel"
    plain = Violation("python", "crash", "ValueError", "x.py:1", "", "op 0: ValueError: no", {})
    assert session._with_last_launch(plain) is plain
    cpu = _Session(None, None, "cpu")
    cpu.reporter.last = "_lora_shrink_kernel"
    assert cpu._with_last_launch(_cuda_error()) == _cuda_error()
