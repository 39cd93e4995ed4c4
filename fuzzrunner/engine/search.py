"""One shard of a campaign: a hub (its worker), a finding book, and the Hypothesis search.

Hypothesis generates and shrinks cases here; the worker runs them elsewhere. Hypothesis runs
in batches (one ``@given`` run per batch, each with its own seed) until the example count or
the time budget is spent. Every distinct finding raises its own exception class, so Hypothesis
shrinks each bug on its own; a bug already minimized stops failing the test so the search
moves on. Running out of time or being interrupted stops Hypothesis at once (a BaseException
it lets through); a shrink cut short that way is marked and resumes on the next run, from the
example database.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import NoReturn

from .. import names, triton_cache
from ..case import Case
from ..context import Context
from ..corpus import Corpus
from ..coverage import Coverage, features_of
from ..errors import HarnessError, InvalidCase, TargetError
from ..finding import Finding, group, limitations
from ..palette import of_settings
from ..target import DrawError, Target, draw_error
from . import events
from . import result as R
from .cpu_check import CpuRun, classify, harness_reason, missing_device
from .database import campaign_database
from .deadline import monotonic
from .finding_book import FindingBook
from .hub import THREAD_GRACE_S, Hub, WorkerSpec
from .hypothesis_bridge import BudgetSpent, Refused, Stop, finding_ids, found_class, no_shrink_time_limit
from .local_constants import skip_tree
from .plan import CampaignPlan
from .stages import StageClock

BATCH = 50


class Shard:
    def __init__(self, plan: CampaignPlan, index: int, target: Target, on_event: Callable | None = None, *,
                 corpus: Corpus | None = None, database=None, worker: WorkerSpec | None = None,
                 findings_seen=None):
        """Shard ``index`` of the campaign ``plan`` (the whole plan: its target spec, settings, faults, seed and
        deadline; ``target``: its target, loaded). ``corpus``, ``database``: this shard's (a Ray shard's
        ``StreamedCorpus``). ``worker``: the plan's worker of this shard unless given. ``findings_seen``:
        set (``is_set()``) once any shard of the campaign has a finding (its CPU triage then needs time)."""
        worker = worker if worker is not None else plan.worker(index)
        settings, faults, deadline = plan.settings, plan.faults, plan.deadline
        self.target_spec, self.target, self.settings, self.faults = plan.target_spec, target, settings, faults
        self.corpus, self.index, self.seed = corpus, index, plan.seed
        target_spec = plan.target_spec
        self.emit = on_event or (lambda e: None)
        self.book = FindingBook(corpus, target.name, target_spec, settings.case_timeout_s,
                                worker.context.placed(None),  # each finding records it, not which GPU
                                dict(plan.code) or dict(target.code_under_test))  # and the release
        from ..names import effective_oracles
        self.hub = Hub(worker, oracles=effective_oracles(settings.oracles, worker.device, settings.sanitizer),
                       timeout_s=settings.case_timeout_s)
        self.database = campaign_database(database, corpus, target.name, faults, settings.seed)
        self.result = R.CampaignResult(target.name, settings, plan.seed, faults)
        self.result.coverage = Coverage(tuple(target.feature_space), steering=settings.steer,
                                        shown=tuple(target.summary_features))
        self.start = time.monotonic()
        self.clock = StageClock()  # where the shard's time goes (stages.py): the result's stage_s
        # The search ends before the campaign's deadline by what comes after it (deadline.py): the later
        # end until there is a finding to triage on the CPU, the earlier one from then on.
        self._ends = ((monotonic(deadline.search_end(triage=False)), monotonic(deadline.search_end(triage=True)))
                      if deadline is not None else (math.inf, math.inf))
        self._triages = worker.device == "cuda" and settings.cpu_triage
        self._findings_seen = findings_seen
        self._failing: set[str] = set()  # findings raised to Hypothesis in the current batch
        self.replaying: tuple | None = None  # ("seed" or "corpus", path) while corpus_replay runs that file's case
        self._known_ids: dict[str, bool] = {}  # finding id -> whether the target names it a known bug (not shrunk)
        # Crash-aware search on a GPU: once a crash is known, each new case runs first on a CPU
        # worker under the shadow oracle, up to its first op with a violation; one whose first bad
        # op shows the known crash's root cause is not sent to the GPU (it would only kill a worker
        # again: ~10 s each). Shrinking runs on the GPU. Only what the CPU proved is skipped: a
        # CPU run that fails for reasons outside the case turns the pre-check off (cpu_check.py).
        self.precheck_on = worker.device == "cuda" and settings.cpu_triage
        # On a GPU every shrink step that crashes costs a worker restart: a bug one shard found is shrunk
        # by that shard only. On the CPU shrinking is cheap and two shrinks may end smaller than one.
        self.shrink_once = worker.device == "cuda"
        self._precheck: Hub | None = None
        self._crash_heads: dict[str, str] = {}  # root-cause id -> its short name
        self._rerun_confirmed: set[int] = set()  # ids of the last run's violations, if the hub confirmed its crash
        self._rerun_warned = False
        self._suspects: list = []   # the last run died: earlier cases whose threads still ran in its worker
        # Once a case's thread is shown to end a worker or raise after its case returned, each case waits for its
        # threads (up to THREAD_GRACE_S): their deeds are then their own case's, in its run, and shrink with it
        self._linger_s = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def stop_at(self) -> float:
        """When the search stops (monotonic), leaving the campaign's deadline room for what follows it."""
        seen = self._findings_seen is not None and self._findings_seen.is_set()
        return self._ends[self._triages and (bool(self.book.by_id) or seen)]

    def over_budget(self) -> bool:
        return time.monotonic() >= self.stop_at()

    # -- one case -------------------------------------------------------------------------
    def execute(self, case: Case) -> list:
        """Run a case in the worker; ``InvalidCase`` (before any worker sees it) if its schema is wrong."""
        self.target.check_case(case)
        return self._run(case)

    def _run(self, case: Case, *, linger_s: float | None = None, fresh: bool = False) -> list:
        """The case's violations; ``BudgetSpent`` if the budget ran out while it ran (a hard budget: a
        hanging case must not overrun it by the case timeout). A worker recycled for its memory is told.
        What earlier cases' threads did meanwhile is accounted to them (``_account_earlier``)."""
        b = self.settings.budget_s
        t0 = time.perf_counter()
        result = self.hub.run(case, cut_at=self.stop_at(),
                              linger_s=self._linger_s if linger_s is None else linger_s, fresh=fresh)
        # a worker still starting at the deadline is cut before any case of its (case_no 0): all start-up
        self.clock.case(time.perf_counter() - t0, result.seconds if result.case_no else 0.0, result.stages)
        self.result.worker_s += result.seconds
        if not result.budget_cut:
            self._account_earlier(result)  # (may run those cases again: before this run's state is kept)
        # a crash the hub already ran again in a fresh worker (to name its kernel) needs no other rerun
        self._rerun_confirmed = {id(v) for v in result.violations} if result.confirmed else set()
        self._suspects = result.suspects
        if self.hub.rerun_error and not self._rerun_warned:
            self._rerun_warned = True
            message = (f"crashes that lose the CUDA context are no longer run again with blocking launches "
                       f"({self.hub.rerun_error}): their findings name the last kernel launched, which may "
                       f"come after the one that broke the context")
            self.result.warnings.append(message)
            self.emit(events.WarningEvent(message, self.index))
        if result.recycled:
            self._recycled(result.recycled)
        if result.budget_cut:
            r = self.result
            r.budget_cut_cases += 1
            r.warnings.append(f"the {b:g} s budget ran out during a case: it was stopped after {result.seconds:.1f} s "
                              f"(not a timeout finding: the case timeout is {self.settings.case_timeout_s:g} s)")
            self._budget_spent()
        return result.violations

    def _budget_spent(self) -> NoReturn:
        self.result.stop_reason = R.StopReason.BUDGET
        raise BudgetSpent()

    def _recycled(self, why: str) -> None:
        r = self.result
        r.worker_recycles += 1
        if r.worker_recycles == 1:
            message = (f"{why}: the worker was recycled (a leak in the target?); each recycle is counted in "
                       f"the report (worker_recycles)")
            r.warnings.append(message)
            self.emit(events.WarningEvent(message))

    def record(self, violations, case: Case) -> list[tuple[Finding, bool]]:
        with self.clock.stage("findings"):
            return self._record(violations, case)

    def _record(self, violations, case: Case) -> list[tuple[Finding, bool]]:
        self._refuse_missing_device(violations)
        self._note_limitations(violations)
        siblings = self._found_by_siblings(violations)
        # "found after N examples": N counts the cases generated so far and the replayed corpus and seed cases (a seed
        # case that shows the bug is found after 1, as the summary says, not after 0), never shrink steps (a bug
        # found while another shrank was "found after" its steps too: a new user's trial)
        # and how the case came: a replayed seed or corpus case (corpus_replay sets ``replaying``), else the search
        found_by = dict([self.replaying]) if self.replaying else {"search": max(1, self.result.generated)}
        recorded = self.book.record(violations, case, self.result.generated + len(self.result.replayed),
                                    self.elapsed(), self.hub.preceding if self.hub.case is case else ((), 0),
                                    found_by)
        self.book.settled |= siblings
        for finding, new in recorded:
            if new and finding.id not in siblings and not self._confirmed(finding, case):  # siblings confirmed theirs
                continue
            if new and names.kind(finding.violation.kind).case_wide:
                self._learn_crash(finding, case)
            if new:
                self.emit(events.FindingEvent(finding, self.index))
        if self.book.write_errors:
            self.result.errors += self.book.write_errors
            self.book.write_errors = []
            self.result.stop_reason = R.StopReason.WRITE_ERROR
            raise Stop()
        return [(f, n) for f, n in recorded if f.id in self.book.by_id]

    def _refuse_missing_device(self, violations) -> None:
        """A CPU campaign of a target that asks for CUDA itself tests nothing: the target's error (exit 2),
        never a crash finding in the regression set (a new user's runner with device="cuda" was one)."""
        what = missing_device(violations) if self.hub.spec.device == "cpu" else None
        if what:
            raise Refused(TargetError(f"target {self.target.name!r} cannot run on the CPU: it asks for a GPU ({what}). "
                              f"Build its tensors on ctx.device, or fuzz it with --device cuda on a GPU machine "
                              f"(`fuzzrunner check-target SPEC` says where it can run)."))

    def _found_by_siblings(self, violations) -> set[str]:
        """Bugs new to this shard that another shard of the campaign already wrote to the shared corpus:
        that shard shrinks them (on a GPU every shrink step that crashes costs a worker restart, and
        shards that each shrank the same bug made a campaign slower, not faster)."""
        if self.settings.workers == 1 or self.corpus is None or not self.shrink_once:
            return set()
        ids = {head.signature.id for head, _ in group(violations)} - set(self.book.by_id)
        return {i for i in ids if self.corpus.finding_path(self.target.name, i).exists()}

    def _note_limitations(self, violations) -> None:
        """The tool's own limits: counted, said once each, never a finding (the campaign goes on)."""
        for v in limitations(violations):
            if self.result.count_limitation(v.signature.id, v.message):  # the summary and report count them
                self.emit(events.WarningEvent(f"tool limitation: {v.message}", self.index))

    def _confirmed(self, finding: Finding, case: Case) -> bool:
        """A dead worker is confirmed by a rerun in a fresh one. One that does not die again was killed by an
        earlier case's thread, if the rerun of such a case that waits for its threads dies (``_rerun_suspect``);
        else it is flaky. (Crashes of the process, not Python exceptions: ``Tool.process_death`` and
        ``Kind.process_death``.)"""
        v = finding.violation
        if not names.tool(v.tool).process_death or not names.kind(v.kind).process_death \
                or id(v) in self._rerun_confirmed:
            return True
        suspects = self._suspects
        again = self._run(case)
        if any(names.kind(a.kind).process_death for a in again):
            return True
        self.book.drop(finding.id)
        if any(names.kind(a.kind).located for a in again):
            # the rerun shows the case's memory error without the death (a garbage index need not
            # kill every run): that error is the finding, the death one of its sites
            self.record([*again, v], case)
            return False
        if again:
            self.record(again, case)
        if any(self._rerun_suspect(s) for s in suspects):
            return False  # the death was an earlier case's: its finding now
        self._flaky(finding, " (nor did a rerun of each earlier case whose threads still ran)" if suspects else "")
        return False

    def _flaky(self, finding: Finding, note: str = "") -> None:
        """A death that did not happen again: kept apart, said once per id."""
        finding.flaky = True
        if any(f.id == finding.id for f in self.result.flaky):
            return
        self.result.flaky.append(finding)
        self.emit(events.WarningEvent(f"flaky: {finding.signature.short()} did not happen again in a fresh "
                                      f"worker{note}; kept apart, not a finding"))

    # -- what a case's threads did after it returned ----------------------------------------
    def _account_earlier(self, result) -> None:
        """An exception on an earlier case's thread is that case's crash; a worker found dead between cases
        is the death of a suspect whose rerun dies, else said (never a silent restart)."""
        for e in result.late:
            self._lingers("a thread of a case raised after the case returned")
            self.record(e.violations, e.case)
        death = result.died_before
        if death is None or any(self._rerun_suspect(s) for s in death.suspects):
            return
        whose = ("the cases whose threads still ran, run again" if any(s.threads for s in death.suspects)
                 else "its last case, run again")
        message = (f"a worker died between cases ({death.how}); {whose} in a fresh worker and given "
                   f"{THREAD_GRACE_S:g} s for their threads, did not end it: not a finding")
        if message not in self.result.warnings:
            self.result.warnings.append(message)
            self.emit(events.WarningEvent(message, self.index))

    def _rerun_suspect(self, suspect) -> bool:
        """Run an earlier case again in a fresh worker, waiting for its threads: whether it died (then its
        death, confirmed so, is that case's finding)."""
        again = self._run(suspect.case, linger_s=THREAD_GRACE_S, fresh=True)
        if not any(names.kind(a.kind).process_death for a in again):
            return False
        self._lingers("a thread of a case ended its worker after the case returned")
        self._rerun_confirmed = {id(v) for v in again}  # this rerun is the confirmation
        self.record(again, suspect.case)
        return True

    def _say(self, message: str) -> None:
        """A warning of this shard's set-up: in the result (each shard says it; the merge keeps one) and as an event."""
        self.result.warnings.append(message)
        self.emit(events.WarningEvent(message, self.index))

    def _lingers(self, why: str) -> None:
        """From now on each case waits for its threads: said once."""
        if self._linger_s:
            return
        self._linger_s = THREAD_GRACE_S
        message = (f"{why}: from now on each case waits up to {THREAD_GRACE_S:g} s for the threads it started, so "
                   f"that what they do is found (and shrunk) with their own case")
        self.result.warnings.append(message)
        self.emit(events.WarningEvent(message, self.index))

    # -- crash-aware search (GPU) ---------------------------------------------------------
    def _learn_crash(self, finding: Finding, case: Case) -> None:
        """The crash's root causes that its case's CPU run proves: a memory error, or the same crash."""
        run = self._cpu_run(case) if self.precheck_on else None
        if run is None:
            return
        for i, head in run.heads.items():
            if names.kind(head.kind).memory or i == finding.id:
                self._crash_heads[i] = head.signature.short()

    def _cpu_run(self, case: Case) -> CpuRun | None:
        """What the case's CPU run shows; None if the pre-check is (now) off."""
        if self._precheck is None:
            spec = replace(self.hub.spec, context=Context.cpu_check(self.settings), wrapper=[], env={}, log_path=None)
            self._precheck = Hub(spec, oracles=names.precheck_oracles(), timeout_s=self.settings.case_timeout_s,
                                 standby=False, stop_early=True)  # a GPU dies at its first bad read: no later op
        try:
            checked = self._precheck.run(case, cut_at=self.stop_at())
            if checked.budget_cut:  # the pre-check holds the case up to the deadline, as a GPU run would
                self._budget_spent()
            run = classify(checked.violations)
        except InvalidCase:
            return CpuRun()
        except HarnessError as e:
            run = CpuRun({}, harness_reason(str(e)))
        if run.outside:
            self._precheck_off(run.outside)
            return None
        return run

    def _precheck_off(self, why: str) -> None:
        self.precheck_on, self._crash_heads = False, {}
        if self._precheck is not None:
            self._precheck.close()
            self._precheck = None
        message = (f"CPU pre-check of cases is off for this campaign: {why}. Every case now runs on the GPU, "
                   f"and each one that re-hits a known crash costs a worker restart.")
        self.result.warnings.append(message)
        self.emit(events.WarningEvent(message, self.index))

    def _known_crash(self, case: Case) -> bool:
        if not self._crash_heads or self._failing or not self.precheck_on:
            return False
        with self.clock.stage("pre-check"):
            run = self._cpu_run(case)
        hit = [i for i in (run.heads if run else ()) if i in self._crash_heads]
        if not hit:
            return False
        self.result.count_known_crash_skip(hit[0], self._crash_heads[hit[0]])
        return True

    # -- the search -----------------------------------------------------------------------
    def _test(self, case: Case) -> None:
        if self.over_budget():
            self.result.stop_reason = R.StopReason.BUDGET
            raise Stop()
        r = self.result
        r.examples += 1
        generating = not self._failing
        if generating:
            r.generated += 1
        features = self._observe(case)
        try:
            if self._known_crash(case):
                self._count(features, generating)
                return
            violations = self.execute(case)
        except BudgetSpent:  # stopped by the budget, not run: not counted (a run of only that tested nothing)
            r.examples -= 1
            r.generated -= generating
            raise
        except InvalidCase:
            from hypothesis import reject
            if generating:
                r.invalid += 1
            reject()
        except TargetError as e:  # the target broke its contract (an async run): stop, never shrink it as a bug
            raise Refused(e) from None
        self._count(features, generating)
        live = [f for f, _ in self.record(violations, case) if f.id not in self.book.settled and not f.minimized
                and not self._known(f)] if violations else []
        if live:
            self._failing.update(f.id for f in live)
            raise found_class(live[0].id)(live[0].id, live[0].violation.message)

    def _known(self, finding: Finding) -> bool:
        """Whether the target names ``finding`` a known bug (asked once per bug): it is not shrunk (known.py)."""
        if self.target.known_bugs is None:
            return False
        if finding.id not in self._known_ids:
            from .known import is_known
            self._known_ids[finding.id] = is_known(finding, self.target.known_bugs)
        return self._known_ids[finding.id]

    def _observe(self, case: Case) -> tuple:
        """The case's features, as Hypothesis events; with ``steer``, its rarity as Hypothesis' target."""
        if self.target.features is None:
            return ()
        from hypothesis import event, target
        features = features_of(self.target.features, case, self.target.name)
        for f in features:
            event(f)
        if self.settings.steer:
            target(self.result.coverage.rarity(features), label="rarity of the case's rarest feature")
        return features

    def _count(self, features: tuple, generating: bool) -> None:
        """A valid generated case counts towards coverage (shrinking revisits, it does not explore)."""
        if generating:
            self.result.coverage.add(features)
        self._tick()

    def _tick(self) -> None:
        r = self.result
        r.timeline.append((round(self.elapsed(), 3), r.examples, len(self.book.by_id)))
        self.emit(events.ProgressEvent(r.examples, r.generated, len(self.book.by_id), self.elapsed(), self.index))

    def phases(self, *, first_batch: bool) -> list:
        """Hypothesis phases of a batch: reuse (the database) first; target when steering; shrink if on."""
        from hypothesis import Phase
        return [Phase.reuse] * first_batch + [Phase.generate] + [Phase.target] * self.settings.steer \
            + [Phase.shrink] * self.settings.shrink

    def _batch(self, batch: int, n: int, strategy) -> None:
        from hypothesis import HealthCheck, Verbosity, given
        from hypothesis import seed as hseed
        from hypothesis import settings as hsettings
        phases = self.phases(first_batch=batch == 0)
        hs = hsettings(max_examples=n, deadline=None, database=self.database, phases=phases,
                       # too_slow: wall time of the first draws, which a busy machine (a niced sweep on 2
                       # shared cores starved 81 s) inflates; it says nothing of the target, and ended campaigns
                       suppress_health_check=[HealthCheck.differing_executors, HealthCheck.too_slow],
                       verbosity=Verbosity.quiet, report_multiple_bugs=True, print_blob=False)
        # settings outside seed: seed() alone would switch the example database off
        test = hs(hseed(self.seed * 1_000_003 + self.index * 7919 + batch)(given(strategy)(self._test)))
        try:
            with no_shrink_time_limit(), self.clock.stage("generate"):
                test()
        except DrawError as e:  # the target's strategy raised: the target's error, not ours, not a finding
            raise draw_error(self.target.name, e) from e.error

    def search(self, quota: int) -> None:
        # TargetError if cases() fails
        with self.clock.stage("generate"):
            skip_tree(self.target.code_under_test)  # Hypothesis need not parse an engine's tree for literals
            palette = of_settings(self.settings.shape_palette, self.seed)
            strategy = self.target.strategy(self.faults, self.settings.max_ops, device=self.hub.spec.device,
                                            palette=palette)
        if palette is not None and not self.target.takes_palette():
            self._say(f"--shape-palette {self.settings.shape_palette}: target {self.target.name!r} draws no "
                      f"case shapes from a palette (its cases take no palette argument), so every case draws "
                      f"from the whole space as without it")
        problem = triton_cache.unusable(compiled=not self.hub.spec.context.interpreted)
        if problem:
            self._say(problem)
        batch, done = 0, 0
        while done < quota:
            self._failing = set()
            before = self.result.generated
            n = min(BATCH, quota - done)
            try:
                self._batch(batch, n, strategy)
            except Refused as r:
                raise r.error from None
            except Stop:
                for fid in self._failing:
                    self.book.mark_interrupted(fid)
                return
            except KeyboardInterrupt:
                self.result.stop_reason = R.StopReason.INTERRUPTED
                for fid in self._failing:
                    self.book.mark_interrupted(fid)
                return
            except HarnessError:
                raise
            except BaseException as exc:  # noqa: B036 - Hypothesis wraps our Found in groups/Flaky
                self._after_failure(exc)
            batch += 1
            generated = self.result.generated - before
            if generated == 0 and not self._failing:
                self.result.stop_reason = R.StopReason.EXHAUSTED  # nothing new to try
                return
            done += max(1, generated) if self._failing else n
        self.result.stop_reason = self.result.stop_reason or R.StopReason.MAX_EXAMPLES

    def _close_hubs(self) -> None:
        self.hub.close()
        if self._precheck is not None:
            self._precheck.close()
            self._precheck = None

    def _after_failure(self, exc: BaseException) -> None:
        from hypothesis.errors import FailedHealthCheck, Unsatisfiable
        ids = finding_ids(exc)
        if not ids:
            if isinstance(exc, (FailedHealthCheck, Unsatisfiable)):
                raise HarnessError(f"target {self.target.name!r}: Hypothesis gave up: "
                                   f"{' '.join(str(exc).split())[:600]}") from None
            raise exc
        for fid in ids:
            self.book.mark_minimized(fid, shrunk=self.settings.shrink)

    def close(self) -> R.CampaignResult:
        """The shard's result, its workers closed (a stop signal while they close: the result says interrupted)."""
        try:
            with self.clock.stage("shutdown"):
                self._close_hubs()
        except KeyboardInterrupt:
            self.result.stop_reason = R.StopReason.INTERRUPTED
            self._close_hubs()  # (a front end raises only the first stop signal: this one finishes)
        r = self.result
        r.stage_s = dict(self.clock.stage_s)
        r.duration_s = self.elapsed()
        r.findings = list(self.book.by_id.values())
        r.worker_restarts = self.hub.restarts
        r.errors += self.book.write_errors
        return r
