"""The tracking API's pitfalls: views of one storage, carry-over of a view, re-tracking each step."""

import torch

from fuzzrunner.tracking import carry_over, track

from .harness import pair

U, S = "uninitialized-read", "stale-read"


@pair("tracking-api", S, "meta.mapping")
def two_views_keep_per_step(ctx, bug):
    meta = torch.zeros(16, dtype=torch.int32)
    mapping = track(meta[:8], "meta.mapping", per_step=True)
    counts = track(meta[8:], "meta.counts")  # a second view must not drop the first's per_step
    ctx.step()
    mapping[:3] = 1
    if not bug:
        mapping[3:4] = 1
    s = mapping[:4].sum()  # BAD


@pair("tracking-api", S, "mapping")
def carry_over_a_view(ctx, bug):
    mapping = track(torch.zeros(8, dtype=torch.int32), "mapping", per_step=True)
    ctx.step()
    mapping[:4] = 2
    ctx.step()
    carry_over(mapping[:4])  # only the active prefix is still valid
    n = 5 if bug else 4
    s = mapping[:n].sum()  # BAD


@pair("tracking-api", S, "positions")
def retrack_every_step(ctx, bug):
    pos = torch.zeros(6, dtype=torch.int64)
    for step in range(2):
        ctx.step()
        track(pos, "positions", per_step=True)  # called each step, default initialized=True
        pos[:3 if bug and step == 1 else 6] = step
    s = pos.sum()  # BAD


@pair("tracking-api", U, "token_slots")
def track_empty_without_initialized_false(ctx, bug):
    slots = track(torch.empty(8, dtype=torch.int64), "token_slots", per_step=True)
    slots[:6] = 0
    if not bug:
        slots[6:] = 0
    s = slots.max()  # BAD


@pair("tracking-api", S, "req_ids")
def per_step_sub_view_of_persistent(ctx, bug):
    state = track(torch.zeros(10, dtype=torch.int64), "state")
    req = track(state[2:6], "req_ids", per_step=True)
    ctx.step()
    req[:3] = 1
    if not bug:
        req[3] = 1
    s = state[2:6].sum()  # BAD
