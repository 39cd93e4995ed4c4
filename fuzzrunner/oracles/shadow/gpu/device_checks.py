"""The checks an instrumented Triton kernel runs at each memory op (``instrument.py`` puts them in).

Each check maps every lane's address to a shadow element through the launch's *region table*
(``table``, int64, one row per region: start, end, shadow offset, itemsize, flags; row 0 is
the header: the launch id and the number of regions), loads the lane's epoch from the shadow (``arena`` + offset, int32,
``NEVER`` = never written), and appends one ring entry per bad lane to ``ring`` (int64: a counter
at 0, then ``CAP`` entries of ``FIELDS`` values). The epoch of the running op is ``cell[0]``, a
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
ROW = 5      # region row: start, end, shadow offset (from the arena base), itemsize, flags
PER_STEP, SHADOWED = 1, 2  # flags: a per-step region; a region with a shadow (else written memory)
UNINIT, STALE, OOB = 1, 2, 3
READ, WRITE, RMW = 0, 1, 2


@triton.jit
def _sh_locate(addr, SIZE: tl.constexpr, table):
    """Per lane: inside a region?, its region row, has it a shadow?, its shadow element, per-step?"""
    zero = addr * 0
    found = zero != 0
    shadowed = zero
    reg = zero - 1
    sidx = zero
    step = zero
    nreg = tl.load(table + 1)
    for r in range(0, nreg):  # a runtime loop: one kernel compiles for any number of regions
        row = table + (r + 1) * 5
        lo = tl.load(row)
        hi = tl.load(row + 1)
        off = tl.load(row + 2)
        isz = tl.load(row + 3)
        flags = tl.load(row + 4)
        inr = (addr >= lo) & (addr + SIZE <= hi)
        found = found | inr
        reg = tl.where(inr, zero + r, reg)
        shadowed = tl.where(inr, flags & 2, shadowed)
        sidx = tl.where(inr, off + (addr - lo) // isz, sidx)
        step = tl.where(inr, flags & 1, step)
    return found, reg, shadowed, sidx, step


@triton.jit
def _sh_record(kind, reg, elem, wep, ring, launch, ACCESS: tl.constexpr, LINE: tl.constexpr,
               CAP: tl.constexpr):
    """One ring entry per lane with ``kind > 0``; the counter keeps counting past ``CAP``."""
    bad = kind > 0
    slot = tl.atomic_add(ring + kind * 0, kind * 0 + 1, mask=bad)
    ok = bad & (slot < CAP)
    at = ring + 1 + slot * 10
    tl.store(at, kind, mask=ok)
    tl.store(at + 1, kind * 0 + ACCESS, mask=ok)
    tl.store(at + 2, reg, mask=ok)
    tl.store(at + 3, elem, mask=ok)
    tl.store(at + 4, kind * 0 + tl.program_id(0), mask=ok)
    tl.store(at + 5, kind * 0 + tl.program_id(1), mask=ok)
    tl.store(at + 6, kind * 0 + tl.program_id(2), mask=ok)
    tl.store(at + 7, kind * 0 + LINE, mask=ok)
    tl.store(at + 8, wep, mask=ok)
    tl.store(at + 9, kind * 0 + launch, mask=ok)


@triton.jit
def _sh_check(ptr, mask, HAS_MASK: tl.constexpr, ACCESS: tl.constexpr, LINE: tl.constexpr,
              table, arena, ring, cell, CAP: tl.constexpr):
    """Check one memory op; return (lanes in a region, lanes never written, shadow element)."""
    addr = ptr.to(tl.int64)
    SIZE: tl.constexpr = ptr.dtype.element_ty.primitive_bitwidth // 8
    found, reg, shadowed, sidx, step = _sh_locate(addr, SIZE, table)
    if HAS_MASK:
        m = mask & (addr == addr)
    else:
        m = addr == addr
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
def check_epochs(sh, elem, n, cell, log, PER_STEP: tl.constexpr, HAS_ELEM: tl.constexpr, BLOCK: tl.constexpr):
    """A torch op's read of ``n`` elements whose epochs are ``sh`` (int32, contiguous): writes one log
    row (kind of the first bad element, bad count, its position or ``elem[pos]``, its epoch)."""
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
    tl.store(log, kind)
    tl.store(log + 1, count)
    tl.store(log + 2, where)
    tl.store(log + 3, ep0)


INTERNAL = (sh_load, sh_store, sh_atomic, sh_atomic_cas, check_epochs)
