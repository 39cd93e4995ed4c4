"""Shards of a campaign as Ray actors: one campaign, one corpus, one report across many machines.

Each shard is an actor (one GPU under ``device="cuda"``, else one CPU) that runs ``run_shard``
with its own crash-isolated worker, exactly as a local shard process does. What it finds
streams to the driver through an inbox actor on the driver's node, and feeds the same
``sharding.Merger`` as local shards; its corpus writes are messages that the driver's
``CorpusWriter`` applies (one writer). A shard whose actor or node dies has lost nothing it
sent: Ray restarts the actor (``max_restarts``) and the driver resumes the shard with a new
seed and what is left of its quota and budget, and reports the death as a warning.
Ray is imported lazily: without it, only ``TargetUnavailable`` with the install line.
"""

from __future__ import annotations

import os
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from ..corpus import Corpus
from ..errors import HarnessError, InvalidArgument, TargetUnavailable
from ..finding import merge_all
from ..target_spec import TargetSpec
from ..text import describe, plural
from . import events
from . import result as R
from .corpus_replay import bad_corpus_file
from .corpus_stream import CorpusWriter, StreamedCorpus, snapshot
from .plan import CampaignPlan
from .result import CampaignResult
from .sharding import Merger

RAY_MISSING = ("--ray needs Ray, an optional extra: pip install 'fuzzrunner[ray]' "
               "(on the driver and on every node of the cluster).")
MAX_RESTARTS = 3          # deaths a shard survives; each resumes it with a new seed
POLL_S = 0.2
RESUME_WAIT_S = 600.0     # longest wait for Ray to bring a dead shard's actor back (no free node meanwhile)
RESEED = 104_729          # a resumed shard's seed: seed + RESEED * run


def import_ray():
    try:
        import ray
    except ImportError:
        raise TargetUnavailable(RAY_MISSING) from None
    return ray


def check_cluster(address: str | None, db_url: str | None) -> None:
    """Before a campaign starts (the CLI, before it makes the corpus folder): ``--ray`` needs Ray here (the one
    install line if not); ``--db`` needs ``--ray`` and a Redis URL."""
    if db_url and not address:
        raise InvalidArgument(f"--db {db_url} is the example database of Ray shards: add --ray ADDRESS (a local "
                              f"campaign keeps its database in the corpus).")
    if db_url:
        from .shared_db import check_url
        check_url(db_url)
    if address:
        import_ray()


@contextmanager
def ray_session(address: str, runtime_env: dict | None = None):
    """Connected to Ray at ``address`` (``local``, ``auto``, ``ray://host:port``) for the block, with
    the job's ``runtime_env`` (Ray uploads a local ``working_dir`` only for a whole job). A session
    the caller opened already is used as it is and left open: then a ``FILE.py`` target must be
    at the same path on every node."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    options = {"runtime_env": runtime_env} if runtime_env else {}
    try:
        if address == "local":
            ray.init(address="local", include_dashboard=False, configure_logging=False, **options)
        else:
            ray.init(address=address, configure_logging=False, **options)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise HarnessError(f"--ray {address}: cannot connect ({' '.join(str(e).split())[:300]}); start a cluster "
                           f"with `ray start --head`, set RAY_ADDRESS for auto, or use --ray local.") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def packaged(spec: str) -> tuple[str, dict]:
    """A ``FILE.py:OBJ`` target travels as its folder (Ray's ``working_dir``): the spec the
    shards load and the runtime environment that ships it; a module spec travels as it is."""
    parsed = TargetSpec.parse(spec)
    if parsed.file is None:
        return spec, {}
    path = os.path.abspath(parsed.file)
    return f"{os.path.basename(path)}:{parsed.obj}", {"working_dir": os.path.dirname(path)}


@dataclass
class ShardJob:
    """One run of one shard: what its actor needs (the driver makes a new one on each resume). The
    plan is the campaign's, whole: its ``target_spec`` the one the shards load (a ``FILE.py`` target travels as
    its folder), its seed this run's (a resumed shard gets a new one; its deadline is the campaign's)."""
    plan: CampaignPlan
    index: int
    run: int
    quota: int
    entries: list
    db_url: str | None
    db_server: Any  # a Ray actor handle (shared_db.serve), or None
    inbox: Any      # the driver's Inbox, a Ray actor handle


class Inbox:
    """What shards send, kept on the driver's node until the driver takes it (in order per sender)."""

    def __init__(self):
        self.items: deque = deque()

    def put(self, item) -> None:
        self.items.append(item)

    def take(self) -> list:
        out = list(self.items)
        self.items.clear()
        return out


class ShardActor:
    """One shard on the cluster (wrapped by ``ray.remote`` in ``_campaign``). It takes no constructor
    arguments: Ray restarts it from nothing, and each run's job says all (the inbox too)."""

    def ping(self) -> bool:
        return True

    def _send(self, job: ShardJob, event: events.Event, wait: bool) -> None:
        """``event`` to the driver's inbox, as plain data (``Event.to_dict``; the driver reads it back)."""
        import ray
        ref = job.inbox.put.remote((job.index, job.run, event.to_dict()))
        if wait:  # findings, corpus writes, the result: on the driver's node before the shard goes on
            ray.get(ref)

    def run(self, job: ShardJob) -> None:
        from ..env_defaults import device_of_call
        # the plan's device is this actor's default for the job: the target it loads is the one its workers load
        # (vllm_lora imports vLLM for that device); the workers get the whole context from their start-up. The
        # process's own device is back after it (a shard run in a test's process left --device cpu behind)
        with device_of_call(job.plan.context.device):
            self._run(job)

    def _run(self, job: ShardJob) -> None:
        from .shard_run import prepare_shadow, run_shard
        from .shared_db import ServedDatabase, close_database, database_from_url

        def send(event: events.Event) -> None:
            self._send(job, event, wait=True)
        plan = job.plan
        corpus = StreamedCorpus(plan.corpus_dir, plan.faults, job.entries, send) if plan.corpus_dir else None
        db = (database_from_url(job.db_url) if job.db_url else
              ServedDatabase(job.db_server) if job.db_server is not None else None)

        def on_event(e: events.Event) -> None:
            self._send(job, e, not isinstance(e, events.ProgressEvent))
        try:
            prepare_shadow(plan, on_event)  # on this node, before the shard's worker (within the plan's deadline)
            res = run_shard(plan, job.index, job.quota, on_event, corpus=corpus, database=db)
            send(events.ShardDone(res))
        except BaseException as e:  # noqa: B036 - report, never leave the driver waiting
            send(events.ShardError(describe(e, 2000)))
        finally:
            close_database(db)


class _Driver:
    """The driver's loop: messages to the merger and the writer; dead shards resumed."""

    def __init__(self, ray, merger: Merger, writer: CorpusWriter, plan: CampaignPlan):
        """``plan``: the campaign's; a resumed shard gets it whole (a new seed only), and whether it is resumed
        and how long Ray is waited for go by its deadline."""
        self.ray, self.merger, self.writer, self.plan = ray, merger, writer, plan
        self.counts: dict[tuple, tuple] = {}       # (shard, run) -> (examples, generated) so far
        self.deaths: list[tuple] = []              # (shard, run, message)
        self.finished: set[tuple] = set()          # (shard, run) that sent done or error
        self.running: dict = {}                    # run's object ref -> (actor, job)
        self.restarting: dict = {}                 # ping's object ref -> (actor, job to resume)
        self.later: list = []                      # (when, actor, job): ping again, Ray is still restarting it
        self.give_up_at: dict[int, float] = {}     # shard -> when to stop waiting for its restart

    def submit(self, actor, job: ShardJob) -> None:
        self.running[actor.run.remote(job)] = (actor, job)

    def loop(self, inbox) -> None:
        while self.running or self.restarting or self.later:
            self.drain(inbox)
            refs = [*self.running, *self.restarting]
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=POLL_S) if refs else ([], [])
            if not refs:
                time.sleep(POLL_S)
            self.drain(inbox)  # a shard's last messages were delivered before its run returned
            for ref in ready:
                if ref in self.running:
                    self._ended(ref, *self.running.pop(ref))
                else:
                    self._pinged(ref, *self.restarting.pop(ref))
            self._ping_due()

    def drain(self, inbox) -> None:
        for index, run, message in self.ray.get(inbox.take.remote()):
            self.handle(index, run, events.Event.from_dict(message))

    def handle(self, index: int, run: int, m: events.Event) -> None:
        """One event of shard ``index``'s run ``run``: corpus writes to the writer, its end and its
        progress (summed over its runs) here, every other event to the merger."""
        def progress(m: events.ProgressEvent) -> None:
            self.counts[(index, run)] = (m.examples, m.generated)
            mine = [c for (i, _), c in self.counts.items() if i == index]
            self.merger.event(replace(m, examples=sum(c[0] for c in mine), generated=sum(c[1] for c in mine)))

        def done(m: events.ShardDone) -> None:
            self.finished.add((index, run))
            self.merger.done(m.result)

        def error(m: events.ShardError) -> None:
            self.finished.add((index, run))
            self.merger.result.errors.append(f"shard {index} failed: {m.message}")
        handlers = {**self.writer.handlers(), events.ProgressEvent: progress, events.ShardDone: done,
                    events.ShardError: error}
        events.dispatch(handlers, m, default=self.merger.event)

    def _ended(self, ref, actor, job: ShardJob) -> None:
        try:
            self.ray.get(ref)
        except self.ray.exceptions.RayActorError as e:
            if (job.index, job.run) not in self.finished:
                self._died(actor, job, e)
        except self.ray.exceptions.RayError as e:
            if (job.index, job.run) not in self.finished:
                self.merger.result.errors.append(f"shard {job.index} failed: {' '.join(str(e).split())[:300]}")
        if (job.index, job.run) in self.finished:
            self.ray.kill(actor, no_restart=True)  # its CPU or GPU is free for a shard Ray restarts

    def _died(self, actor, job: ShardJob, error) -> None:
        examples, generated = self.counts.get((job.index, job.run), (0, 0))
        resumed = self._resumed(job, generated)
        tail = (f"resumed with seed {resumed.plan.seed}" if resumed is not None else
                "not resumed (its quota or the budget is spent)" if job.run < MAX_RESTARTS else
                f"not resumed: it died {job.run + 1} times")
        message = (f"shard {job.index}'s Ray actor died ({type(error).__name__}: its process or node was lost) "
                   f"after {plural(examples, 'case')}; its findings were already with the driver; {tail}")
        self.deaths.append((job.index, job.run, message))
        self.merger.event(events.WarningEvent(message))
        if resumed is not None:
            self.restarting[actor.ping.remote()] = (actor, resumed)
            self.give_up_at[job.index] = time.monotonic() + self._wait_s()
        elif job.run >= MAX_RESTARTS:
            self._gave_up(job)

    def _pinged(self, ref, actor, job: ShardJob) -> None:
        """Ray restarts a dead actor (elsewhere, once resources free up); the shard resumes when it answers."""
        try:
            self.ray.get(ref)
        except self.ray.exceptions.ActorUnavailableError:
            if time.monotonic() > self.give_up_at.get(job.index, 0.0):
                self._gave_up(job)
            else:
                self.later.append((time.monotonic() + 1.0, actor, job))
        except self.ray.exceptions.RayActorError:
            self._gave_up(job)
        else:
            self.submit(actor, job)

    def _ping_due(self) -> None:
        now = time.monotonic()
        due = [x for x in self.later if x[0] <= now]
        self.later = [x for x in self.later if x[0] > now]
        for _, actor, job in due:
            self.restarting[actor.ping.remote()] = (actor, job)
        for ref, (actor, job) in list(self.restarting.items()):
            if now > self.give_up_at.get(job.index, now):  # no node has room for it: stop waiting
                del self.restarting[ref]
                self.ray.kill(actor, no_restart=True)
                self._gave_up(job)

    def _wait_s(self) -> float:
        deadline = self.plan.deadline
        return RESUME_WAIT_S if deadline is None else min(RESUME_WAIT_S, deadline.left())

    def _gave_up(self, job: ShardJob) -> None:
        self.merger.result.errors.append(f"shard {job.index} died and Ray could not bring it back (no node had "
                                         f"room, or it died {MAX_RESTARTS + 1} times); the campaign went on "
                                         f"without it")

    def _resumed(self, job: ShardJob, generated: int) -> ShardJob | None:
        if job.run >= MAX_RESTARTS:
            return None
        quota = job.quota - generated
        deadline = job.plan.deadline  # the campaign's, from the command's start: the resumed shard's too
        if quota <= 0 or (deadline is not None and deadline.left() < 1.0):
            return None
        plan = replace(job.plan, seed=job.plan.seed + RESEED * (job.run + 1))
        return replace(job, run=job.run + 1, quota=quota, plan=plan)

    def finish(self, merged: CampaignResult) -> None:
        """The counts of runs that sent no result (dead, or cut short by an interrupt), and the dead
        ones' warnings, into the result; every finding the writer holds, merged in."""
        dead = {(index, run): message for index, run, message in self.deaths}
        for key in sorted(set(self.counts) | set(dead)):
            if key in self.finished:
                continue
            examples, generated = self.counts.get(key, (0, 0))
            part = CampaignResult(merged.target, merged.settings, merged.seed, merged.faults, examples=examples,
                                  generated=generated, warnings=[dead[key]] if key in dead else [])
            self.merger.done(part)
        # the writer's latest state of each finding; without a corpus, what the finding events showed
        merged.findings = merge_all(merged.findings, [*self.writer.findings.values(), *self.merger.seen.values()])
        for f in merged.findings:
            f.target_spec = self.writer.target_spec
        merged.errors += self.writer.errors


def _this_node(ray):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)


def shard_options(device: str) -> dict:
    """Ray resources of one shard: one GPU under cuda (Ray sets its CUDA_VISIBLE_DEVICES), else one CPU.
    No runtime environment of its own: Ray can then hand it an idle worker process it started already."""
    gpus = {"num_gpus": 1} if device == "cuda" else {}
    return {"num_cpus": 1, **gpus, "max_restarts": MAX_RESTARTS, "max_task_retries": 0, "scheduling_strategy": "SPREAD"}


def run_on_ray(address: str, plan: CampaignPlan, on_event, *, db_url: str | None = None) -> CampaignResult:
    if plan.database is not None:
        raise InvalidArgument("a plugged-in Hypothesis database object cannot travel to Ray shards; pass "
                              "db='redis://...' (or nothing: the driver serves the corpus' database).")
    import_ray()
    shard_spec, runtime_env = packaged(plan.target_spec)
    with ray_session(address, runtime_env) as ray:
        if not runtime_env.get("working_dir") or ray.get_runtime_context().runtime_env.get("working_dir") is None:
            shard_spec = plan.target_spec  # a session opened by the caller: the file is where it is
        result = _campaign(ray, plan, shard_spec, on_event, db_url)
        result.cluster = describe_cluster(ray, address, db_url)
        return result


def describe_cluster(ray, address: str, db_url: str | None) -> dict:
    """What the report records of the cluster a campaign ran on."""
    try:
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        resources = ray.cluster_resources()
    except Exception:  # noqa: BLE001 - a cluster gone at the end leaves only what is known here
        nodes, resources = 0, {}
    return {"ray": address, "ray_version": getattr(ray, "__version__", ""), "nodes": nodes,
            "cpus": int(resources.get("CPU", 0)), "gpus": int(resources.get("GPU", 0)),
            "example_database": "redis" if db_url else "driver"}


def _campaign(ray, plan: CampaignPlan, shard_spec: str, on_event, db_url) -> CampaignResult:
    from .shared_db import serve
    start = time.monotonic()
    merged = CampaignResult(plan.target_name, plan.settings, plan.seed, plan.faults)
    merger = Merger(plan.settings.workers, on_event, merged)
    corpus = Corpus(plan.corpus_dir, faults=plan.faults) if plan.corpus_dir else None
    writer = CorpusWriter(corpus, plan.target_spec)
    entries = snapshot(plan.corpus_dir, plan.faults, plan.target_name, _on_bad(merged, merger))
    node = _this_node(ray)
    inbox = ray.remote(Inbox).options(num_cpus=0, scheduling_strategy=node).remote()
    server = (serve(str(corpus.database_path(plan.target_name)), node) if corpus is not None and not db_url else None)
    shard_plan = replace(plan, target_spec=shard_spec, corpus_dir=str(corpus.root) if corpus else None)
    jobs = [ShardJob(shard_plan, i, 0, quota, entries if i == 0 else [], db_url, server, inbox)
            for i, quota in enumerate(plan.quotas())]
    actor_class = ray.remote(ShardActor).options(**shard_options(plan.context.device))
    actors = [actor_class.remote() for _ in jobs]
    driver = _Driver(ray, merger, writer, plan)
    try:
        for actor, job in zip(actors, jobs):
            driver.submit(actor, job)
        driver.loop(inbox)
    except KeyboardInterrupt:
        _kill(ray, actors)  # what they found is with the driver already
        driver.drain(inbox)
        merged.stop_reason = R.StopReason.INTERRUPTED
    except ray.exceptions.RayError as e:  # the driver's own actors or the cluster went away
        merged.errors.append(f"the Ray cluster failed under the campaign ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:200]}); what the shards sent before is in the corpus")
    finally:
        _kill(ray, [*actors, inbox, *([server] if server is not None else [])])
    driver.finish(merged)
    merged.duration_s = time.monotonic() - start
    return merged


def _kill(ray, handles: list) -> None:
    for handle in handles:
        try:
            ray.kill(handle, no_restart=True)
        except ray.exceptions.RayError:
            pass  # gone already


def _on_bad(result: CampaignResult, merger: Merger):
    def bad(path, moved, error) -> None:
        result.quarantined.append((str(path), str(moved) if moved else None, str(error)))
        merger.event(events.WarningEvent(bad_corpus_file(path, moved, error)))
    return bad
