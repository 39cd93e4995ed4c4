"""Where a campaign's time goes, per stage: cheap monotonic timestamps the engine takes anyway.

No profiler: a shard wraps each stage of its own in ``StageClock.stage`` (one ``perf_counter`` pair each),
and a worker sends its breakdown of a case with the case's result (``protocol.Result.stages``), which the
shard splits off the hub's wall time (``StageClock.case``). Times are *exclusive*: a stage that runs inside
another (the case a finding's confirmation reruns, inside recording that finding) is taken out of the
outer one, so a shard's stages add up to its wall time, less what ``other`` names. Summed over the shards
of a campaign in ``CampaignResult.stage_s``; the JSON report's ``stage_s``, ``fuzzrunner fuzz
--stage-times`` and ``benchmarks/stage_profile.py`` show them.

The stages (``STAGES``, in the table's order):

* ``set-up`` (the campaign process, before its shards): from the command's start (the budget's clock) to the
  shards' start: imports, the target loaded in the campaign process, the plan;
* ``shard-start``: a shard process's start (spawn, its imports, the target loaded), up to its search's
  start (shard processes only: the campaign's merger takes it as each shard's result comes);
* ``start-up``: a worker's start (spawn or fork, imports, the target's set-up) as the hub waits for it,
  and the hub's own work around a case (the sanitizer's log, the memory check, a crash's blocking rerun's
  hand-over);
* ``compile``: Triton compiling (or loading from its cache) a kernel variant inside a case, from Triton's
  compilation listener (compiled Triton only: none in the interpreter);
* ``generate``: Hypothesis drawing and shrinking cases, and the shard's bookkeeping of each (features,
  progress);
* ``dispatch``: the hub <-> worker wire: the case and its result as JSON over the socket, the violations
  read back, the end marker awaited;
* ``run``: the target's case in the worker, hooks of the oracles that run inside its ops included (the
  shadow oracle's dispatch mode, the interpreter's hooks: they cannot be timed apart without a profiler);
* ``oracle:NAME``: that oracle's own calls (made, started, per op, finished, its verdict);
* ``second-run``: the second run of a case a two-pass oracle (poison) asks for, its oracle calls excluded;
* ``pre-check``: the CPU pre-check of cases once a GPU crash is known;
* ``findings``: recording violations (grouping, the finding's file and repro written);
* ``corpus-replay``: the bookkeeping of the corpus and seed replay (its cases' runs are in the stages above);
* ``shutdown``: closing the shard's workers;
* ``triage`` (the campaign process, after the shards): the CPU triage of GPU findings.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

CAMPAIGN = ("set-up", "triage", "report")  # the campaign process's own stages, before and after its shards
STAGES = ("set-up", "shard-start", "start-up", "compile", "generate", "dispatch", "run", "second-run", "pre-check",
          "findings", "corpus-replay", "shutdown", "triage")
WORKER = "worker"   # a worker's stages: the case's time in the worker, as it measured it (split by the shard)


class StageClock:
    """Exclusive seconds per stage, for one process's (a shard's) stages; ``stage_s`` is the tally."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.stage_s: dict[str, float] = {}
        self._frames: list[list] = []   # [stage, start, seconds of inner stages]

    def add(self, stage: str, seconds: float) -> None:
        """``seconds`` more of ``stage``, taken out of the stage that encloses it (if any)."""
        if seconds <= 0:
            return
        self.stage_s[stage] = self.stage_s.get(stage, 0.0) + seconds
        if self._frames:
            self._frames[-1][2] += seconds

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as ``name``, less the stages inside it."""
        frame = [name, self.clock(), 0.0]
        self._frames.append(frame)
        try:
            yield
        finally:
            self._frames.pop()
            self.add(name, self.clock() - frame[1] - frame[2])
            if self._frames:  # the whole block is inside the enclosing stage, not only its own part
                self._frames[-1][2] += frame[2]

    def case(self, hub_s: float, case_s: float, worker: Mapping[str, float]) -> None:
        """One case's time split: ``hub_s`` the hub's whole call (start-up included), ``case_s`` the case from
        its send to its result, ``worker`` the worker's breakdown (``WORKER``: its whole time; none: the
        worker did not say, a crash or a cut: all of ``case_s`` is the run)."""
        self.add("start-up", hub_s - case_s)
        own = float(worker.get(WORKER, 0.0))
        if not own:
            self.add("run", case_s)
            return
        self.add("dispatch", case_s - own)
        parts = {k: float(v) for k, v in worker.items() if k != WORKER}
        for name, s in parts.items():
            self.add(name, s)
        self.add("run", own - sum(parts.values()))


def merged(*tallies: Mapping[str, float]) -> dict[str, float]:
    """Stage tallies summed (a campaign's shards)."""
    out: dict[str, float] = {}
    for t in tallies:
        for k, v in t.items():
            out[k] = out.get(k, 0.0) + v
    return out


def ordered(stage_s: Mapping[str, float]) -> list[str]:
    """The stages in the table's order: ``STAGES``, each oracle after ``run``, anything else last."""
    oracles = sorted(k for k in stage_s if k.startswith("oracle:"))
    known = [s for s in STAGES if s in stage_s]
    at = known.index("run") + 1 if "run" in known else len(known)
    rest = sorted(k for k in stage_s if k not in STAGES and k not in oracles)
    return known[:at] + oracles + known[at:] + rest


def rows(stage_s: Mapping[str, float], duration_s: float, shards: int = 1,
         extra: Mapping[str, float] | None = None) -> tuple[dict[str, float], float]:
    """The table's rows (``ordered``, then ``extra``, then ``other``: shard time in no stage, N x ``duration_s`` less
    the shard stages) and the wall: ``duration_s`` plus the campaign process's own stages (``CAMPAIGN``: set-up,
    triage, and ``extra``, such as the report written). An ``other`` or ``report`` already in ``stage_s`` (a JSON
    report's) is taken as it is, never counted twice."""
    out = {k: stage_s[k] for k in ordered(stage_s) if k != "other"}
    out.update(extra or {})
    own = sum(v for k, v in out.items() if k in CAMPAIGN or k in (extra or {}))
    out["other"] = max(0.0, shards * duration_s - (sum(out.values()) - own))
    return out, duration_s + own


def table(stage_s: Mapping[str, float], duration_s: float, cases: int, shards: int = 1,
          extra: Mapping[str, float] | None = None) -> str:
    """The per-stage table (``rows``). Its percentages are of the rows' sum, so they add up to 100%: with N shards a
    shard stage is summed over the shards, and the sum (the ``total`` row) is more than the wall; the last line
    says how the wall splits into set-up, the campaign (the summary's time) and what came after it."""
    got, wall_s = rows(stage_s, duration_s, shards, extra)
    total = max(sum(got.values()), 1e-9)
    w = max(22, *(len(name) + 2 for name in got))  # a plug-in oracle's long name keeps its row in line
    lines = [f"{'stage':<{w}}{'s':>10}{'%':>9}"]
    for name, s in got.items():
        lines.append(f"{name:<{w}}{s:>10.3f}{100 * s / total:>8.1f}%")
    summed = f"{shards} shards' stages summed, " if shards > 1 else ""
    lines.append(f"{'total':<{w}}{sum(got.values()):>10.3f}{100.0:>8.1f}%  ({summed}what the % are of)")
    set_up = got.get("set-up", 0.0)
    after = wall_s - duration_s - set_up
    lines.append(f"wall {wall_s:.2f} s from the command's start: set-up {set_up:.2f} s + campaign {duration_s:.2f} s "
                 f"(the summary's time) + after it {after:.2f} s; {shards} shard(s), {cases} cases, "
                 f"{cases / max(wall_s, 1e-9):.2f} cases/s")
    return "\n".join(lines)


def result_table(result, extra: Mapping[str, float] | None = None) -> str:
    """``table`` of a ``CampaignResult`` (its shards: ``settings.workers``), headed by what it measured."""
    shards = max(1, int(getattr(result.settings, "workers", 1) or 1))
    head = f"where the time went ({result.target}, {result.context.device if result.context else '?'}):"
    cases = result.examples + len(result.replayed)
    return head + "\n" + table(result.stage_s, result.duration_s, cases, shards, extra)


class CompileTimer:
    """Triton's compilation listener, while installed: the seconds Triton spent compiling (or loading from its
    cache) kernel variants, and how many of each (``misses``, ``hits``). Chains to a listener already set."""

    def __init__(self):
        self.seconds, self.misses, self.hits = 0.0, 0, 0
        self._before = None
        self._knobs = None

    def install(self) -> bool:
        """Listen, if this Triton has a compilation listener (3.4 and later); whether it does."""
        try:
            from triton import knobs
            compilation = knobs.compilation
            self._before = compilation.listener
        except (ImportError, AttributeError):
            return False
        self._knobs = compilation
        compilation.listener = self
        return True

    def take(self) -> float:
        """The seconds since the last ``take``."""
        s, self.seconds = self.seconds, 0.0
        return s

    def __call__(self, *, src, metadata, metadata_group, times, cache_hit) -> None:
        try:
            micro = times.ir_initialization + times.total_lowering + times.store_results
        except AttributeError:
            micro = 0
        self.seconds += micro / 1e6
        if cache_hit:
            self.hits += 1
        else:
            self.misses += 1
        if self._before is not None:
            self._before(src=src, metadata=metadata, metadata_group=metadata_group, times=times,
                         cache_hit=cache_hit)
