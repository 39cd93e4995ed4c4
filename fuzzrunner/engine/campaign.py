"""The campaign: fuzz one target under settings, with a corpus; one shard here, many in shard
processes (sharding.py), or many as Ray actors (ray_shards.py).

``plan_campaign`` decides what the campaign is, once (``CampaignPlan``: the target, its faults, the
seed, the run's context, the deadline), and every shard gets that plan. The campaign process never touches
a GPU. Each shard replays the corpus first, then searches; findings are on disk as soon as they are
found. It always returns a result, also when interrupted or when it could not write:
``stop_reason`` says why it ended and ``errors`` what went wrong. With a budget, all of it (start-up,
search, CPU triage) ends by one deadline, its clock started by the caller (``started``: the CLI's command).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import replace

from ..context import Context
from ..corpus import Corpus
from ..settings import Settings
from ..target import load_target
from . import events
from . import result as R
from .deadline import Deadline
from .plan import CampaignPlan
from .result import CampaignResult
from .shard_run import prepare_shadow, run_shard
from .stages import merged

__all__ = ["CampaignPlan", "CampaignResult", "plan_campaign", "run_campaign"]

LOW_VALID_FRACTION = 0.10
FEW_CASES = 10            # a budget-stopped run with fewer valid cases is warned about: it tested little


def plan_campaign(target_spec: str, settings: Settings, *, faults=(), corpus_dir=None, database=None,
                  on_cluster: bool = False, started: float | None = None, context: Context | None = None
                  ) -> CampaignPlan:
    """The campaign's plan: the target loaded (a target that cannot even load is a harness error, here)
    and its faults checked, the seed drawn, the run's context resolved and the deadline set (the budget from
    ``started``, ``time.time()``, default now), once. ``context``: resolved already by the caller (the CLI), not
    again."""
    target = load_target(target_spec)
    seed = settings.seed if settings.seed is not None else random.randrange(1 << 30)
    context = context if context is not None else Context.resolve(settings, on_cluster=on_cluster)
    deadline = Deadline.of(settings.budget_s, started)
    return CampaignPlan(target_spec, target.name, settings, target.check_faults(faults), seed, context,
                        os.fspath(corpus_dir) if corpus_dir else None, database, code=dict(target.code_under_test),
                        deadline=deadline, details=tuple(str(d) for d in target.details))


def run_campaign(target_spec: str, settings: Settings, *, faults=(), corpus_dir=None, database=None,
                 on_event: Callable | None = None, ray: str | None = None, db: str | None = None,
                 started: float | None = None, context: Context | None = None) -> CampaignResult:
    """Fuzz ``target_spec`` under ``settings``; findings are on disk as soon as they are found.

    ``ray`` (an address: ``local``, ``auto``, ``ray://host:port``) runs the shards as Ray actors;
    ``db`` (``redis://...``, with ``ray``) is the example database they share. ``started``: when the
    budget's clock started (``time.time()``; default now): the campaign ends by then plus ``budget_s``.
    ``context``: the run's context if the caller resolved it already (``env_defaults.resolved``)."""
    begun = started if started is not None else time.time()
    plan = plan_campaign(target_spec, settings, faults=faults, corpus_dir=corpus_dir, database=database,
                         on_cluster=ray is not None, started=started, context=context)
    listener = on_event = events.Listener(on_event)  # the user's callback cannot end the campaign
    triage = _cpu_triage(plan)
    on_event = _starting_triage(on_event, triage)
    if ray is None and db is not None:
        from ..errors import InvalidArgument
        raise InvalidArgument(f"db={db!r} shares the example database between Ray shards: it needs ray=ADDRESS "
                              f"(a local campaign keeps its database in the corpus).")
    result: CampaignResult | None = None
    try:  # a stop signal once the shards have a result (CPU triage, the floor) keeps it: interrupted
        if ray is not None:
            from .ray_shards import run_on_ray
            set_up = time.time() - begun
            result = run_on_ray(ray, plan, on_event, db_url=db)
        else:
            prepare_shadow(plan, on_event)
            plan = _with_precheck_shards(plan)
            set_up = time.time() - begun
            if plan.settings.workers == 1:
                result = run_shard(plan, 0, plan.settings.max_examples, on_event)
            else:
                from .sharding import run_sharded
                result = run_sharded(plan, on_event)
        result.stage_s = merged(result.stage_s, {"set-up": set_up})  # the command's start to the shards'
        _finish(result, plan, listener, triage)
    except KeyboardInterrupt:
        if result is None:  # nothing ran yet: the caller's stop
            raise
        result.seed, result.context, result.code_under_test = plan.seed, plan.context, dict(plan.code)
        result.target_details = list(plan.details)
        result.stop_reason = R.StopReason.INTERRUPTED
    return result


def _finish(result: CampaignResult, plan: CampaignPlan, listener: events.Listener, triage) -> None:
    """The shards' merged result completed: seed, the run's context and code under test, the callback's
    failures, CPU triage of GPU findings, the floor of valid cases."""
    result.seed, result.context = plan.seed, plan.context
    result.code_under_test, result.target_details = dict(plan.code), list(plan.details)
    listener.report(result.warnings)
    if triage is not None and result.findings:
        t0 = time.perf_counter()
        _triage(result, plan, triage)
        result.stage_s = merged(result.stage_s, {"triage": time.perf_counter() - t0})
    if result.findings:
        _label_known(result, plan)
    _check_floor(result, plan.settings)


def _label_known(result: CampaignResult, plan: CampaignPlan) -> None:
    """The findings the target names as known bugs of the code under test labelled (known.py), in the result and
    in the corpus."""
    from ..errors import FuzzrunnerError
    from .known import label_known
    try:
        known_bugs = load_target(plan.target_spec).known_bugs
    except FuzzrunnerError as e:  # it loaded at the campaign's start; labels help, they never cost the findings
        result.warnings.append(f"known bugs not labelled: the target did not load again ({e})")
        return
    if known_bugs is None:
        return
    labelled, warning = label_known(result.findings, known_bugs, plan.target_name)
    if warning:
        result.warnings.append(warning)
    if plan.corpus_dir is None or not labelled:
        return
    corpus = Corpus(plan.corpus_dir, faults=plan.faults)
    try:
        for f in labelled:
            corpus.save_finding(plan.target_name, f)
    except OSError as e:
        result.warnings.append(f"known-bug labels not saved in the corpus: {e}")


def _cpu_triage(plan: CampaignPlan):
    """A GPU campaign's CPU triage (ending before the deadline's tail: the reports and the exit), or None."""
    if plan.context.device != "cuda" or not plan.settings.cpu_triage:
        return None
    from .triage import CpuTriage
    return CpuTriage(plan.target_spec, plan.settings, plan.deadline.triage_end if plan.deadline else None)


def _starting_triage(on_event: Callable | None, triage) -> Callable | None:
    """``on_event``, which also starts the triage's CPU worker at the first finding (its imports then run
    beside the search, not after it). Events reach it on this process's main thread."""
    if triage is None:
        return on_event

    def relay(e: events.Event) -> None:
        if isinstance(e, events.FindingEvent):
            triage.start()
        if on_event is not None:
            on_event(e)
    return relay


def precheck_workers(settings: Settings) -> int:
    """How many CPU pre-checks a one-worker GPU campaign runs at once: the setting, else a quarter of
    the host's CPUs (at most 8): the rest stay for the GPU workers, their spares and generation."""
    if settings.precheck_workers is not None:
        return settings.precheck_workers
    return max(1, min(8, (os.cpu_count() or 1) // 4))


def _with_precheck_shards(plan: CampaignPlan) -> CampaignPlan:
    """A one-worker GPU campaign searches in ``precheck_workers`` shards on its GPU(s): once a crash is
    known every case is pre-checked on the CPU first (search.py), and one search waits for one
    pre-check at a time; shards pre-check in parallel on the host's spare cores (and generate in
    parallel). A plugged-in database object cannot travel to shard processes: then one shard."""
    s = plan.settings
    if plan.context.device != "cuda" or not s.cpu_triage or s.workers != 1 or plan.database is not None:
        return plan
    n = min(precheck_workers(s), s.max_examples)
    return replace(plan, settings=s.override(workers=n)) if n > 1 else plan


def _triage(result: CampaignResult, plan: CampaignPlan, triage) -> None:
    """Each GPU finding replayed on the CPU; findings the CPU names as one bug become one."""
    from ..errors import FuzzrunnerError
    from .triage import merge_by_triage
    try:
        triage.triage(result.findings)
    except (FuzzrunnerError, OSError) as e:  # triage helps; it never costs the findings
        result.warnings.append(f"CPU triage did not run: {e}")
        return
    if triage.unreached:
        result.warnings.append(f"CPU triage of {triage.unreached} finding(s) did not fit in the "
                               f"{plan.settings.budget_s:g} s budget: replay each on the CPU "
                               f"(fuzzrunner replay FILE --device cpu), or give the campaign more time")
    result.findings, absorbed = merge_by_triage(result.findings)
    if plan.corpus_dir is None:
        return
    corpus = Corpus(plan.corpus_dir, faults=plan.faults)
    try:
        for f in result.findings:
            corpus.save_finding(plan.target_name, f)
        for f in absorbed:
            corpus.finding_path(plan.target_name, f.id).unlink(missing_ok=True)
    except OSError as e:
        result.errors.append(f"could not rewrite findings after CPU triage: {e}")


def _check_floor(r: CampaignResult, settings: Settings) -> None:
    """Never pass on nothing: too few valid cases is an error, few is a warning."""
    if r.stop_reason is R.StopReason.INTERRUPTED:
        return
    if r.valid < settings.min_valid:
        why = ("See the error(s) above." if r.errors  # (a shard or the target failed: that is the cause)
               else f"The {settings.budget_s:g} s budget ended first: it counts the start-up too (imports, the "
                    f"workers' start), so raise --budget." if r.stop_reason is R.StopReason.BUDGET
               else "Check the target's strategy, or raise the budget.")
        r.errors.append(f"only {r.valid} valid case(s) ran ({r.generated} generated, {r.invalid} rejected by "
                        f"the target; stop: {R.stop_text(r.stop_reason)}), below the floor of "
                        f"{settings.min_valid}: this campaign tested (almost) nothing. {why}")
    elif r.stop_reason is R.StopReason.BUDGET and r.valid < FEW_CASES:
        r.warnings.append(f"only {r.valid} valid case(s) ran before the {settings.budget_s:g} s budget ended "
                          f"(of {settings.max_examples} asked): this run tested little of the case space; "
                          f"give it more time (--budget).")
    elif r.generated and r.valid < LOW_VALID_FRACTION * r.generated:
        r.warnings.append(f"only {r.valid} of {r.generated} generated cases were valid "
                          f"({100 * r.valid / r.generated:.0f}%): the target rejects most of what its "
                          f"strategy makes.")
