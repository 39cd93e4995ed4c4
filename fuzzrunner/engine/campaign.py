"""The campaign: fuzz one target under settings, with a corpus; one shard here, or many in processes.

The campaign process never touches a GPU. It replays the corpus first, then searches; findings
are on disk as soon as they are found. It always returns a result, also when interrupted or
when it could not write: ``stop_reason`` says why it ended and ``errors`` what went wrong.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

from .. import gpus
from ..corpus import Corpus
from ..settings import Settings
from ..target import load_target
from . import result as R
from .corpus_replay import replay_corpus
from .database import hypothesis_storage
from .hub import WorkerSpec
from .result import CampaignResult
from .search import BudgetSpent, Refused, Shard

__all__ = ["CampaignResult", "run_campaign", "worker_spec"]

LOW_VALID_FRACTION = 0.10
FEW_CASES = 10            # a budget-stopped run with fewer valid cases is warned about: it tested little


def worker_spec(target_spec: str, settings: Settings, index: int, device: str) -> WorkerSpec:
    # Blocking launches on a GPU: a device-side assert or illegal address then surfaces at the
    # launch that caused it, so the crash finding names the right kernel and line.
    wrapper, env = [], ({"CUDA_LAUNCH_BLOCKING": "1"} if device == "cuda" else {})  # type: ignore[var-annotated]
    if settings.sanitizer != "none":
        from ..sanitizer.session import sanitizer_wrapper
        wrapper, sanitizer_env = sanitizer_wrapper(settings.sanitizer)
        env.update(sanitizer_env)
    gpu = gpus.gpu_for_index(index, gpus.visible_gpus()) if device == "cuda" else None
    return WorkerSpec(target_spec, device=device, gpu=gpu, wrapper=wrapper, env=env,
                      max_rss_mb=settings.max_worker_rss_mb)


def resolve_device(settings: Settings) -> str:
    if settings.device:
        return settings.device
    from .. import _env
    return _env.device_type()


def run_shard(target_spec: str, settings: Settings, faults: tuple, corpus_dir, index: int, seed: int, quota: int,
              device: str, on_event: Callable | None, database=None) -> CampaignResult:
    """One shard, start to end: corpus replay, then the search; interrupted or not, a result.

    ``corpus_dir`` is a directory, or a ``Corpus`` (a Ray shard's ``StreamedCorpus``)."""
    target = load_target(target_spec)
    corpus = corpus_dir if isinstance(corpus_dir, Corpus) else Corpus(corpus_dir, faults=faults) if corpus_dir else None
    shard = Shard(target_spec, target, settings, faults, corpus, database, index, seed,
                  worker_spec(target_spec, settings, index, device), on_event)
    try:
        with hypothesis_storage(corpus):  # never ./.hypothesis in the user's working directory
            replay_corpus(shard)
            shard.search(quota)
    except KeyboardInterrupt:
        shard.result.stop_reason = R.STOP_INTERRUPTED
    except BudgetSpent:  # the budget ran out during the corpus replay
        pass
    except Refused as r:  # the corpus replay showed the target cannot run here
        raise r.error from None
    finally:
        result = shard.close()
    return result


def run_campaign(target_spec: str, settings: Settings, *, faults=(), corpus_dir=None, database=None,
                 on_event: Callable | None = None, ray: str | None = None, db: str | None = None) -> CampaignResult:
    """Fuzz ``target_spec`` under ``settings``; findings are on disk as soon as they are found.

    ``ray`` (an address: ``local``, ``auto``, ``ray://host:port``) runs the shards as Ray actors;
    ``db`` (``redis://...``, with ``ray``) is the example database they share."""
    target = load_target(target_spec)  # a target that cannot even load is a harness error, here
    faults = target.check_faults(faults)
    seed = settings.seed if settings.seed is not None else random.randrange(1 << 30)
    device = resolve_device(settings)
    if ray is not None:
        from .ray_shards import run_on_ray
        result = run_on_ray(ray, target_spec, settings, faults, corpus_dir, seed, device, on_event, target.name,
                            db_url=db, database=database)
    elif db is not None:
        from ..errors import InvalidArgument
        raise InvalidArgument(f"db={db!r} shares the example database between Ray shards: it needs ray=ADDRESS "
                              f"(a local campaign keeps its database in the corpus).")
    else:
        settings = _with_precheck_shards(settings, device, database)
        if settings.workers == 1:
            result = run_shard(target_spec, settings, faults, corpus_dir, 0, seed, settings.max_examples, device,
                               on_event, database)
        else:
            from .sharding import run_sharded
            result = run_sharded(target_spec, settings, faults, corpus_dir, seed, device, on_event, target.name,
                                 database)
    result.seed = seed
    if device == "cuda" and settings.cpu_triage and result.findings:
        _triage(result, target_spec, settings, corpus_dir, faults, target.name)
    _check_floor(result, settings)
    return result


def precheck_workers(settings: Settings) -> int:
    """How many CPU pre-checks a one-worker GPU campaign runs at once: the setting, else a quarter of
    the host's CPUs (at most 8): the rest stay for the GPU workers, their spares and generation."""
    if settings.precheck_workers is not None:
        return settings.precheck_workers
    return max(1, min(8, (os.cpu_count() or 1) // 4))


def _with_precheck_shards(settings: Settings, device: str, database) -> Settings:
    """A one-worker GPU campaign searches in ``precheck_workers`` shards on its GPU(s): once a crash is
    known every case is pre-checked on the CPU first (search.py), and one search waits for one
    pre-check at a time; shards pre-check in parallel on the host's spare cores (and generate in
    parallel). A plugged-in database object cannot travel to shard processes: then one shard."""
    if device != "cuda" or not settings.cpu_triage or settings.workers != 1 or database is not None:
        return settings
    n = min(precheck_workers(settings), settings.max_examples)
    return settings.override(workers=n) if n > 1 else settings


def _triage(result: CampaignResult, target_spec: str, settings: Settings, corpus_dir, faults, name: str) -> None:
    """Each GPU finding replayed on the CPU; findings the CPU names as one bug become one."""
    from ..errors import FuzzrunnerError
    from .triage import merge_by_triage, triage_on_cpu
    try:
        triage_on_cpu(result.findings, target_spec, settings)
    except (FuzzrunnerError, OSError) as e:  # triage helps; it never costs the findings
        result.warnings.append(f"CPU triage did not run: {e}")
        return
    result.findings, absorbed = merge_by_triage(result.findings)
    if corpus_dir is None:
        return
    corpus = Corpus(corpus_dir, faults=faults)
    try:
        for f in result.findings:
            corpus.save_finding(name, f)
        for f in absorbed:
            corpus.finding_path(name, f.id).unlink(missing_ok=True)
    except OSError as e:
        result.errors.append(f"could not rewrite findings after CPU triage: {e}")


def _check_floor(r: CampaignResult, settings: Settings) -> None:
    """Never pass on nothing: too few valid cases is an error, few is a warning."""
    if r.stop_reason == R.STOP_INTERRUPTED:
        return
    if r.valid < settings.min_valid:
        r.errors.append(f"only {r.valid} valid case(s) ran ({r.generated} generated, {r.invalid} rejected by "
                        f"the target; stop: {r.stop_reason or 'unknown'}), below the floor of "
                        f"{settings.min_valid}: this campaign tested (almost) nothing. Check the target's "
                        f"strategy, or raise the budget.")
    elif r.stop_reason == R.STOP_BUDGET and r.valid < FEW_CASES:
        r.warnings.append(f"only {r.valid} valid case(s) ran before the {settings.budget_s:g} s budget ended "
                          f"(of {settings.max_examples} asked): this run tested little of the case space; "
                          f"give it more time (--budget).")
    elif r.generated and r.valid < LOW_VALID_FRACTION * r.generated:
        r.warnings.append(f"only {r.valid} of {r.generated} generated cases were valid "
                          f"({100 * r.valid / r.generated:.0f}%): the target rejects most of what its "
                          f"strategy makes.")
