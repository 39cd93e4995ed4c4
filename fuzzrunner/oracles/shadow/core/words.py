"""The words of the shadow oracle's reports: one message (and its details) per bad access."""

from __future__ import annotations

from ...base import source_location
from .span import BadAccess


def describe(b: BadAccess, kernel: str, name: str, details: dict, op_index: int) -> str:
    """The message of bad access ``b`` of ``name``; adds its facts to ``details``."""
    if b.kind == "out-of-bounds" and b.view:
        details["view"] = b.view
        return (f"{kernel} read {hex(b.address)}, inside {name}'s storage but outside the view(s) "
                f"{', '.join(b.view)} it was given (an adapter slice read past its end?)")
    if b.kind == "out-of-bounds":
        where = (f"{b.byte_offset} byte(s) outside {name}" if b.allocation else "outside every tracked allocation")
        details["distance_bytes"] = b.byte_offset
        return f"{kernel} accessed {hex(b.address)}, {where}; the lane was masked off"
    element = b.allocation.element(b.byte_offset)  # type: ignore[union-attr]
    details.update(element=list(element), byte_offset=b.byte_offset)
    if b.kind == "stale-read":
        details["written_in_op"] = b.written_epoch - 1
        when = f"op {b.written_epoch - 1}" if b.written_epoch > 0 else "set-up, before op 0"
        why = f"last written in {when}, not in this op {op_index}"
    else:
        why = "never written"
    pid = f" (program {tuple(details['program_id'])})" if "program_id" in details else ""
    return f"{kernel}{pid} read {name}[{', '.join(map(str, element))}] (byte {b.byte_offset}): {why}"


def describe_sub_buffer(addr: int, itemsize: int, view: tuple, into: str | None, kernel: str,
                        details: dict, whole: bool = False) -> str:
    """A lane through a pointer derived from registered view ``view`` = (lo, hi, name) that left it (``whole``:
    the tensor argument's whole storage, which it left into another allocation)."""
    lo, hi, name = view
    into = into or "untracked memory"
    dist = lo - addr if addr < lo else addr + itemsize - hi
    side = "before the start" if addr < lo else "past the end"
    details.update(address=hex(addr), view=[name], into=into, distance_bytes=dist)
    verb = "read" if details.get("access") == "read" else "wrote"
    what = f"the storage of {name}" if whole else f"the view {name}"
    return f"{kernel} {verb} {hex(addr)}, {dist} byte(s) {side} of {what} it was given, into {into}"


def indexed_out_of_range(func: str, name: str, index: int, rows: int, count: int) -> str:
    """An indexing op's index past the indexed dim (the op was given row 0 instead)."""
    return (f"{func} indexed row {index} of {name} (size {rows} along the indexed dim); "
            f"{count} such index(es); redirected to row 0 so the case could go on")


# The names of buffers the oracle tracks on its own (a report's tensor): the same in both modes.
def made_at(maker: str, where: tuple) -> str:
    """A buffer named by what made it and the user's line, ``where`` = (path, line): ``torch.empty@f.py:12``
    (``signature.py`` matches it by that line's function, as it does a site)."""
    return f"{maker}@{source_location(*where)}"


def unnamed(shape) -> str:
    """A tensor neither tracked nor given to the kernel (reached through a pointer array, or indexed): its shape."""
    return f"<{tuple(shape)} tensor>"


def argument(kernel: str, name: str) -> str:
    """A kernel's argument storage, tracked (as written memory) for its launch."""
    return f"{kernel}:{name}"
