"""Bounds per view: a kernel given ``W[s]`` (one adapter's slice of stacked weights) that reads
into ``W[s+1]`` stays inside W's storage, so per-storage bounds cannot see it.

At a launch, each tensor argument that is a view (it does not span its whole storage) gives
its byte span [first element, last element]. A kernel lane inside such a storage but outside
the spans of every argument on that storage read outside the views it was given. The lane is
not masked (the memory is valid and masking would change the program's results): it is
reported as out-of-bounds, with ``details["view"]``.
"""

from __future__ import annotations

import numpy as np


def span(t) -> tuple[int, int]:
    """[first byte, end) of the elements of view ``t``, from its strides (no per-element work)."""
    item = t.element_size()
    lo = hi = t.untyped_storage().data_ptr() + t.storage_offset() * item
    for size, stride in zip(t.shape, t.stride()):
        reach = (size - 1) * stride * item
        lo, hi = (lo + reach, hi) if reach < 0 else (lo, hi + reach)
    return lo, hi + item


class LaunchViews:
    def __init__(self, args: dict):
        spans: dict = {}
        for name, t in args.items():
            st = t.untyped_storage()
            if t.numel() == 0 or not st.nbytes():
                continue
            lo, hi = span(t)
            spans.setdefault(st.data_ptr(), (st.data_ptr() + st.nbytes(), [], []))
            spans[st.data_ptr()][1].append((lo, hi))
            spans[st.data_ptr()][2].append(name)
        # only storages that no argument covers whole can be read outside a view
        self.storages = [(s, e, np.array(sp, dtype=np.uint64), names) for s, (e, sp, names) in spans.items()
                         if not any(lo <= s and hi >= e for lo, hi in sp)]

    def outside(self, addrs: np.ndarray, itemsize: int):
        """(lane mask, argument names) of the first storage some lane reads outside its views, or None."""
        for start, end, spans, names in self.storages:
            inside = (addrs >= np.uint64(start)) & (addrs < np.uint64(end))
            if not inside.any():
                continue
            ok = np.zeros(addrs.shape, dtype=bool)
            for lo, hi in spans:
                ok |= (addrs >= lo) & (addrs + np.uint64(itemsize) <= hi)
            bad = inside & ~ok
            if bad.any():
                return bad, names
        return None
