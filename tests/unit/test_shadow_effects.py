"""The shadow oracle's precision mechanisms, one by one: exact effects of indexed torch ops,
re-tracking, the probe fallback, numpy views, keyword-or-positional Triton operands, views."""

import warnings

import numpy as np
import pytest
import torch

import fuzzrunner  # noqa: F401  (interpreter mode before Triton loads)
from fuzzrunner import tracking
from fuzzrunner.oracles.shadow import ShadowOracle
from fuzzrunner.oracles.shadow import torch_effects as fx
from fuzzrunner.oracles.shadow.memory import NEVER, ShadowMemory
from fuzzrunner.oracles.shadow.triton_hook import _LOAD, _Args

aten = torch.ops.aten


def _offsets(t, addrs):
    """Element indices (of a contiguous t) of addresses."""
    return sorted(((addrs - np.uint64(t.data_ptr())) // np.uint64(t.element_size())).tolist())


def test_index_put_writes_only_the_indexed_rows_and_reads_none_of_them():
    t = torch.zeros(4, 3)
    eff = fx.exact_effects(aten.index_put_.default, (t, [torch.tensor([2, -1])], torch.ones(3)), {})
    [(w, addrs)] = eff.writes
    assert w is t and _offsets(t, addrs) == [6, 7, 8, 9, 10, 11]
    assert all(r is not t for r, _ in eff.reads)


def test_accumulating_index_put_also_reads_what_it_writes():
    t = torch.zeros(4)
    eff = fx.exact_effects(aten.index_put_.default, (t, [torch.tensor([1])], torch.ones(1), True), {})
    assert [_offsets(t, a) for r, a in eff.reads if r is t] == [[1]]


def test_gather_and_where_read_exactly_what_they_pick():
    t = torch.zeros(2, 4)
    eff = fx.exact_effects(aten.gather.default, (t, 1, torch.tensor([[3], [0]])), {})
    assert _offsets(t, eff.reads[0][1]) == [3, 4]
    a, b = torch.zeros(3), torch.ones(3)
    eff = fx.exact_effects(aten.where.self, (torch.tensor([True, False, True]), a, b), {})
    assert [_offsets(x, addrs) for x, addrs in eff.reads[1:]] == [[0, 2], [1]]


def test_metadata_ops_and_in_place_views_read_and_write_nothing():
    t = torch.zeros(3)
    assert fx.classify(aten.unsqueeze_.default, (t, 0), {}) == ([], [])
    assert fx.classify(aten.is_pinned.default, (t,), {}) == ([], [])
    assert fx.classify(aten.add_.Tensor, (t, t), {})[1] == [t]


def test_out_of_range_is_per_op_negatives_only_where_torch_wraps_them():
    assert fx.out_of_range(torch.tensor([-1, 2]), 3, negatives=True) is None
    assert fx.out_of_range(torch.tensor([-1, 2]), 3, negatives=False).tolist() == [True, False]
    assert fx.out_of_range(torch.tensor([], dtype=torch.int64), 0, negatives=False) is None


def test_retrack_is_idempotent_and_never_marks_never_written_bytes_written():
    m = ShadowMemory()
    m.epoch = 1
    a = m.add(1000, 8, "auto", initialized=False, auto=True)
    b = m.retrack(1000, 8, "named", per_step=True, initialized=True, itemsize=4, shape=(2,))
    assert b.name == "named" and (b.epochs == NEVER).all() and a not in m._allocs
    m.mark_write(np.array([1000], dtype=np.uint64), 4)
    m.epoch = 2
    c = m.retrack(1000, 8, "again", per_step=False, initialized=True, itemsize=4, shape=(2,))
    assert c.name == "named" and c.per_step and c.epochs[:4].tolist() == [1] * 4


def test_tracking_a_view_splits_the_storage_record_and_keeps_its_neighbours():
    m = ShadowMemory()
    m.retrack(1000, 16, "meta", per_step=True, initialized=False, itemsize=4, shape=(4,))
    m.retrack(1008, 8, "counts", per_step=False, initialized=False, itemsize=4, shape=(2,))
    assert [(a.name, a.start, a.nbytes, a.per_step) for a in m._allocs] == [
        ("meta", 1000, 8, True), ("counts", 1008, 8, True)]


def _watched(fn):
    o = ShadowOracle()
    o.start()
    try:
        o.begin_op(0, {"op": "test"})
        fn(o)
    finally:
        vs = o.finish()
    return vs


_lib = torch.library.Library("fuzzunit", "DEF")
_lib.define("half_fill_(Tensor(a!) dst) -> ()")
_lib.define("acc_(Tensor(a!) dst) -> ()")
_lib.define("rand_fill_(Tensor(a!) dst) -> ()")
_lib.define("add_head_(Tensor(a!) dst, Tensor src) -> ()")


def _add_head(dst, src):  # accumulates the sum of src's first two elements into dst
    dst += src[:2].sum()


def _half_fill(dst):
    dst[: dst.numel() // 2] = 1


def _acc(dst):
    dst += 1


def _rand_fill(dst):  # nondeterministic: the probe's runs differ, but not through old values
    dst.copy_(torch.rand(dst.shape))


_lib.impl("half_fill_", _half_fill, "CPU")
_lib.impl("acc_", _acc, "CPU")
_lib.impl("rand_fill_", _rand_fill, "CPU")
_lib.impl("add_head_", _add_head, "CPU")


def test_probe_finds_the_written_half_of_an_op_it_has_no_model_of():
    def body(o):
        t = torch.empty(8)
        torch.ops.fuzzunit.half_fill_(t)
        _ = t[:4].sum()  # written by the op: silent
        _ = t[4:].sum()  # BAD
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["element"] == [4]


@pytest.mark.parametrize("tracked_too", [False, True])
def test_the_probe_never_writes_an_operand_it_does_not_track(tracked_too):
    """An op the shadow probes (a tracked input holds unwritten bytes) that accumulates into an operand made before
    the case: each probe run wrote that operand itself, so it got the op's result once per run (5.0, not 1.0: a
    false numeric mismatch of every vLLM LoRA layer on a padded batch of 0.17 - 0.22, whose lora_expand adds into
    the layer's output while the kernel metadata's padding rows were never written). Now only scratch copies."""
    dst = torch.zeros(3)

    def body(o):
        src = torch.empty(4)
        src[:2] = 0.5
        if tracked_too:  # with a tracked output beside it, the probe ran before too
            torch.ops.fuzzunit.half_fill_(torch.empty(2))
        torch.ops.fuzzunit.add_head_(dst, src)
    assert _watched(body) == []  # src[2:] is never read
    assert dst.tolist() == [1.0, 1.0, 1.0]


def test_a_python_kernels_read_of_its_target_is_reported_inside_its_body():
    def body(o):
        t = torch.empty(4)
        torch.ops.fuzzunit.acc_(t)
    [v] = _watched(body)  # the probe also sees it (through old values), but the body's own op is more precise
    assert v.kind == "uninitialized-read" and v.kernel == "aten.add_.Tensor"
    assert v.location == f"test_shadow_effects.py:{_acc.__code__.co_firstlineno + 1}"


def test_numpy_view_writes_are_seen_and_reads_of_unwritten_elements_reported():
    def body(o):
        t = torch.empty(6, dtype=torch.int32)
        a = t.numpy()
        a[:4] = 1
        _ = t[:4].sum()  # silent: written through numpy
        _ = a[3:5].sum()  # element 4 never written
    [v] = _watched(body)
    assert v.kernel == "numpy read" and v.details["element"] == [4]


def test_untracked_numpy_views_stay_plain_arrays():
    def body(o):
        with tracking.quiet():
            t = torch.zeros(3)
        assert type(t.numpy()) is np.ndarray
    assert _watched(body) == []


def test_memory_op_operands_come_by_position_or_keyword():
    op = _Args(("P",), {"mask": "M", "cache_policy": None}, _LOAD)
    assert (op.get(0), op.get(1)) == ("P", "M")
    op.set(1, "N")
    assert op.kwargs["mask"] == "N" and op.args == ["P"]


@pytest.mark.interpreter
@pytest.mark.parametrize("check_views", [True, False])
def test_out_of_view_reports_can_be_turned_off(check_views):
    import triton
    import triton.language as tl

    @triton.jit
    def rows(w, out, R: tl.constexpr):
        r = tl.arange(0, R)
        tl.store(out + r, tl.load(w + r))

    o = ShadowOracle(check_views=check_views)
    o.start()
    try:
        o.begin_op(0, {"op": "t"})
        stacked = tracking.track(torch.randn(2, 4), "stacked")
        rows[(1,)](stacked[0, :2], torch.zeros(4), R=4)
    finally:
        vs = o.finish()
    assert [(v.kind, v.tensor) for v in vs] == ([("out-of-bounds", "stacked")] if check_views else [])


def test_index_fill_wraps_negative_indices_like_torch():
    t = torch.zeros(2, 4)
    ix = torch.tensor([-1])
    [(_, index, _, _, negatives)] = fx.index_slots("index_fill_", (t, 1, ix, 0.0))
    assert negatives and fx.out_of_range(index, 4, negatives) is None
    eff = fx.exact_effects(aten.index_fill_.int_Scalar, (t, 1, ix, 0.0), {})
    assert _offsets(t, eff.writes[0][1]) == [3, 7]

    def body(o):
        m = torch.empty(2, 4)
        m[:, :3] = 1.0
        m.index_fill_(1, torch.tensor([-1]), 0.0)
        _ = m.sum()
    assert _watched(body) == []


@pytest.mark.parametrize("op", ["where", "index_select", "gather", "take", "masked_select", "index"])
def test_out_variants_of_indexed_ops_write_their_out_argument(op):
    src, cond = torch.arange(4.0), torch.tensor([True, False, True, False])
    calls = {"where": lambda out: torch.where(cond, src, torch.zeros(4), out=out),
             "index_select": lambda out: torch.index_select(src, 0, torch.tensor([3, 0, 1, 2]), out=out),
             "gather": lambda out: torch.gather(src, 0, torch.tensor([3, 0, 1, 2]), out=out),
             "take": lambda out: torch.take(src, torch.tensor([3, 0, 1, 2]), out=out),
             "masked_select": lambda out: torch.masked_select(src, torch.ones(4, dtype=torch.bool), out=out),
             "index": lambda out: torch.ops.aten.index.Tensor_out(src, [torch.tensor([3, 0, 1, 2])], out=out)}

    def body(o):
        buf = torch.empty(6)
        calls[op](buf[:4])
        _ = buf[:4].sum()  # silent: the op wrote its out=
        _ = buf[4].item()  # never written
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["element"] == [4]


def test_dlpack_export_outside_torch_counts_as_written_and_torch_aliases_stay_checked():
    def body(o):
        t = torch.empty(6, dtype=torch.int64)
        np.from_dlpack(t[:4])[:] = 1  # numpy's writes cannot be seen: the exported bytes count as written
        _ = t[:4].sum()
        alias = torch.from_dlpack(t)  # a torch alias: its accesses are seen, nothing is assumed
        _ = alias[4].item()  # never written
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["element"] == [4]


def test_meta_and_sparse_tensors_have_no_memory_to_track():
    def body(o):
        x, w = torch.empty(4, 8, device="meta"), torch.empty(8, 2, device="meta")
        _ = (x @ w).sum()  # shapes only: nothing is read
        with torch.sparse.check_sparse_tensor_invariants(enable=True):  # (torch 2.11 warns if left implicit)
            s = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), (2, 2),
                                        check_invariants=True)
        _ = s.to_dense() @ torch.ones(2)
    assert _watched(body) == []
    assert not fx.has_memory(torch.empty(2, device="meta")) and fx.has_memory(torch.empty(2))


def test_numpy_advanced_indexing_reads_the_picked_elements():
    def body(o):
        t = torch.empty(6, dtype=torch.int64)
        a = t.numpy()
        a[:4] = 1
        assert type(a[[0, 1]]) is np.ndarray  # a copy: plain numpy memory
        _ = a[np.array([True, False, True, False, False, False])].sum()  # silent: written elements
        _ = a[[0, 5]]  # element 5 never written
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["element"] == [5]


def test_np_take_and_np_where_read_only_what_they_pick():
    def body(o):
        t = torch.empty(6)
        a = t.numpy()
        a[:3] = 1.0
        _ = np.take(a, np.array([0, 2]))
        _ = np.where(np.array([True, True, False, False, False, False]), a, 0.0)
        _ = np.take(a, [4])  # never written
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["element"] == [4]


def test_embedding_bag_reads_the_named_rows_but_the_padding_row():
    def body(o):
        w = torch.empty(6, 2)
        w[:4] = 1.0
        _ = torch.nn.functional.embedding_bag(torch.tensor([0, 1, 5]), w, torch.tensor([0, 2]), padding_idx=5)
        _ = torch.nn.functional.embedding_bag(torch.tensor([0, 4]), w, torch.tensor([0]))  # row 4 never written
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["element"] == [4, 0]


def test_untyped_storage_resize_grows_unwritten_bytes():
    def body(o):
        t = torch.zeros(4)
        st = t.untyped_storage()
        st.resize_(32)
        t.set_(st, 0, (8,), (1,))
        _ = t[:4].sum()  # the old bytes keep their state
        _ = t[4:].sum()  # grown: never written
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["byte_offset"] == 16
    assert torch.UntypedStorage.resize_ is torch._C.StorageBase.resize_  # uninstalled


def test_a_view_with_gaps_is_tracked_run_by_run():
    def body(o):
        table = torch.zeros(4, 8, dtype=torch.int64)
        mapping = tracking.track(table[:, :4], "mapping", per_step=True)
        o.begin_op(1, {"op": "next"})
        mapping[:3] = 1
        _ = table[:, 4:].sum()  # the other columns are not part of the per-step view
        _ = mapping.sum()  # row 3 of the view: last written before this op
    [v] = _watched(body)
    assert (v.kind, v.tensor) == ("stale-read", "mapping")


def test_numpy_functions_returning_views_read_nothing_and_their_views_stay_watched():
    def body(o):
        t = torch.empty(2, 4)
        a = t.numpy()
        flat = np.ravel(a)  # a view: no read
        first, second = np.split(flat, 2)
        first[:] = 1.0
        second[:3] = 2.0
        a.flat[7] = 3.0
        _ = t.sum()  # every element written through a view numpy made
        u = torch.empty(4)
        b = np.ravel(u.numpy())
        b[:3] = 0.0
        _ = u.sum()  # element 3 never written
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["element"] == [3]


def test_torch_tensors_handed_to_numpy_beside_a_watched_array_are_read():
    def body(o):
        src = torch.empty(4, dtype=torch.int32)
        src[:3] = 1
        dst2 = torch.empty(4, dtype=torch.int32).numpy()
        dst2[:3] = src[:3]  # written elements: silent
        dst2[:] = src  # element 3 of src never written
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.kernel == "numpy read" and v.details["element"] == [3]


def test_numpy_copies_and_stored_values_of_a_tensor_are_reads_not_exports():
    def body(o):
        t = torch.empty(4)
        t[:3] = 1.0
        h = np.zeros(8, dtype=np.float32)  # numpy's own memory
        h[:3] = t[:3]  # silent: written elements
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            _ = np.array(t[:3])
        h[:4] = t  # element 3 never written: a read, and t is not counted as written by it
        o.begin_op(1, {"op": "next"})
        with warnings.catch_warnings():  # torch's __array__ takes no copy=: numpy warns, then retries
            warnings.simplefilter("ignore", DeprecationWarning)
            _ = np.array(t)
    vs = _watched(body)  # the store, then (in the next op) the copy
    assert [(v.kind, v.details["element"], v.details["op_index"]) for v in vs] == [
        ("uninitialized-read", [3], 0), ("uninitialized-read", [3], 1)]


@pytest.mark.parametrize("spelling", ["slice", "key"])
def test_a_subscript_store_of_a_tensor_into_numpy_memory_is_a_read_however_it_is_spelled(spelling):
    """``h[:4] = t`` compiles to its own opcode from Python 3.12 on (STORE_SLICE): there the store was once
    taken for an export, and its read of a never-written element went unreported (the GPU image's 3.12)."""
    def body(o):
        t = torch.empty(4)
        t[:3] = 1.0
        h = np.zeros(8, dtype=np.float32)
        if spelling == "slice":
            h[:4] = t
        else:
            k = slice(0, 4)
            h[k] = t
    vs = _watched(body)
    assert [(v.kind, v.details["element"]) for v in vs] == [("uninitialized-read", [3])]


def test_every_subscript_store_opcode_of_this_python_is_known():
    """The stores of this Python's compiler, every spelling: each one a store to the host views."""
    import dis

    from fuzzrunner.oracles.shadow.host_views import STORE_OPS
    code = compile("h[:4] = t\nh[1:n:2] = t\nh[k] = t\nh[a, :] = t\nh[...] = t", "<stores>", "exec")
    stores = {i.opname for i in dis.get_instructions(code) if i.opname.startswith("STORE_") and i.opname not in (
        "STORE_NAME", "STORE_FAST", "STORE_GLOBAL", "STORE_ATTR")}
    assert stores and stores <= STORE_OPS


def test_random_fills_and_foreach_zero_and_copy_write_without_reading():
    def body(o):
        x = torch.empty(4)
        x.bernoulli_(torch.full((4,), 0.5))
        y = torch.empty(4)
        y.cauchy_()
        g = torch.empty(4)
        g.geometric_(0.5)
        a, b = torch.empty(4), torch.empty(3)
        torch._foreach_zero_([a, b])
        c = torch.empty(2)
        torch._foreach_copy_([c], [torch.ones(2)])
        _ = x.sum() + y.sum() + g.sum() + a.sum() + b.sum() + c.sum()
    assert _watched(body) == []


def test_collectives_without_alias_annotations_are_probed_once_their_work_is_done():
    """c10d's ops mutate unannotated operands and return a Work: all_gather's output is written, not
    read; all_reduce's tensor is read (and written)."""
    import torch.distributed as dist
    made = not dist.is_initialized()  # an in-process engine target earlier in this pytest worker may have one
    if made:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        def body(o):
            out = torch.empty(2)
            with warnings.catch_warnings():  # all_gather_into_tensor is deprecated in this torch
                warnings.simplefilter("ignore", FutureWarning)
                dist.all_gather_into_tensor(out, torch.ones(2))
            _ = out.sum()  # written by the gather: silent
            counts = torch.empty(2, dtype=torch.int32)
            counts[0] = 3
            dist.all_reduce(counts)  # counts[1] never written
            _ = counts.max()
        [v] = _watched(body)
        assert (v.kind, v.kernel, v.details["element"]) == ("uninitialized-read", "c10d.allreduce_.default", [1])
    finally:
        if made:
            dist.destroy_process_group()


def test_embedding_with_max_norm_renormalizes_only_the_rows_it_looks_up():
    def body(o):
        w = torch.empty(6, 2)
        w[:3] = 2.0
        _ = torch.nn.functional.embedding(torch.tensor([0, 2]), w, max_norm=1.0)
        _ = torch.nn.functional.embedding(torch.tensor([4]), w, max_norm=1.0)  # row 4 never written
    [v] = _watched(body)
    assert (v.kind, v.kernel, v.details["element"]) == ("uninitialized-read", "aten.embedding_renorm_.default", [4, 0])


def test_np_asarray_of_a_watched_array_stays_watched_and_numpy_is_restored():
    def body(o):
        t = torch.empty(4)
        b = np.asarray(t.numpy())  # numpy strips the subclass: the view must still be watched
        b[:3] = 1.0
        np.ascontiguousarray(t.numpy())[3:] = 2.0
        _ = t.sum()
        u = torch.empty(2)
        np.asarray(u.numpy())[:1] = 0.0
        _ = u.sum()  # element 1 never written
    [v] = _watched(body)
    assert v.kind == "uninitialized-read" and v.details["element"] == [1]
    assert not hasattr(np.asarray, "__wrapped__")
