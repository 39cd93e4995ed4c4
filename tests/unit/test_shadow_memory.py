"""ShadowMemory and the two hooks, on planted accesses."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import fuzzrunner  # noqa: F401  (interpreter mode before Triton loads)
from fuzzrunner import tracking
from fuzzrunner.oracles.shadow import ShadowOracle
from fuzzrunner.oracles.shadow.memory import ShadowMemory

pytestmark = pytest.mark.skipif(not fuzzrunner._env.interpreted(), reason="the Triton hook needs the interpreter")


def addrs(*xs):
    return np.array(xs, dtype=np.uint64)


def test_registry_reports_uninitialized_stale_and_out_of_bounds():
    m = ShadowMemory()
    a = m.add(1000, 16, "meta", per_step=True, initialized=False, itemsize=4, shape=(4,))
    m.epoch = 1
    m.mark_write(addrs(1000, 1004), 4)
    bad, oob = m.check_read(addrs(1000, 1008, 2000), 4)
    assert [b.kind for b in bad] == ["out-of-bounds", "uninitialized-read"]
    assert oob.tolist() == [False, False, True]
    assert a.element(bad[1].byte_offset) == (2,)
    m.epoch = 2
    bad, _ = m.check_read(addrs(1004), 4)
    assert [(b.kind, b.written_epoch) for b in bad] == [("stale-read", 1)]
    m.carry_over(a)
    assert m.check_read(addrs(1004), 4)[0] == []


def test_a_straddling_access_is_out_of_bounds():
    m = ShadowMemory()
    m.add(1000, 8, "x")
    bad, oob = m.check_read(addrs(1006), 4)
    assert oob.tolist() == [True] and bad[0].kind == "out-of-bounds"


def test_new_registration_replaces_reused_memory():
    m = ShadowMemory()
    m.add(1000, 16, "old", initialized=True)
    m.add(1000, 8, "new", initialized=False)
    bad, _ = m.check_read(addrs(1000), 4)
    assert bad[0].allocation.name == "new" and bad[0].kind == "uninitialized-read"


def _watched(fn):
    o = ShadowOracle()
    o.start()
    try:
        o.begin_op(0, {"op": "test"})
        fn(o)
    finally:
        vs = o.finish()
    return vs


def test_torch_hook_sees_reads_of_never_written_elements_only():
    def body(o):
        buf = tracking.track(torch.empty(8, dtype=torch.int32), "slots", per_step=True, initialized=False)
        buf[:4].copy_(torch.arange(4, dtype=torch.int32))
        _ = buf[:4] + 1  # written part: fine
        _ = buf[2:6].sum()  # elements 4 and 5 were never written
    [v] = _watched(body)
    assert (v.kind, v.tensor, v.kernel) == ("uninitialized-read", "slots", "aten.sum.default")
    assert v.details["element"] == [4] and v.details["count"] == 2
    assert v.location.startswith("test_shadow_memory.py:")


def test_torch_empty_in_a_watched_region_is_tracked_without_edits():
    def body(o):
        t = torch.empty(4)
        _ = t * 2
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.tensor.startswith("torch.empty@test_shadow_memory.py:")


def test_embedding_through_a_garbage_index_is_reported_and_survives():
    def body(o):
        table = tracking.track(torch.zeros(10, 3), "table")
        idx = torch.tensor([1, 12345])
        _ = torch.nn.functional.embedding(idx, table)  # would raise IndexError unwatched
    [v] = _watched(body)
    assert (v.kind, v.tensor, v.kernel) == ("out-of-bounds", "table", "aten.embedding.default")
    assert v.details["index"] == 12345


def test_freed_and_reused_memory_is_not_blamed_on_the_old_buffer():
    def body(o):
        for _ in range(50):
            t = torch.empty(64, dtype=torch.int32)  # tracked, uninitialized
            del t
            u = torch.tensor(list(range(64)), dtype=torch.int32)  # may land at the same address
            _ = u + 1
    assert _watched(body) == []


_OOB_KERNEL = textwrap.dedent('''
    import os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl
    sys.path.insert(0, {root!r})
    import fuzzrunner

    @triton.jit
    def gather(src, idx, out, N: tl.constexpr):
        i = tl.arange(0, N)
        j = tl.load(idx + i)
        tl.store(out + i, tl.load(src + j))

    src = torch.arange(16, dtype=torch.float32)
    idx = torch.tensor([0, 1, 2, 1 << 40], dtype=torch.int64)
    out = torch.zeros(4)
    if sys.argv[1] == "shadow":
        from fuzzrunner.oracles.shadow import ShadowOracle
        o = ShadowOracle(); o.start(); o.begin_op(0, {{"op": "gather"}})
        gather[(1,)](src, idx, out, N=4)
        for v in o.finish():
            print(v.kind, v.kernel, v.location, v.details["program_id"])
    else:
        gather[(1,)](src, idx, out, N=4)
    print("alive", out.tolist())
''')


def test_an_out_of_bounds_load_that_segfaults_the_interpreter_becomes_a_report(tmp_path):
    from pathlib import Path
    script = tmp_path / "oob.py"
    script.write_text(_OOB_KERNEL.format(root=str(Path(__file__).resolve().parents[2])))
    plain = subprocess.run([sys.executable, str(script), "plain"], capture_output=True, text=True, timeout=300)
    assert plain.returncode < 0 or "alive" not in plain.stdout, "the unguarded interpreter should crash"
    watched = subprocess.run([sys.executable, str(script), "shadow"], capture_output=True, text=True, timeout=300)
    assert watched.returncode == 0, watched.stderr
    assert "out-of-bounds gather" in watched.stdout and "oob.py:12 [0, 0, 0]" in watched.stdout
    assert "alive [0.0, 1.0, 2.0, 0.0]" in watched.stdout


def test_never_written_gives_the_lanes_and_the_exact_bytes():
    m = ShadowMemory()
    a = m.add(1000, 16, "buf", initialized=False, itemsize=4)
    m.mark_write(addrs(1000, 1004), 4)
    m.mark_write(addrs(1008), 2)  # half of element 2
    lanes, byte_addrs = m.never_written(addrs(1000, 1008, 1012, 5000), 4)
    assert lanes.tolist() == [False, True, True, False]  # 5000 is outside: not this method's business
    assert byte_addrs.tolist() == [1010, 1011, 1012, 1013, 1014, 1015]
    assert a.epochs[8:10].tolist() == [0, 0]


def test_a_garbage_index_read_by_torch_reads_zeros_after_its_report():
    """The never-written bytes a reported read sees are zeroed: ``table[mapping.long()]`` then
    indexes row 0, not a wild row reported a second time (or a crash); the shadow keeps them
    never written."""
    def body(o):
        mapping = torch.empty(4096, dtype=torch.int64)
        mapping[:3] = 1
        table = tracking.track(torch.randn(3, 2), "table")
        _ = table[mapping[:4].long() + 0]
        with tracking.quiet():
            assert mapping[3].item() == 0
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.kernel == "aten.add.Tensor"  # long() of int64 is a no-op


def test_a_garbage_pointer_read_by_a_kernel_is_one_report():
    import triton
    import triton.language as tl

    @triton.jit
    def gather_adapters(ptrs, dst, B: tl.constexpr):
        slot = tl.program_id(0)
        base = tl.load(ptrs + slot).to(tl.pointer_type(tl.float32))
        i = tl.arange(0, B)
        tl.store(dst + slot * B + i, tl.load(base + i))

    def body(o):
        w0 = torch.ones(4)
        ptrs = torch.empty(2, dtype=torch.int64)
        ptrs[0] = w0.data_ptr()  # slot 1 never programmed: a garbage pointer
        dst = torch.zeros(8)
        gather_adapters[(2,)](ptrs, dst, B=4)
        assert dst[4:].tolist() == [0.0] * 4  # the wild lanes were switched off
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["program_id"][0] == 1


def test_gaps_are_the_uncovered_parts_of_a_range():
    m = ShadowMemory()
    m.add(1008, 8, "a")
    m.add(1020, 4, "b")
    assert m.gaps(1000, 32) == [(1000, 1008), (1016, 1020), (1024, 1032)]
    assert m.gaps(1008, 8) == []


def test_a_storage_tracked_in_part_is_read_whole_by_torch_and_kernels_without_reports():
    import triton
    import triton.language as tl

    @triton.jit
    def total(x, out, B: tl.constexpr):
        tl.store(out, tl.sum(tl.load(x + tl.arange(0, B)), 0))

    def body(o):
        pool = torch.zeros(32, dtype=torch.int32)
        slots = tracking.track(pool[8:16], "slots", per_step=True)
        o.begin_op(1, {"op": "next"})
        slots.fill_(1)
        _ = pool.sum()  # the untracked rest of the pool is not out of bounds
        out = torch.zeros(1, dtype=torch.int32)
        total[(1,)](pool, out, B=32)
        assert out.item() == 8  # no lane was switched off
        _ = slots[:4].sum()
    assert _watched(body) == []


def test_an_out_of_range_index_into_a_tracked_view_names_the_view():
    def body(o):
        stacked = torch.randn(3, 4, 2)
        lora_1 = tracking.track(stacked[1], "lora_1")  # one adapter's slice, not at its storage's start
        _ = torch.nn.functional.embedding(torch.tensor([0, 4]), lora_1)
    [v] = _watched(body)
    assert (v.kind, v.tensor, v.details["index"]) == ("out-of-bounds", "lora_1", 4)


_vlib = torch.library.Library("fuzzunit_launch", "DEF")
_vlib.define("shrink(Tensor x, Tensor(a!) y, int n) -> ()")


def _shrink(x, y, n):
    import triton
    import triton.language as tl

    @triton.jit
    def copy(x, y, n, B: tl.constexpr):
        i = tl.arange(0, B)
        tl.store(y + i, tl.load(x + i, mask=i < n, other=0.0), mask=i < n)

    copy[(1,)](x, y, n, B=8)


_vlib.impl("shrink", _shrink, "CPU")


def test_a_library_op_launching_a_kernel_is_blamed_once_at_the_kernel_line():
    """vLLM registers its LoRA ops with ``Library.impl`` (no ``custom_op`` to run op by op): the
    probe finds the read too, but the kernel's own report is the one kept."""
    def body(o):
        x, y = torch.empty(8), torch.empty(8)
        x[:4] = 1.0
        torch.ops.fuzzunit_launch.shrink(x, y, 5)
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.kernel == "copy" and v.details["element"] == [4]


_PROBED_KERNEL = '''
import sys
sys.path.insert(0, {root!r})
import fuzzrunner  # interpreter mode
import torch, triton, triton.language as tl
from fuzzrunner import tracking
from fuzzrunner.oracles.shadow import ShadowOracle

@triton.jit
def rows(ids, w, out, n, K: tl.constexpr, B: tl.constexpr):
    i = tl.arange(0, B)
    s = tl.load(ids + i, mask=i < n, other=-1)
    k = tl.arange(0, K)
    m = (i < n) & (s >= 0)
    r = tl.load(w + s[:, None] * K + k[None, :], mask=m[:, None], other=0.0)
    tl.store(out + i[:, None] * K + k[None, :], r, mask=(i < n)[:, None])

lib = torch.library.Library("fuzzunit_probed", "DEF")
lib.define("rows(Tensor ids, Tensor w, Tensor(a!) out, int n) -> ()")
lib.impl("rows", lambda ids, w, out, n: rows[(1,)](ids, w, out, n, K=4, B=8), "CPU")
o = ShadowOracle(); o.start(); o.begin_op(0, {{"op": "t"}})
ids = torch.empty(8, dtype=torch.int32); ids[:3] = 1
w = tracking.track(torch.randn(3, 4), "w")
torch.ops.fuzzunit_probed.rows(ids, w, torch.empty(8, 4), 4)
print([(v.kind, v.kernel) for v in o.finish()])
'''


def test_the_probe_of_a_library_op_launching_a_kernel_never_segfaults(tmp_path):
    """The probe runs the op on copies whose unwritten bytes are filled with 0xA5/0x5A: as indices
    they are wild, and the kernel must not dereference them (lanes outside all memory are masked)."""
    from pathlib import Path
    script = tmp_path / "probed.py"
    script.write_text(_PROBED_KERNEL.format(root=str(Path(__file__).resolve().parents[2])))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "[('uninitialized-read', 'rows')]" in run.stdout


def test_the_same_bad_bytes_are_reported_once_per_op():
    """vLLM's shrink and expand kernels both read an unprogrammed mapping: one bad read (the mapping
    was not written this op), one report; the next op reports it again."""
    def body(o):
        mapping = tracking.track(torch.empty(8, dtype=torch.int64), "mapping", per_step=True, initialized=False)
        mapping[:4] = 0
        _ = mapping[:6].sum()  # elements 4 and 5: reported here
        _ = mapping[:6].max()  # the same bytes again: not reported again
        _ = mapping[:7].min()  # element 6 is new: reported
        o.begin_op(1, {"op": "next"})
        _ = mapping[:5].clone()  # a new op: stale 0-3, and 4 never written, reported afresh
    vs = _watched(body)
    assert [(v.kind, v.kernel, v.details["op_index"], v.details["element"]) for v in vs] == [
        ("uninitialized-read", "aten.sum.default", 0, [4]),
        ("uninitialized-read", "aten.min.default", 0, [6]),
        ("uninitialized-read", "aten.clone.default", 1, [4]),
        ("stale-read", "aten.clone.default", 1, [0])]


def test_a_second_kernel_reading_reported_garbage_sees_other_not_garbage():
    import triton
    import triton.language as tl

    @triton.jit
    def rows(ids, table, out, B: tl.constexpr, W: tl.constexpr):
        i = tl.arange(0, B)
        s = tl.load(ids + i)
        w = tl.arange(0, W)
        tl.store(out + i[:, None] * W + w[None, :], tl.load(table + s[:, None] * W + w[None, :]))

    def body(o):
        ids = torch.empty(4096, dtype=torch.int64)  # large: likely garbage, not zeros
        ids[:3] = 1
        table = tracking.track(torch.randn(3, 2), "table")
        out = torch.zeros(4, 2)
        rows[(1,)](ids, table, out, B=4, W=2)  # reported: ids[3] never written
        rows[(1,)](ids, table, out, B=4, W=2)  # the same bytes: no report, and no wild row either
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["element"] == [3]
