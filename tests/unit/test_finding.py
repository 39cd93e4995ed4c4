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


def test_a_smaller_case_seen_after_the_shrink_wins_but_is_not_called_minimized():
    """``minimized`` belongs to a case that went through a completed shrink (issue 23)."""
    from fuzzrunner.finding import merge
    shrunk = _finding(2, minimized=True)
    assert merge(shrunk, _finding(1, minimized=False)) and len(shrunk.case.ops) == 1 and not shrunk.minimized


def test_a_tie_in_size_goes_to_the_case_that_went_through_a_shrink():
    """Two Ray shards saw one bug: one raw ``n=20``, merged first, one shrunk ``n=10``, both one op of one value and
    as long as JSON. The finding kept ``n=20`` and was called minimized (CI, ``test_ray``); now the shrunk case."""
    from fuzzrunner.case import Case
    from fuzzrunner.finding import Finding, merge

    def seen(n, minimized):
        return Finding.of(_v("uninitialized-read", "buf", 0, 0), [], Case("t", {}, ({"op": "x", "n": n},)),
                          minimized=minimized)
    raw = seen(20, False)
    assert merge(raw, seen(10, True)) and raw.case.ops[0]["n"] == 10 and raw.minimized
    shrunk = seen(10, True)
    assert not merge(shrunk, seen(20, False)) and shrunk.case.ops[0]["n"] == 10 and shrunk.minimized


def test_case_size_orders_ops_then_values_then_text():
    from fuzzrunner.case import Case

    def case(*token_lists, extra=""):
        return Case("t", {}, tuple({"op": "step", "tokens": list(t), "tag": extra} for t in token_lists))
    assert case([1, 2, 3]).size() < case([1], [1]).size()          # fewer ops first
    assert case([100, 200, 300]).size() < case([1, 2, 3, 4]).size()  # then fewer values (tokens)
    assert case([1], extra="").size() < case([1], extra="long").size()  # then shorter text


def _book_with_stored(tmp_path, stored):
    from fuzzrunner.corpus import Corpus
    from fuzzrunner.engine.finding_book import FindingBook
    corpus = Corpus(tmp_path)
    corpus.save_finding("t", stored)
    return corpus, FindingBook(corpus, "t")


def test_a_resumed_shrink_never_replaces_the_stored_case_by_a_larger_one(tmp_path):
    """Issue 23: SIGTERM mid-shrink left a 1-op case; the rerun's completed shrink ended at 5 ops
    (Hypothesis' order is not ours) and the book replaced the 1-op case, calling it minimized."""
    stored = _finding(1, minimized=False)
    stored.shrink_interrupted = True
    corpus, book = _book_with_stored(tmp_path, stored)
    five = _finding(5, minimized=False)
    book.record([five.violation], five.case, 1, 0.1)   # the rerun meets the bug (database replay)
    book.record([five.violation], five.case, 2, 0.2)   # Hypothesis' final replay of its minimal example
    book.mark_minimized(five.id)
    on_disk = corpus.load_finding("t", five.id)
    for f in (book.by_id[five.id], on_disk):
        assert len(f.case.ops) == 1 and not f.minimized and not f.shrink_interrupted


def test_a_completed_shrink_keeps_the_smallest_case_it_passed_through_and_calls_it_minimized(tmp_path):
    corpus, book = _book_with_stored(tmp_path, _finding(6, minimized=False))
    two, three = _finding(2, minimized=False), _finding(3, minimized=False)
    for n, f in enumerate((two, three)):  # a shrink step smaller in our order than Hypothesis' final
        book.record([f.violation], f.case, n, 0.0)
    book.mark_minimized(two.id)
    on_disk = corpus.load_finding("t", two.id)
    assert len(on_disk.case.ops) == 2 and on_disk.minimized


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


def test_an_older_finding_without_access_id_is_matched_by_its_access_at_a_renamed_function():
    """Issue 23: renaming ``_apply`` -> ``_apply_lora`` (bug still there) read as "not reproduced".
    A finding file written before access ids existed (only its id) still loads and matches."""
    from fuzzrunner.finding import Finding
    old = _finding(1, minimized=True).to_dict()
    del old["access_id"], old["aliases"]
    old["violation"]["site"] = "runner.py::Runner._apply"
    finding = Finding.from_dict(old)
    renamed = Violation("shadow", "stale-read", "k", "runner.py:12", "buf", "stale", {}, "runner.py::Runner._apply_lora")
    assert renamed.signature.id != finding.id
    assert finding.reproduced_by([renamed]) == [renamed] == finding.moved([renamed])
    other_tensor = _v("uninitialized-read", "other", 0, 0)
    out_of_bounds = _v("out-of-bounds", "buf", 0, 0)
    assert finding.reproduced_by([other_tensor, out_of_bounds]) == []
    assert finding.moved([renamed, finding.violation]) == []  # its own site still shows: not moved


def test_a_finding_of_an_unregistered_kind_is_left_in_place_saying_what_is_missing(tmp_path):
    """New-user trial: a plug-in's finding was quarantined as 'not a fuzzrunner finding' by the next campaign."""
    import json

    from fuzzrunner.case import Case
    from fuzzrunner.corpus import Corpus
    from fuzzrunner.errors import NewerSchema
    from fuzzrunner.finding import Finding
    from fuzzrunner.violation import Violation
    v = Violation("shadow", "uninitialized-read", "k", "a.py:1", "t", "read", {"op_index": 0})
    case = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
                ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))
    corpus = Corpus(tmp_path)
    path = corpus.save_finding("reference_runner", Finding(v.signature, case, v, []))
    data = json.loads(path.read_text())
    data["violation"]["kind"] = "racy-read"
    path.write_text(json.dumps(data))
    bad = []
    assert corpus.entries("reference_runner", on_bad=lambda p, moved, e: bad.append((moved, e))) == []
    [(moved, error)] = bad
    assert moved is None and path.exists() and isinstance(error, NewerSchema)
    assert "violation kind 'racy-read' is not registered" in str(error)
    data["violation"]["kind"] = 7  # a broken file is still quarantined
    path.write_text(json.dumps(data))
    bad.clear()
    corpus.entries("reference_runner", on_bad=lambda p, moved, e: bad.append((moved, e)))
    assert bad[0][0] is not None and not path.exists()


# -- a renamed or moved target file (issue 47, item 5) ---------------------------------------------

def _auto(file: str, reader: str = "Runner.dummy_run", made: int = 10, maker: str = "Runner.__init__") -> Violation:
    """An unwritten read of an automatically tracked buffer (``torch.empty@FILE:LINE``) in ``reader``,
    the buffer made at line ``made`` of ``maker``, both in ``file`` (as a worker names them)."""
    return Violation("shadow", "uninitialized-read", "aten.remainder.Scalar", f"{file}:18", f"torch.empty@{file}:{made}",
                     "read never written", {"sites": {f"{file}:{made}": f"{file}::{maker}"}}, f"{file}::{reader}")


def test_a_renamed_or_moved_target_file_is_the_same_bug_by_its_access():
    """Renaming the target file made one bug "1 new, 1 fixed": its file was in the access of the
    automatically tracked buffer (``torch.empty@FILE``), so nothing matched the stored finding. The
    access holds no file now; the site still does (the id changes and the old one is matched)."""
    from fuzzrunner.case import Case
    from fuzzrunner.finding import Finding
    before = _auto("i47_runner.py")
    case = Case("t", {}, [{"op": "dummy_run"}])
    for after in (_auto("i47_renamed.py"), _auto("pkg/i47_runner.py"), _auto("i47_renamed.py", reader="Runner.warm"),
                  _auto("i47_renamed.py", made=11, maker="Runner.alloc")):
        assert after.signature.id != before.signature.id and after.signature.access_id == before.signature.access_id
        assert after.signature.moved_from(before.signature)
        for stored in (Finding.of(before, [], case), Finding.from_dict(Finding.of(before, [], case).to_dict())):
            assert stored.reproduced_by([after]) == [after] == stored.moved([after])
    # the file renamed and both functions too: another bug, not this one moved
    other = _auto("i47_renamed.py", reader="Runner.warm", made=12, maker="Runner.alloc")
    assert not other.signature.moved_from(before.signature)
    assert Finding.of(before, [], case).reproduced_by([other]) == []


def test_a_finding_named_before_sites_travelled_still_matches_its_renamed_file():
    """A stored finding whose buffer's maker this process cannot name (no ``sites``: older files, or a
    file gone) is matched by the function holding its read."""
    from fuzzrunner.case import Case
    from fuzzrunner.finding import Finding
    old = _auto("i47_old.py", made=20).to_dict()
    old["details"] = {}
    stored = Finding.of(Violation.from_dict({**old, "tensor": "torch.empty@i47_gone.py:20"}), [],
                        Case("t", {}, [{"op": "dummy_run"}]))
    assert stored.reproduced_by([_auto("i47_new.py", made=20)])
    assert not stored.reproduced_by([_auto("i47_new.py", reader="Runner.warm", made=21)])


def _root_line(head, others):
    from fuzzrunner.case import Case
    from fuzzrunner.finding import Finding, render
    f = Finding.of(head, others, Case("t", {}, ({"op": "x"},)))
    lines = [line.strip() for line in render(f).splitlines()]
    return f, next((line for line in lines if line.startswith("same root cause:")), None)


def test_the_same_root_cause_line_names_only_the_other_violations_each_with_its_op():
    """Before, the line named ``others[0].signature.short()``: here the head's own read seen again in op 3, so the
    finding was told it shared a root cause with itself, with nothing to tell the two apart (new-user trial)."""
    head = _v("uninitialized-read", "ids", 1, 1, kernel="shrink")
    same_later = _v("stale-read", "ids", 3, 4, kernel="shrink")          # the head's bug (its id) in op 3
    same_op = _v("uninitialized-read", "ids", 1, 2, kernel="shrink")     # a second sighting in the head's op
    other = _v("out-of-bounds", "x", 2, 3, kernel="expand", location="y.py:9")
    f, line = _root_line(head, [same_op, same_later, other])
    assert line == ("same root cause: out-of-bounds of x in expand at y.py:9 [shadow] in op 2; "
                    "the same uninitialized-read again in op 3")
    assert f.signature.short() not in line
    _, line = _root_line(head, [same_op])
    assert line is None  # nothing but the head itself: no line


def test_the_same_root_cause_line_never_repeats_the_heads_signature_over_generated_groups():
    from hypothesis import given, settings
    from hypothesis import strategies as st
    kinds = st.sampled_from(["uninitialized-read", "stale-read", "out-of-bounds", "numeric-mismatch"])
    one = st.builds(lambda k, t, op, seq, kern: _v(k, t, op, seq, kernel=kern), kinds, st.sampled_from(["a", "b"]),
                    st.integers(0, 3), st.integers(0, 20), st.sampled_from(["k1", "k2"]))

    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(st.lists(one, min_size=1, max_size=6))
    def check(vs):
        for head, others in group(vs):
            f, line = _root_line(head, others)
            if line is None:
                continue
            for part in line.removeprefix("same root cause: ").split("; "):
                assert not part.startswith(f.signature.short()), (part, f.signature.short())
                assert " in op " in part or part.startswith("the same ")
    check()
