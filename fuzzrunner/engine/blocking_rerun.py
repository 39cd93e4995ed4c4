"""When a case that lost the CUDA context runs again with blocking launches, and how each crash says so.

GPU workers launch asynchronously, so the error that broke the context surfaces at a later launch or
synchronisation, and "the last kernel launch" can name a kernel after the culprit. With
``CUDA_LAUNCH_BLOCKING=1`` it surfaces at the launch that caused it: the hub runs such a case again in a
worker launching blocking (``Hub._named_by_blocking_rerun``). Each crash's details say how the launches
ran in the run it comes from (``launched``), so a reader knows whether "the last kernel launch" is the
culprit.
"""

from __future__ import annotations

from .. import names
from ..violation import raised_cuda_error
from .run_result import RunResult

RERUN_MIN_S = 30.0  # a lost context is run again (blocking) only with at least this much budget left


def lost_context(result: RunResult) -> bool:
    """Whether the run lost the CUDA context (a death by a signal or a hang does not)."""
    return any(names.tool(v.tool).context_lost for v in result.violations)


def why_no_rerun(result: RunResult, *, blocking: bool, rerun_error: str | None, can_rerun: bool,
                 left_s: float) -> str | None:
    """How the crash's launches ran, when it is not run again (None: run it again). ``blocking``: the
    workers launch blocking already (a sanitizer's, or the user's); ``rerun_error``: why reruns stopped;
    ``can_rerun``: reruns are possible (no wrapper, not blocking already); ``left_s``: the budget left."""
    if not lost_context(result):  # a signal, a hang: no rerun
        return "blocking" if blocking else "asynchronous: a death by a signal or a hang is not run again"
    if rerun_error:
        return f"asynchronous: no blocking rerun ({rerun_error})"
    if not can_rerun:
        return "blocking" if blocking else "asynchronous: no blocking rerun (the workers run under a wrapper)"
    if left_s < RERUN_MIN_S:  # a worker's start-up would overrun the budget
        return f"asynchronous: no blocking rerun (under {RERUN_MIN_S:g} s of the budget left)"
    return None


def not_lost(again: RunResult) -> str:
    """Why a blocking rerun did not confirm a lost context, in a phrase."""
    if again.budget_cut:
        return "was cut by the budget"
    if again.crashed and again.violations:
        v = again.violations[0]
        return f"did not lose the context (it ended: {v.kind} in {v.kernel or '?'})"
    return "did not lose the context"


def launched(result: RunResult, how: str) -> RunResult:
    """Say in each crash's details (a lost context, a death, a hang, a CUDA error raised) how the
    launches ran in the run it comes from:
    blocking (the rerun: the error surfaced at the launch that caused it) or asynchronous (and why no
    rerun named it), so a reader knows whether "the last kernel launch" is the culprit."""
    for v in result.violations:
        if names.tool(v.tool).process_death or raised_cuda_error(v):
            v.details["launches"] = how
    return result
