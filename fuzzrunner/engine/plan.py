"""What a campaign is, decided once and carried down: the plan, each shard's quota, its worker.

``run_campaign`` makes one frozen ``CampaignPlan`` (the target, its settings and faults, the corpus,
the seed, the run's context, the deadline) and hands it to every shard: a local one, a shard process, a Ray
actor. The context (device, Triton's mode, shadow mode, sanitizer) is resolved before the plan is made
(``Context.resolve``) and never again below it; each worker's is the plan's, placed on its GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .. import gpus
from ..context import Context
from ..settings import Settings
from .deadline import Deadline
from .worker_spec import WorkerSpec


@dataclass(frozen=True)
class CampaignPlan:
    target_spec: str
    target_name: str
    settings: Settings
    faults: tuple
    seed: int
    context: Context
    corpus_dir: str | None = None
    database: object = None           # a plugged-in Hypothesis database (one shard, this process only)
    code: dict = field(default_factory=dict)  # the target's code under test, as loaded here: every worker must match
    deadline: Deadline | None = None  # when the whole campaign has ended (its budget from its start), if any
    details: tuple = ()               # the loaded target's details (Target.details: what of the code it drives here)

    def quotas(self) -> list[int]:
        """Each shard's share of ``max_examples`` (the first ones take the remainder)."""
        return split(self.settings.max_examples, self.settings.workers)

    def worker(self, index: int) -> WorkerSpec:
        return replace(worker_spec(self.target_spec, self.settings, index, self.context), code=dict(self.code))

    def portable(self) -> CampaignPlan:
        """The plan as it can travel to another process (a database object cannot)."""
        return replace(self, database=None)


def split(total: int, n: int) -> list[int]:
    """``total`` in ``n`` parts as equal as can be, the larger first."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def worker_spec(target_spec: str, settings: Settings, index: int, context: Context) -> WorkerSpec:
    """The worker of shard ``index``: ``context`` on its GPU, and compute-sanitizer around it if asked."""
    # Launches stay asynchronous on a GPU (docs/concepts.md, "GPU launches"). A case that loses the CUDA
    # context runs again with blocking launches, in a worker of its own (``Hub``), so the crash finding
    # still names the kernel and line that caused it.
    wrapper: list[str] = []
    env: dict[str, str] = {}
    if context.sanitizer != "none":
        from ..sanitizer.session import sanitizer_wrapper
        wrapper, sanitizer_env = sanitizer_wrapper(context.sanitizer)
        env.update(sanitizer_env)
    gpu = gpus.gpu_for_index(index, gpus.visible_gpus()) if context.device == "cuda" else None
    return WorkerSpec(target_spec, context.placed(gpu), wrapper=wrapper, env=env,
                      max_rss_mb=settings.max_worker_rss_mb)
