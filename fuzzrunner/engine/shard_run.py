"""One shard's life, start to end: its worker, the corpus replay, the search, its result.

The same function runs a one-shard campaign here, a shard process (``sharding.py``) and a Ray
actor (``ray_shards.py``): each hands it the campaign's plan, its index and its quota.
"""

from __future__ import annotations

from collections.abc import Callable

from ..corpus import Corpus
from ..target import load_target
from . import result as R
from .corpus_replay import replay_corpus
from .database import hypothesis_storage
from .hypothesis_bridge import BudgetSpent, Refused
from .plan import CampaignPlan
from .result import CampaignResult
from .search import Shard


def run_shard(plan: CampaignPlan, index: int, quota: int, on_event: Callable | None, *,
              corpus: Corpus | None = None, database=None, findings_seen=None,
              on_loaded: Callable[[], object] | None = None) -> CampaignResult:
    """Shard ``index``: corpus replay, then the search for ``quota`` examples, until the plan's deadline;
    interrupted or not, a result. ``corpus``: the corpus to use instead of the plan's folder (a Ray shard's
    ``StreamedCorpus``); ``database``: the example database instead of the plan's; ``findings_seen``: set
    once any shard has a finding (``Shard``); ``on_loaded``: called once the target is loaded (an engine's
    imports: minutes on a busy machine), before the search starts."""
    target = load_target(plan.target_spec)
    if on_loaded is not None:
        on_loaded()
    if corpus is None and plan.corpus_dir:
        corpus = Corpus(plan.corpus_dir, faults=plan.faults)
    shard = Shard(plan, index, target, on_event, corpus=corpus,
                  database=database if database is not None else plan.database, findings_seen=findings_seen)
    try:
        with hypothesis_storage(corpus):  # never ./.hypothesis in the user's working directory
            with shard.clock.stage("corpus-replay"):
                replay_corpus(shard)
            shard.search(quota)
    except KeyboardInterrupt:
        shard.result.stop_reason = R.StopReason.INTERRUPTED
    except BudgetSpent:  # the budget ran out during the corpus replay
        pass
    except Refused as r:  # the corpus replay showed the target cannot run here
        raise r.error from None
    finally:
        result = shard.close()
    return result


def prepare_shadow(plan: CampaignPlan, on_event: Callable | None) -> None:
    """Before the workers start the shadow oracle: when they run its device mode, the dispatch filter is built
    here, once (``oracles.shadow.prepare_device_mode``), and a filter that is off is said; the CPU oracle
    forced on a GPU (``Settings.shadow="cpu"``) is said to leave Triton kernels unchecked.
    Called by a local campaign before its shards start, and by each Ray shard on its node before its search."""
    from .. import names
    from ..env_defaults import SHADOW_ENV
    from ..oracles.shadow import prepare_device_mode
    from . import events
    s, context = plan.settings, plan.context
    if "shadow" not in names.effective_oracles(s.oracles, context.device, s.sanitizer):
        return
    if on_event is not None and context.device == "cuda" and context.shadow == "cpu":
        on_event(events.WarningEvent(f"{SHADOW_ENV}=cpu on cuda: the CPU shadow oracle sees torch ops only there; "
                                f"Triton kernels run compiled and unchecked (unset it for the device mode, which "
                                f"checks them, or use --device cpu to check them in Triton's interpreter)"))
    off = prepare_device_mode(context)
    if off is not None and on_event is not None:
        on_event(events.WarningEvent(f"the GPU shadow's dispatch filter is {off}: every torch op goes through its "
                                f"Python mode (the same reports, slower)"))
