"""Root-cause grouping (docs/architecture.md) and identity: one finding per root cause, never fewer."""

from fuzzrunner.finding import group
from fuzzrunner.violation import Violation


def _v(kind, tensor, op, seq, tool="shadow", kernel="k", location="x.py:1"):
    return Violation(tool, kind, kernel, location, tensor, f"{kind} {tensor}", {"op_index": op, "seq": seq})


def _heads(vs):
    return [(h.kind, h.tensor, len(others)) for h, others in group(vs)]


def test_one_ops_memory_errors_are_one_finding_headed_by_its_first_unwritten_read():
    vs = [_v("out-of-bounds", "x", 0, 1), _v("uninitialized-read", "ids", 0, 2), _v("stale-read", "ids2", 0, 3)]
    assert _heads(vs) == [("uninitialized-read", "ids", 2)]


def test_unwritten_reads_in_two_ops_are_two_findings():
    vs = [_v("uninitialized-read", "a", 0, 1), _v("uninitialized-read", "b", 1, 2)]
    assert _heads(vs) == [("uninitialized-read", "a", 0), ("uninitialized-read", "b", 0)]


def test_a_later_ops_out_of_bounds_follows_the_garbage_read_before_it():
    vs = [_v("uninitialized-read", "ids", 0, 1), _v("out-of-bounds", "x", 1, 2)]
    assert _heads(vs) == [("uninitialized-read", "ids", 1)]


def test_out_of_bounds_alone_is_its_own_finding():
    assert _heads([_v("out-of-bounds", "x", 1, 2)]) == [("out-of-bounds", "x", 0)]


def test_a_numeric_error_follows_the_memory_error_of_its_op_but_not_of_another_op():
    num0 = _v("numeric-mismatch", "logits", 0, 5, tool="numeric", kernel="step", location="float64 reference")
    num1 = _v("numeric-mismatch", "logits", 1, 6, tool="numeric", kernel="step", location="float64 reference")
    vs = [_v("uninitialized-read", "ids", 0, 1), num0, num1]
    assert _heads(vs) == [("uninitialized-read", "ids", 1), ("numeric-mismatch", "logits", 0)]


def test_an_ops_first_invariant_violation_heads_its_numeric_differences():
    inv_s = _v("invariant-violation", "meta.active_lora_ids", 2, 1, tool="invariants", kernel="lora_shrink",
               location="meta")
    inv_e = _v("invariant-violation", "meta.active_lora_ids", 2, 2, tool="invariants", kernel="lora_expand",
               location="meta")
    inv_other = _v("invariant-violation", "meta.num_tokens", 2, 3, tool="invariants", kernel="lora_expand",
                   location="meta")
    hidden = _v("numeric-mismatch", "hidden", 2, 4, tool="numeric", kernel="replay", location="float64 reference")
    logits = _v("numeric-mismatch", "logits", 2, 5, tool="numeric", kernel="replay", location="float64 reference")
    groups = group([hidden, logits, inv_e, inv_s, inv_other])
    assert [(h.kernel, h.tensor, {o.tensor for o in others}) for h, others in groups] == [
        ("lora_shrink", "meta.active_lora_ids", {"meta.active_lora_ids", "hidden", "logits"}),
        ("lora_expand", "meta.num_tokens", set())]


def test_wrong_values_of_one_op_are_one_finding_headed_by_its_first_numeric_difference():
    """hidden and the logits computed from it, wrong in one op with no memory error (a stale
    mapping the shadow oracle reported in an earlier op): one bug, not two (new-user trial)."""
    hidden = _v("numeric-mismatch", "hidden", 5, 4, tool="numeric", kernel="step", location="float64 reference")
    logits = _v("numeric-mismatch", "logits", 5, 5, tool="numeric", kernel="step", location="float64 reference")
    poison = _v("poison-divergence", "logits", 5, 3, tool="poison", kernel="step", location="")
    other_op = _v("numeric-mismatch", "logits", 6, 6, tool="numeric", kernel="step", location="float64 reference")
    assert _heads([logits, poison, hidden, other_op]) == [("numeric-mismatch", "hidden", 2),
                                                          ("numeric-mismatch", "logits", 0)]


def test_a_crash_follows_the_cases_first_memory_error_and_stands_alone_without_one():
    crash = _v("crash", "", 1, 9, tool="worker", kernel="step", location="SIGSEGV")
    assert _heads([_v("uninitialized-read", "ids", 0, 1), crash]) == [("uninitialized-read", "ids", 1)]
    assert _heads([crash]) == [("crash", "", 0)]


def test_the_id_ignores_the_line_and_the_stale_or_uninitialized_distinction():
    a = _v("uninitialized-read", "ids", 0, 1, location="nowhere.py:10")
    b = _v("stale-read", "ids", 3, 7, location="nowhere.py:12")
    assert a.signature.id == b.signature.id
    assert a.signature.id != _v("out-of-bounds", "ids", 0, 1, location="nowhere.py:10").signature.id


def _finding(n_ops: int, minimized: bool):
    from fuzzrunner.case import Case
    from fuzzrunner.finding import Finding
    case = Case("t", {}, tuple({"op": "x", "n": i} for i in range(n_ops)))
    return Finding.of(_v("uninitialized-read", "buf", 0, 0), [], case, minimized=minimized)


def test_a_smaller_case_seen_after_the_shrink_keeps_the_finding_minimized():
    from fuzzrunner.finding import merge
    shrunk = _finding(2, minimized=True)
    assert merge(shrunk, _finding(1, minimized=False)) and len(shrunk.case.ops) == 1 and shrunk.minimized


def test_a_larger_case_never_replaces_and_an_unshrunk_smaller_one_is_not_called_minimized():
    from fuzzrunner.finding import merge
    shrunk = _finding(1, minimized=True)
    assert not merge(shrunk, _finding(3, minimized=False)) and len(shrunk.case.ops) == 1 and shrunk.minimized
    raw = _finding(3, minimized=False)
    assert merge(raw, _finding(2, minimized=False)) and not raw.minimized


def test_a_bug_has_one_id_in_the_process_that_saw_it_and_in_one_that_cannot_read_its_file(tmp_path):
    """A worker names an automatically tracked ``torch.empty@my_runner.py:15`` by the function
    holding line 15; the hub (and a report reader) cannot read that file. The id must be the same
    in both, and a finding named by the file alone (older ids) is still matched: a repro script
    printed "not reproduced" for a live bug when the two disagreed (new-user trial)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from fuzzrunner import source
    runner = tmp_path / "my_runner.py"
    runner.write_text("class MyLoraRunner:\n    def __init__(self):\n        self.ids = None  # line 3\n")
    code = ("import json, sys\nfrom fuzzrunner import source\nfrom fuzzrunner.violation import Violation\n"
            f"loc = source.location({str(runner)!r}, 3)\n"
            "v = Violation('shadow', 'uninitialized-read', 'aten.add.Tensor', 'other.py:9', f'torch.empty@{loc}', 'm')\n"
            "print(json.dumps([v.to_dict(), v.signature.id]))\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}).stdout
    made, worker_id = json.loads(out)
    assert "my_runner.py:3" not in source._PATHS  # this process never read the file
    seen_here = Violation.from_dict(made)
    assert seen_here.signature.id == worker_id
    assert made["details"]["sites"] == {"my_runner.py:3": "my_runner.py::MyLoraRunner.__init__"}
    old = Violation.from_dict({**made, "details": {}}).signature  # named before sites travelled
    assert seen_here.signature.matches(old.file_id)


def test_a_cuda_error_raised_in_python_and_the_context_it_lost_are_one_finding():
    """On the H200 a device-side assert under blocking launches gave two findings: the AcceleratorError
    at the user's line and 'crash at device-side assert triggered [cuda]' (the context lost after it)."""
    from fuzzrunner.finding import group
    raised = Violation("python", "crash", "AcceleratorError", "runner.py:55", "",
                       "op 0: AcceleratorError: CUDA error: device-side assert triggered", {"op_index": 0})
    lost = Violation("cuda", "crash", "", "device-side assert triggered", "",
                     "the CUDA context was lost (CUDA error: device-side assert triggered)", {})
    for order in ([raised, lost], [lost, raised]):
        groups = group(order)
        assert len(groups) == 1 and groups[0][0] is raised and groups[0][1] == [lost]
    other = Violation("python", "crash", "ValueError", "runner.py:9", "", "op 0: ValueError: x", {"op_index": 0})
    assert len(group([other, lost])) == 2  # no CUDA error raised: the lost context stays its own
