"""The campaign: Hypothesis generates and shrinks cases here; workers run them elsewhere.

The campaign process never touches a GPU. It replays the corpus first, then runs
Hypothesis in batches (one ``@given`` run per batch, each with its own seed) until
the example count or the time budget is spent. Every distinct signature raises its
own exception class, so Hypothesis shrinks each bug on its own; a bug already
minimized stops failing the test so the search moves on to new ones.
With ``workers > 1`` the campaign runs that many shards in processes, each with its
own worker (and GPU), sharing the corpus, and merges their findings.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from dataclasses import dataclass, field
from typing import Callable

from ..case import Case
from ..corpus import Corpus, Finding
from ..errors import HarnessError, InvalidCase
from ..settings import Settings
from ..target import Target, load_target
from .findings import FindingBook
from .hub import Hub, WorkerSpec

BATCH = 50


@dataclass
class CampaignResult:
    target: str
    settings: Settings
    seed: int
    faults: tuple
    examples: int = 0
    invalid: int = 0
    duration_s: float = 0.0
    findings: list = field(default_factory=list)
    timeline: list = field(default_factory=list)     # (elapsed_s, examples, findings)
    replayed: list = field(default_factory=list)     # (path, signature id or None, still failing)
    worker_restarts: int = 0


class _Found(Exception):
    """Base of the per-signature exception classes Hypothesis sees."""


_classes: dict[str, type] = {}


def _found_class(sig_id: str) -> type:
    if sig_id not in _classes:
        _classes[sig_id] = type(f"Finding_{sig_id}", (_Found,), {})
    return _classes[sig_id]


def _sig_ids(exc: BaseException) -> list[str]:
    if isinstance(exc, _Found):
        return [exc.args[0]]
    out = []
    for sub in getattr(exc, "exceptions", ()) or ():
        out += _sig_ids(sub)
    if exc.__cause__ is not None and exc.__cause__ is not exc:
        out += _sig_ids(exc.__cause__)
    return out


def worker_spec(target_spec: str, settings: Settings, shard: int, device: str) -> WorkerSpec:
    # Blocking launches on a GPU: a device-side assert or illegal address then surfaces at the
    # launch that caused it, so the crash finding names the right kernel and line.
    wrapper, env = [], ({"CUDA_LAUNCH_BLOCKING": "1"} if device == "cuda" else {})
    if settings.sanitizer != "none":
        from ..sanitizer.session import sanitizer_wrapper
        wrapper, sanitizer_env = sanitizer_wrapper(settings.sanitizer)
        env.update(sanitizer_env)
    return WorkerSpec(target_spec, device=device, gpu=gpu_for_shard(shard) if device == "cuda" else None,
                      wrapper=wrapper, env=env)


def gpu_for_shard(shard: int, visible: str | None = None, count: int | None = None) -> str:
    """The device a shard's worker sees: the shard-th of the GPUs this process may use.

    Under pytest-xdist (or any launcher) that already narrowed ``CUDA_VISIBLE_DEVICES``,
    a shard must pick from that list, not from physical GPU numbers.
    """
    import os
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        return ids[shard % len(ids)]
    if count is None:
        import torch
        count = torch.cuda.device_count()
    return str(shard % max(count, 1))


class _Shard:
    def __init__(self, target_spec: str, target: Target, settings: Settings, faults: tuple, corpus: Corpus | None,
                 database, shard: int, seed: int, device: str, on_event: Callable | None):
        self.target_spec, self.target, self.settings, self.faults = target_spec, target, settings, faults
        self.corpus, self.shard, self.seed, self.device = corpus, shard, seed, device
        self.on_event = on_event or (lambda e: None)
        self.book = FindingBook(corpus, target.name)
        from ..execute import effective_oracles
        self.hub = Hub(worker_spec(target_spec, settings, shard, device),
                       oracles=effective_oracles(settings.oracles, device, settings.sanitizer),
                       timeout_s=settings.case_timeout_s)
        self.database = database
        self.result = CampaignResult(target.name, settings, seed, faults)
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def over_budget(self) -> bool:
        b = self.settings.budget_s
        return b is not None and self.elapsed() >= b

    def execute(self, case: Case) -> list:
        return self.hub.run(case).violations

    # -- corpus first -------------------------------------------------------------------
    def _applies(self, case: Case) -> bool:
        """Corpus entries recorded with planted faults replay only in campaigns that plant them."""
        return set(case.faults) <= set(self.faults)

    def replay_corpus(self) -> None:
        if self.corpus is None or self.shard != 0:
            return
        for path, finding in self.corpus.findings(self.target.name):
            if not self._applies(finding.case):
                continue
            vs = self._try(finding.case)
            still = vs is not None and any(v.signature.id == finding.signature.id for v in vs)
            self.result.replayed.append((str(path), finding.signature.id, still))
            if still:
                finding.minimized = True
                self.book.adopt(finding)
                self.on_event({"type": "regression", "finding": finding, "path": str(path)})
            elif vs:
                self._record(vs, finding.case)
        for path, case in self.corpus.cases(self.target.name):
            if not self._applies(case):
                continue
            vs = self._try(case)
            self.result.replayed.append((str(path), None, bool(vs)))
            if vs:
                self._record(vs, case)

    def _try(self, case: Case):
        try:
            return self.execute(case)
        except InvalidCase as e:
            self.on_event({"type": "warning", "message": f"corpus case skipped: {e}"})
            return None

    # -- search -------------------------------------------------------------------------
    def _record(self, violations, case) -> tuple[Finding, bool]:
        finding, new = self.book.record(violations, case, self.result.examples, self.elapsed())
        if new:
            self.on_event({"type": "finding", "finding": finding, "shard": self.shard})
        return finding, new

    def _test(self, case: Case) -> None:
        if self.over_budget():
            return  # let the batch end quickly: generation is cheap, execution is not
        self.result.examples += 1
        if not self._failed:
            self._generated += 1
        try:
            violations = self.execute(case)
        except InvalidCase:
            from hypothesis import reject
            self.result.invalid += 1
            reject()
        self._tick()
        if not violations:
            return
        finding, _ = self._record(violations, case)
        if not finding.minimized:
            self._failed = True
            raise _found_class(finding.signature.id)(finding.signature.id, finding.violation.message)

    def _tick(self) -> None:
        r = self.result
        r.timeline.append((round(self.elapsed(), 3), r.examples, len(self.book.by_id)))
        self.on_event({"type": "progress", "examples": r.examples, "findings": len(self.book.by_id),
                       "elapsed": self.elapsed(), "shard": self.shard})

    def search(self, quota: int) -> None:
        from hypothesis import HealthCheck, Phase, Verbosity, given, seed as hseed, settings as hsettings
        strategy = self.target.cases(self.faults, max_ops=self.settings.max_ops) \
            if _takes_max_ops(self.target) else self.target.cases(self.faults)
        batch, done = 0, 0
        while done < quota and not self.over_budget():
            self._generated = 0  # examples of this batch until its first failure (shrinking after)
            self._failed = False
            n = min(BATCH, quota - done)
            phases = [Phase.generate] + ([Phase.shrink] if self.settings.shrink else [])
            if batch == 0:
                phases = [Phase.reuse] + phases
            hs = hsettings(max_examples=n, deadline=None, database=self.database, phases=phases,
                           suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                           report_multiple_bugs=True, derandomize=False, print_blob=False)
            test = hseed(self.seed * 1_000_003 + self.shard * 7919 + batch)(hs(given(strategy)(self._test)))
            try:
                test()
            except HarnessError:
                raise
            except BaseException as exc:  # noqa: B036 - Hypothesis wraps our _Found in groups/Flaky
                if isinstance(exc, KeyboardInterrupt):
                    raise
                ids = _sig_ids(exc)
                if not ids and not self.over_budget() and not _is_hypothesis_error(exc):
                    raise
                for sig_id in ids:
                    self.book.mark_minimized(sig_id)
            batch += 1
            done += max(1, self._generated) if self._failed else n

    def close(self) -> CampaignResult:
        self.hub.close()
        r = self.result
        r.duration_s = self.elapsed()
        r.findings = list(self.book.by_id.values())
        r.worker_restarts = self.hub.restarts
        return r


def _is_hypothesis_error(exc) -> bool:
    from hypothesis.errors import HypothesisException
    return isinstance(exc, HypothesisException) or any(_is_hypothesis_error(e) for e in getattr(exc, "exceptions", ()))


def _takes_max_ops(target: Target) -> bool:
    import inspect
    try:
        return "max_ops" in inspect.signature(target.cases).parameters
    except (TypeError, ValueError):
        return False


def _database(corpus: Corpus | None, target: str, database):
    if database is not None:
        return database
    if corpus is None:
        return None
    from hypothesis.database import DirectoryBasedExampleDatabase
    return DirectoryBasedExampleDatabase(str(corpus.database_path(target)))


def _resolve_device(settings: Settings) -> str:
    if settings.device:
        return settings.device
    from .. import _env
    return _env.device_type()


def _run_shard(target_spec, settings, faults, corpus_dir, shard, seed, quota, device, on_event, database=None):
    target = load_target(target_spec)
    corpus = Corpus(corpus_dir) if corpus_dir else None
    s = _Shard(target_spec, target, settings, faults, corpus, _database(corpus, target.name, database),
               shard, seed, device, on_event)
    try:
        s.replay_corpus()
        s.search(quota)
    finally:
        result = s.close()
    return result


def _shard_process(queue, *args):
    def emit(e):
        queue.put(("event", _portable(e)))
    try:
        res = _run_shard(*args, on_event=emit)
        res.findings = [f.to_dict() for f in res.findings]
        queue.put(("done", res))
    except BaseException as e:  # report, never hang the parent
        queue.put(("error", f"{type(e).__name__}: {e}"))


def _portable(e: dict) -> dict:
    e = dict(e)
    if "finding" in e:
        e["finding"] = e["finding"].to_dict()
    return e


def run_campaign(target_spec: str, settings: Settings, *, faults=(), corpus_dir=None, database=None,
                 on_event: Callable | None = None) -> CampaignResult:
    """Fuzz ``target_spec`` under ``settings``; findings are on disk as soon as they are found."""
    target = load_target(target_spec)  # a target that cannot even load is a harness error, here
    faults = target.check_faults(faults)
    seed = settings.seed if settings.seed is not None else random.randrange(1 << 30)
    device = _resolve_device(settings)
    n = settings.workers
    if n == 1:
        r = _run_shard(target_spec, settings, faults, corpus_dir, 0, seed, settings.max_examples, device,
                       on_event, database)
        r.seed = seed
        return r
    if database is not None:
        raise HarnessError("a plugged-in Hypothesis database is shared through the corpus with workers > 1: "
                           "pass corpus_dir and let each shard open it.")
    return _run_sharded(target_spec, settings, faults, corpus_dir, seed, device, on_event, target)


def _run_sharded(target_spec, settings, faults, corpus_dir, seed, device, on_event, target) -> CampaignResult:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    n = settings.workers
    quotas = [settings.max_examples // n + (1 if i < settings.max_examples % n else 0) for i in range(n)]
    procs = [ctx.Process(target=_shard_process, args=(queue, target_spec, settings, faults, corpus_dir, i,
                                                      seed, quotas[i], device), daemon=True) for i in range(n)]
    for p in procs:
        p.start()
    merged = CampaignResult(target.name, settings, seed, faults)
    start, finished, errors, seen = time.monotonic(), 0, [], {}
    totals = [0] * n
    while finished < n:
        try:
            kind, payload = queue.get(timeout=1.0)
        except Exception:
            if all(not p.is_alive() for p in procs) and queue.empty():
                errors.append("a shard process died without reporting")
                break
            continue
        if kind == "event":
            e = payload
            if e["type"] == "progress":
                totals[e["shard"]] = e["examples"]
                e = {**e, "examples": sum(totals), "findings": len(seen)}
            if e["type"] == "finding":
                f = Finding.from_dict(e["finding"])
                if f.signature.id in seen:
                    continue
                seen[f.signature.id] = f
                e = {**e, "finding": f}
            if on_event:
                on_event(e)
        elif kind == "done":
            finished += 1
            _merge(merged, payload)
        else:
            finished += 1
            errors.append(payload)
    for p in procs:
        p.join(timeout=30)
    if errors:
        raise HarnessError("; ".join(errors))
    merged.duration_s = time.monotonic() - start
    return merged


def _merge_timelines(a: list, b: list) -> list:
    """Two (elapsed, examples, findings) series -> one of running totals (a shard counts only its own)."""
    events = sorted([(t, 0, e, f) for t, e, f in a] + [(t, 1, e, f) for t, e, f in b])
    last, out = [(0, 0), (0, 0)], []
    for t, src, e, f in events:
        last[src] = (e, f)
        out.append((t, last[0][0] + last[1][0], last[0][1] + last[1][1]))
    return out


def _merge(into: CampaignResult, r: CampaignResult) -> None:
    into.examples += r.examples
    into.invalid += r.invalid
    into.worker_restarts += r.worker_restarts
    into.replayed += r.replayed
    into.timeline = _merge_timelines(into.timeline, r.timeline)
    by_id = {f.signature.id: f for f in into.findings}
    for d in r.findings:
        f = Finding.from_dict(d)
        old = by_id.get(f.signature.id)
        if old is None:
            by_id[f.signature.id] = f
        else:
            if f.case.size() < old.case.size():
                old.case, old.violation, old.others = f.case, f.violation, f.others
            old.first_found_after_examples = min(old.first_found_after_examples, f.first_found_after_examples)
            old.found_after_s = min(old.found_after_s, f.found_after_s)
            old.minimized = old.minimized or f.minimized
    into.findings = list(by_id.values())
