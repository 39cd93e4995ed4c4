"""Which shadow elements a torch view covers: the shadow of a tensor, as a view of a region's shadow.

A region keeps one int32 epoch per element of its own item size. A view of the same item size,
inside one region, is the same ``as_strided`` view of the shadow (no copy, no sync). Otherwise
(a view across regions, or reinterpreted with another dtype) the contiguous byte range it spans
is mapped to the elements it touches: for a read, every element touched; for a write, only the
elements it covers whole, so a partial write never hides a never-written byte.
"""

from __future__ import annotations

import torch

from .regions import Region


def byte_span(t: torch.Tensor) -> tuple[int, int]:
    """[lo, hi) of the bytes the view ``t`` can touch."""
    item = t.element_size()
    lo_el = t.storage_offset()
    hi_el = t.storage_offset()
    for size, stride in zip(t.shape, t.stride()):
        if size == 0:
            return 0, 0
        if stride >= 0:
            hi_el += (size - 1) * stride
        else:
            lo_el += (size - 1) * stride
    base = t.untyped_storage().data_ptr()
    return int(base + lo_el * item), int(base + (hi_el + 1) * item)


def shadow_parts(t: torch.Tensor, regions: list[Region], write: bool, span: tuple[int, int] | None = None,
                 skip=None) -> list[tuple[Region, torch.Tensor, bool]]:
    """(region, shadow elements, exact) for each region the view touches; ``exact``: the shadow is
    shaped like ``t`` element for element (a position in it is a position in ``t``). ``span``: the
    view's ``byte_span``, where the caller has it; ``skip(region)``: a region chosen but not wanted
    (nothing to check in it): no view of its shadow is made."""
    if t.numel() == 0:
        return []
    lo, hi = span or byte_span(t)
    out = []
    touched = [r for r in regions if r.start < hi and lo < r.end and r.shadow is not None]
    inner = [r for r in touched if r.start <= lo and hi <= r.end]
    if inner:  # the smallest region holding the whole view (a tracked view inside a tracked storage)
        r = min(inner, key=lambda r: r.nbytes) if len(inner) > 1 else inner[0]
        if skip is not None and skip(r):
            return []
        item = t.element_size()
        base = t.untyped_storage().data_ptr() + t.storage_offset() * item - r.start
        if item == r.itemsize and base % item == 0:
            return [(r, r.shadow.as_strided(t.shape, t.stride(), base // item), True)]  # type: ignore[union-attr]
        touched = [r]
    if not t.is_contiguous() and not write:
        return []  # a strided view across regions or dtypes: not followed (a possible miss, never a report)
    for r in touched:
        if skip is not None and skip(r):
            continue
        a, b = max(lo, r.start) - r.start, min(hi, r.end) - r.start
        if write:
            first, last = -(-a // r.itemsize), b // r.itemsize
        else:
            first, last = a // r.itemsize, -(-b // r.itemsize)
        if last > first:
            out.append((r, r.shadow[first:last], False))  # type: ignore[index]
    return out


def covers(t: torch.Tensor, r: Region, span: tuple[int, int] | None = None) -> bool:
    """Whether a write of the whole view ``t`` (whose ``byte_span`` is ``span``) writes every element of ``r``."""
    lo, hi = span or byte_span(t)
    return t.is_contiguous() and lo <= r.start and r.end <= hi
