"""The device shadow's region lookup (fuzzrunner/oracles/shadow/gpu/regions.py): every torch op asks
which tracked regions its storages touch, through an index kept beside the regions (sorted starts and
a running maximum of ends). It must answer what a walk of every region answers, through any sequence of
tracking, nested regions, re-tracking and frees."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzrunner.oracles.shadow.gpu.regions import DeviceShadow, Region

_SPAN = st.tuples(st.integers(0, 200), st.integers(0, 60))  # (start, bytes): small, so spans collide often
_STEP = st.one_of(
    st.tuples(st.just("add"), _SPAN, st.sampled_from([1, 2, 4])),
    st.tuples(st.just("inner"), _SPAN, st.just(1)),   # a region inside others, as a tracked view's
    st.tuples(st.just("remove"), st.integers(0, 30), st.just(0)),
)


def _walk(regions: list, start: int, nbytes: int) -> list:
    end = start + max(nbytes, 1)
    return [r for r in regions if r.start < end and start < r.end]


@settings(max_examples=300, deadline=None)
@given(st.lists(_STEP, max_size=25), st.lists(_SPAN, min_size=1, max_size=8))
def test_the_index_answers_what_a_walk_of_every_region_answers(steps, queries):
    shadow = DeviceShadow("cpu")
    for kind, a, b in steps:
        if kind == "add":
            start, nbytes = a
            shadow.add(start, max(nbytes, b), "t", per_step=False, initialized=True, itemsize=b, shape=(1,))
        elif kind == "inner":
            start, nbytes = a
            shadow.append(Region(start, max(nbytes, 1), "v", False, 1, (1,), None))
        elif shadow.regions:
            shadow.remove(shadow.regions[a % len(shadow.regions)])
        for start, nbytes in queries:  # asked after every step, as each op asks
            assert shadow.overlapping(start, nbytes) == _walk(shadow.regions, start, nbytes)
            assert shadow.any_overlapping([(start, nbytes)]) == bool(_walk(shadow.regions, start, nbytes))
    assert shadow.any_overlapping(queries) == any(_walk(shadow.regions, s, n) for s, n in queries)


def test_a_region_re_tracked_with_the_same_bytes_keeps_its_epochs_and_its_place():
    shadow = DeviceShadow("cpu")
    first = shadow.add(64, 32, "a", per_step=False, initialized=False, itemsize=4, shape=(8,))
    again = shadow.add(64, 32, "a", per_step=True, initialized=True, itemsize=4, shape=(8,))
    assert again is first and first.per_step
    assert shadow.overlapping(70, 1) == [first] and shadow.regions == [first]


@pytest.mark.parametrize("gap", [0, 1])
def test_a_span_ending_where_a_region_starts_does_not_touch_it(gap):
    shadow = DeviceShadow("cpu")
    r = shadow.add(100, 16, "a", per_step=False, initialized=True, itemsize=4, shape=(4,))
    assert shadow.overlapping(84 + gap, 16) == ([r] if gap else [])
    assert shadow.overlapping(116, 8) == []
    assert not shadow.any_overlapping([(0, 100), (116, 50)])
    assert torch.equal(r.shadow, torch.zeros(4, dtype=torch.int32))  # type: ignore[arg-type]


def test_a_table_made_during_a_capture_is_never_reused():
    """A captured table is filled only when its graph replays: a later launch on the same buffers (eager,
    or in another capture) gets a table of its own; one made outside a capture is reused, in captures on its stream too.
    (The GPU half: tests/power/test_gpu_shadow.py, test_a_table_made_inside_a_capture_...)."""
    shadow = DeviceShadow("cpu")
    a, b = torch.zeros(8), torch.zeros(8)
    shadow.add(a.data_ptr(), 32, "a", per_step=True, initialized=True, itemsize=4, shape=(8,))
    args = [("src", a), ("dst", b)]
    ids = [shadow.table(args, "k", "k.py", True)[2] for _ in range(2)]
    assert ids[0] != ids[1]  # each captured launch: its own table
    eager = [shadow.table(args, "k", "k.py", False)[2] for _ in range(2)]
    assert eager[0] == eager[1]  # the first eager launch made one, the next reused it
    assert all(i in shadow.launches for i in ids + eager)  # every record lives for the case (ring entries name it)
    assert shadow.table(args, "k", "k.py", True)[2] == eager[0]  # filled already: a capture may use it


def test_ring_entries_come_back_in_one_order_whatever_order_the_programs_wrote_them():
    """Racing programs append to the ring in any order: the entries are read back by launch, program id
    (x, y, z, as Triton's interpreter runs them), line and element, so a case's first report of a bad
    read is the same in every run."""
    import random

    from fuzzrunner.oracles.shadow.gpu import device_checks as dc
    from fuzzrunner.oracles.shadow.gpu.regions import HEAD
    shadow = DeviceShadow("cpu")
    want = [[dc.UNINIT, dc.READ, 0, elem, x, y, z, line, 0, launch]
            for launch in (3, 4) for x in range(2) for y in range(2) for z in range(2) for line in (30, 31)
            for elem in (1, 0)][:HEAD // dc.WORDS]
    want.sort(key=lambda e: (e[9], e[4], e[5], e[6], e[7], e[3]))
    raced = want[:]
    random.Random(5).shuffle(raced)
    assert raced != want
    for i, (_, _, reg, elem, x, y, z, line, wep, launch) in enumerate(raced):
        w0 = dc.UNINIT | (dc.READ << 2) | (reg << 4) | (line << 20)
        words = [w0, x | (y << 31) | (z << 47), elem, wep | (launch << 32)]
        shadow.ring[1 + i * dc.WORDS:1 + (i + 1) * dc.WORDS] = torch.tensor(words)
    shadow.ring[0] = len(raced)
    assert shadow.ring_entries(shadow.ring[:HEAD].clone()) == want


@pytest.mark.parametrize("kept", [0, 3, 8, 9, 40])
def test_ring_entries_beyond_the_head_read_back_are_fetched_and_the_ring_emptied(kept):
    """Each op reads back the ring's head only (its counter and first entries): an op that kept more
    entries fetches the rest, none is lost, and the ring is emptied for the next op."""
    from fuzzrunner.oracles.shadow.gpu import device_checks as dc
    from fuzzrunner.oracles.shadow.gpu.regions import HEAD
    shadow = DeviceShadow("cpu")
    want = [[dc.STALE, dc.READ, i % 7, 100 + i, i, 0, 0, 40 + i, 3, 5] for i in range(kept)]
    for i, _ in enumerate(want):  # packed as _sh_record packs them
        w0 = dc.STALE | (dc.READ << 2) | ((i % 7) << 4) | ((40 + i) << 20)
        shadow.ring[1 + i * dc.WORDS:1 + (i + 1) * dc.WORDS] = torch.tensor([w0, i, 100 + i, 3 | (5 << 32)])
    shadow.ring[0] = kept
    assert shadow.ring_entries(shadow.ring[:HEAD].clone()) == want
    assert int(shadow.ring[0]) == 0
