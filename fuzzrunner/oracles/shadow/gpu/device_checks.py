"""The checks an instrumented Triton kernel runs at each memory op (``instrument.py`` puts them in).

Each check maps every lane's address to a shadow element through the launch's *region table*
(``table``, int64, one row per region: start, end, shadow offset, log2 of the itemsize, flags; row 0 is
the header: the launch id and the number of regions), loads the lane's epoch from the shadow (``arena`` + offset, int32,
``NEVER`` = never written), and appends one ring entry per bad lane to ``ring`` (int64: a counter
at 0, then ``CAP`` entries of ``WORDS`` packed values). The epoch of the running op is ``cell[0]``, a
device scalar the host sets at each op, so a kernel captured in a CUDA graph checks against the
op that replays it. Lanes outside every region are switched off (as the CPU oracle masks them:
the load or store would fault), and so are never-written lanes of a load (the load gives ``other``,
0 by default, the same on every run).

A region's rows are matched in order; a later row wins, so the host lists whole argument
storages first and the tracked regions inside them after.
"""

import triton
import triton.language as tl

NEVER = -1
FIELDS = 10  # kind, access, region, element (or address), pid 0..2, line, written epoch, launch
WORDS = 4    # a ring entry on the device: those fields packed (``_sh_record``, ``unpack``)
ROW = 5      # region row: start, end, shadow offset (from the arena base), log2 itemsize, flags
PER_STEP, SHADOWED = 1, 2  # flags: a per-step region; a region with a shadow (else written memory)
UNINIT, STALE, OOB = 1, 2, 3
READ, WRITE, RMW = 0, 1, 2


@triton.jit
def _sh_lanes(addr, SIZE: tl.constexpr, table, zero, nreg):
    """Per lane (the general case): each lane finds its last row holding it, then reads that row."""
    reg = zero - 1
    for r in range(0, nreg):  # a runtime loop: one kernel compiles for any number of regions
        lo = tl.load(table + (r + 1) * 5)
        hi = tl.load(table + (r + 1) * 5 + 1)
        reg = tl.where((addr >= lo) & (addr + SIZE <= hi), zero + r, reg)
    found = reg >= 0
    row = table + (tl.maximum(reg, 0) + 1) * 5
    lo = tl.load(row, mask=found, other=0)
    off = tl.load(row + 2, mask=found, other=0)
    shift = tl.load(row + 3, mask=found, other=0)
    flags = tl.load(row + 4, mask=found, other=0)
    return found, reg, flags & 2, off + ((addr - lo) >> shift), flags & 1


@triton.jit
def _sh_locate(addr, m, SIZE: tl.constexpr, table):
    """Per lane: inside a region?, its region row, has it a shadow?, its shadow element, per-step?

    The fast path: the active lanes' address span ``[min, max + SIZE)`` is matched against the rows
    once, on scalars. When the last row it overlaps holds all of it (a tile inside one tensor, the
    usual case), or it overlaps none, every active lane's answer is that row's: no per-lane search.
    Otherwise (a tile across regions) each lane searches the rows."""
    zero = addr * 0
    nreg = tl.load(table + 1)
    span = tl.where(m, addr, 0x7FFFFFFFFFFFFFFF) + tl.zeros([1], dtype=tl.int64)  # at least 1-D
    amin = tl.min(span)
    amax = tl.max(tl.where(m, addr, -1) + tl.zeros([1], dtype=tl.int64)) + SIZE
    last = nreg * 0 - 1
    whole = nreg * 0
    for r in range(0, nreg):
        lo = tl.load(table + (r + 1) * 5)
        hi = tl.load(table + (r + 1) * 5 + 1)
        over = (lo < amax) & (amin < hi)
        last = tl.where(over, r, last)
        whole = tl.where(over, ((lo <= amin) & (amax <= hi)).to(tl.int64), whole)
    if (whole != 0) | (last < 0):
        row = table + (tl.maximum(last, 0) + 1) * 5
        lo = tl.load(row)
        off = tl.load(row + 2)
        shift = tl.load(row + 3)
        flags = tl.load(row + 4)
        found = (zero + last) >= 0
        reg = zero + last
        shadowed = zero + (flags & 2)
        sidx = off + ((addr - lo) >> shift)
        step = zero + (flags & 1)
    else:
        found, reg, shadowed, sidx, step = _sh_lanes(addr, SIZE, table, zero, nreg)
    return found, reg, shadowed, sidx, step


@triton.jit
def _sh_record(kind, reg, elem, wep, ring, launch, ACCESS: tl.constexpr, LINE: tl.constexpr,
               CAP: tl.constexpr):
    """One ring entry (``WORDS`` packed int64, ``unpack`` reads them) per lane with ``kind > 0``; the
    counter keeps counting past ``CAP``."""
    bad = kind > 0
    slot = tl.atomic_add(ring + kind * 0, kind * 0 + 1, mask=bad)
    ok = bad & (slot < CAP)
    at = ring + 1 + slot * 4
    pids = tl.program_id(0).to(tl.int64) | (tl.program_id(1).to(tl.int64) << 31) | (tl.program_id(2).to(tl.int64) << 47)
    tl.store(at, kind | (ACCESS << 2) | ((reg & 0xFFFF) << 4) | (LINE << 20), mask=ok)  # reg -1: no region
    tl.store(at + 1, kind * 0 + pids, mask=ok)
    tl.store(at + 2, elem, mask=ok)
    tl.store(at + 3, (wep & 0xFFFFFFFF) | ((kind * 0 + launch) << 32), mask=ok)  # wep: int64, -1 never written


def unpack(words: list[int]) -> list[int]:
    """A ring entry's four words as ``FIELDS`` values: kind, access, region row, element (or address),
    program id 0..2, line, written epoch, launch id."""
    w0, pids, elem, w3 = words
    wep = w3 & 0xFFFFFFFF
    reg = (w0 >> 4) & 0xFFFF
    return [w0 & 3, (w0 >> 2) & 3, -1 if reg == 0xFFFF else reg, elem, pids & 0x7FFFFFFF, (pids >> 31) & 0xFFFF,
            (pids >> 47) & 0xFFFF, w0 >> 20, wep - (1 << 32) if wep >= 1 << 31 else wep, w3 >> 32]


@triton.jit
def _sh_check(ptr, mask, HAS_MASK: tl.constexpr, ACCESS: tl.constexpr, LINE: tl.constexpr,
              table, arena, ring, cell, CAP: tl.constexpr):
    """Check one memory op; return (lanes in a region, lanes never written, shadow element)."""
    addr = ptr.to(tl.int64)
    SIZE: tl.constexpr = ptr.dtype.element_ty.primitive_bitwidth // 8
    if HAS_MASK:
        m = mask & (addr == addr)
    else:
        m = addr == addr
    found, reg, shadowed, sidx, step = _sh_locate(addr, m, SIZE, table)
    epoch = tl.load(cell)
    launch = tl.load(table)
    has = m & found & (shadowed != 0)
    ep = tl.load(arena + sidx, mask=has, other=0).to(tl.int64)
    if ACCESS == 1:  # a store reads nothing
        never = has & (ep != ep)
        stale = never
    else:
        never = has & (ep == -1)
        stale = has & (step != 0) & (ep != -1) & (ep < epoch)
    oob = m & (found == 0)
    kind = tl.where(oob, 3, tl.where(never, 1, tl.where(stale, 2, 0))).to(tl.int64)
    if tl.max(kind + tl.zeros([1], dtype=tl.int64)) > 0:  # the record's stores run only for a bad access
        elem = tl.where(oob, addr, sidx)
        _sh_record(kind, reg, elem, ep, ring, launch, ACCESS, LINE, CAP)
    if ACCESS != 0:  # stores and atomics stamp the epoch
        tl.store(arena + sidx, (ep * 0 + epoch).to(tl.int32), mask=has)
    return m & found, never


@triton.jit
def sh_load(ptr, mask, other, HAS_MASK: tl.constexpr, HAS_OTHER: tl.constexpr, CACHE: tl.constexpr,
            EVICT: tl.constexpr, VOLATILE: tl.constexpr, LINE: tl.constexpr,
            table, arena, ring, cell, CAP: tl.constexpr):
    ok, never = _sh_check(ptr, mask, HAS_MASK, 0, LINE, table, arena, ring, cell, CAP)
    if HAS_OTHER:
        return tl.load(ptr, mask=ok & (never == 0), other=other, cache_modifier=CACHE,
                       eviction_policy=EVICT, volatile=VOLATILE)
    else:
        return tl.load(ptr, mask=ok & (never == 0), other=0, cache_modifier=CACHE,
                       eviction_policy=EVICT, volatile=VOLATILE)


@triton.jit
def sh_store(ptr, value, mask, HAS_MASK: tl.constexpr, CACHE: tl.constexpr, EVICT: tl.constexpr,
             LINE: tl.constexpr, table, arena, ring, cell, CAP: tl.constexpr):
    ok, never = _sh_check(ptr, mask, HAS_MASK, 1, LINE, table, arena, ring, cell, CAP)
    tl.store(ptr, value, mask=ok, cache_modifier=CACHE, eviction_policy=EVICT)


@triton.jit
def sh_atomic(OP: tl.constexpr, ptr, val, mask, HAS_MASK: tl.constexpr, SEM: tl.constexpr,
              SCOPE: tl.constexpr, LINE: tl.constexpr, table, arena, ring, cell,
              CAP: tl.constexpr):
    ok, never = _sh_check(ptr, mask, HAS_MASK, 2, LINE, table, arena, ring, cell, CAP)
    if OP == "add":
        return tl.atomic_add(ptr, val, mask=ok, sem=SEM, scope=SCOPE)
    elif OP == "max":
        return tl.atomic_max(ptr, val, mask=ok, sem=SEM, scope=SCOPE)
    elif OP == "min":
        return tl.atomic_min(ptr, val, mask=ok, sem=SEM, scope=SCOPE)
    elif OP == "xchg":
        return tl.atomic_xchg(ptr, val, mask=ok, sem=SEM, scope=SCOPE)
    elif OP == "and":
        return tl.atomic_and(ptr, val, mask=ok, sem=SEM, scope=SCOPE)
    elif OP == "or":
        return tl.atomic_or(ptr, val, mask=ok, sem=SEM, scope=SCOPE)
    else:
        return tl.atomic_xor(ptr, val, mask=ok, sem=SEM, scope=SCOPE)


@triton.jit
def sh_atomic_cas(ptr, cmp, val, SEM: tl.constexpr, SCOPE: tl.constexpr, LINE: tl.constexpr,
                  table, arena, ring, cell, CAP: tl.constexpr):
    """``atomic_cas`` has no mask: its lanes are checked and stamped, never switched off."""
    ok, never = _sh_check(ptr, None, False, 2, LINE, table, arena, ring, cell, CAP)
    return tl.atomic_cas(ptr, cmp, val, sem=SEM, scope=SCOPE)


HELPERS = {"load": sh_load, "store": sh_store, "atomic": sh_atomic, "atomic_cas": sh_atomic_cas}
_ = triton  # the module is imported for its decorator


@triton.jit
def check_epochs(sh, elem, n, cell, log, PER_STEP: tl.constexpr, HAS_ELEM: tl.constexpr, ACCUM: tl.constexpr,
                 BLOCK: tl.constexpr):
    """A torch op's read of ``n`` elements whose epochs are ``sh`` (int32, contiguous): writes one log
    row (kind of the first bad element, bad count, its position or ``elem[pos]``, its epoch). With
    ``ACCUM`` (a row captured in a CUDA graph, written at every replay) the count adds to the row's and
    a row already holding a bad read keeps it."""
    epoch = tl.load(cell)
    count = tl.sum(tl.zeros((BLOCK,), dtype=tl.int64), axis=0)
    first = count + n
    for start in range(0, n, BLOCK):
        i = start + tl.arange(0, BLOCK)
        m = i < n
        ep = tl.load(sh + i, mask=m, other=0).to(tl.int64)
        bad = m & (ep == -1)
        if PER_STEP:
            bad = bad | (m & (ep != -1) & (ep < epoch))
        count += tl.sum(bad.to(tl.int64), axis=0)
        first = tl.minimum(first, tl.min(tl.where(bad, i.to(tl.int64), n + 0 * i.to(tl.int64)), axis=0))
    hit = first < n
    ep0 = tl.load(sh + first, mask=hit, other=0).to(tl.int64)
    kind = tl.where(hit, tl.where(ep0 == -1, 1, 2), 0).to(tl.int64)
    if HAS_ELEM:
        where = tl.load(elem + first, mask=hit, other=0).to(tl.int64)
    else:
        where = first
    if ACCUM:
        before = tl.load(log + 1)
        if before > 0:
            kind = tl.load(log)
            where = tl.load(log + 2)
            ep0 = tl.load(log + 3)
        count += before
    tl.store(log, kind)
    tl.store(log + 1, count)
    tl.store(log + 2, where)
    tl.store(log + 3, ep0)


@triton.jit
def index_bounds(ix, out, n, lo, hi, log, BLOCK: tl.constexpr):
    """An indexing op's ``n`` indices ``ix`` (contiguous) into ``out``, each one outside ``[lo, hi)``
    replaced by 0 (as the CPU oracle redirects it, so that the op cannot fault); one log row: the bad
    count (twice, the row's kind and count), the first bad position, its index. One launch in place of a
    comparison, a mask and a sum of torch ops."""
    count = tl.sum(tl.zeros((BLOCK,), dtype=tl.int64), axis=0)
    first = count + n
    for start in range(0, n, BLOCK):
        i = start + tl.arange(0, BLOCK)
        m = i < n
        v = tl.load(ix + i, mask=m, other=0)
        wide = v.to(tl.int64)
        bad = m & ((wide < lo) | (wide >= hi))
        tl.store(out + i, tl.where(bad, 0, v).to(v.dtype), mask=m)
        count += tl.sum(bad.to(tl.int64), axis=0)
        first = tl.minimum(first, tl.min(tl.where(bad, i.to(tl.int64), n + 0 * i.to(tl.int64)), axis=0))
    hit = first < n
    value = tl.load(ix + first, mask=hit, other=0).to(tl.int64)
    tl.store(log, count)
    tl.store(log + 1, count)
    tl.store(log + 2, tl.where(hit, first, 0))
    tl.store(log + 3, value)


INTERNAL = (sh_load, sh_store, sh_atomic, sh_atomic_cas, check_epochs, index_bounds)
