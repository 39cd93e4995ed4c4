"""Retraction under KV pressure: ``--max-total-tokens`` drawn small enough that SGLang's ``update_running_batch``
finds the next decode step does not fit (``ScheduleBatch.check_decode_mem``) and retracts requests
(``retract_decode``: their KV released, ``Req.reset_for_retract``, back to the waiting queue through
``_add_request_to_queue(req, is_retracted=True)``), as a real server does when its requests outgrow the admission's
estimate (``new_token_ratio``: 0.7 of a request's new tokens reserved at first, decaying each decode round).

A retracted request comes back through the admission (its adapter checked against ``--max-loras-per-batch`` again
and fetched into the pool again if it was evicted meanwhile), recomputes its prefill, and must end as if nothing
happened: every batch's logits against the float64 reference of its own adapter (runner.Session.forward), the
tokens it asked for, and, once every request of the step has finished, the KV pool whole again (``check_returned``).
"""

from __future__ import annotations

import math
import sys
from unittest import mock

# the pool's size above the longest request's tokens (its prompt, stem included, and its new tokens): 2 leaves one
# request alone the whole pool; a few more let two or three requests in on the admission's estimate, then retract
HEADROOM = (2, 4, 7, 10)


def least_tokens(ops) -> int:
    """The KV slots the longest request of a case's served steps needs (a smaller pool aborts it: SGLang's
    ``retract_decode`` aborts the last request it cannot fit, "Out of memory even after retracting all other
    requests")."""
    most = 1
    for op in ops:
        if op.get("op") != "step":
            continue
        n = len(op.get("reqs", ()))
        lens = op.get("lens", [1] * n) if op.get("mode") == "extend" else [1] * n
        stems = op.get("stem", [0] * n)
        new = op.get("new", [2 if op.get("mode", "decode") == "decode" else 1] * n)
        most = max([most] + [k0 + k + m for k0, k, m in zip(stems, lens, new)])
    return most


def pool_tokens(ops, headroom: int) -> int:
    """``--max-total-tokens`` for a case: its longest request's tokens plus ``headroom``."""
    return least_tokens(ops) + headroom


def test_mode(server, interval: int | None) -> None:
    """SGLang's own retraction test mode for the server's life (``interval``: None leaves it off):
    ``SGLANG_TEST_RETRACT`` / ``SGLANG_TEST_RETRACT_INTERVAL``, which its scheduler module reads at import into
    ``TEST_RETRACT`` / ``TEST_RETRACT_INTERVAL`` (``scheduler.py:399`` in 0.5.23, ``:255`` in 0.5.12): every
    ``interval``-th forward, ``update_running_batch`` retracts as if the pool were full (``retract_decode`` keeps one
    request). The case's own KV pool still retracts where it is short; the test mode reaches the same path in cases
    whose requests (at most 8 new tokens) leave the admission's estimate too little room to fall short."""
    if not interval:
        return
    module = sys.modules[server.sl.Scheduler.update_running_batch.__module__]
    for name, value in (("TEST_RETRACT", True), ("TEST_RETRACT_INTERVAL", int(interval))):
        if hasattr(module, name):
            p = mock.patch.object(module, name, value)
            p.start()
            server.patches.append(p)


def reporter_fields(sc) -> None:
    """What ``update_running_batch``'s retraction reads and sets of the metrics reporter where the result processing
    made one (results.py, 0.5.14+): ``enable_metrics`` (off: the server's default) and ``num_retracted_reqs``."""
    reporter = getattr(sc, "metrics_reporter", None)
    if reporter is not None:
        reporter.__dict__.setdefault("enable_metrics", False)
        reporter.__dict__.setdefault("num_retracted_reqs", 0)


def rework(prompt: int, new: int, chunk: int) -> int:
    """Rounds a retracted request may need again: its prefill recomputed over its prompt and the tokens it had
    generated (in chunks), and its decode steps (serving._Step's bound)."""
    return math.ceil((prompt + new) / chunk) + 1 + new


def check_returned(server, retracted: dict, names: list) -> list[str]:
    """Once every request of a step has finished (none waiting, running or chunked): the KV pool's free slots and
    what the radix tree keeps cached (evictable, none locked) are the whole pool, and every request-pool row is
    free. A slot neither free nor cached is leaked: a retraction or a finish that did not release it."""
    out, alloc, tree = [], server.alloc, server.tree
    free = alloc.available_size()
    cached = tree.evictable_size() if server.radix else 0
    locked = tree.protected_size() if server.radix else 0
    who = ", ".join(f"request {i} ({names[i]!r}) x{k}" for i, k in sorted(retracted.items()))
    why = f" (retracted: {who})" if who else " (no request was retracted)"
    if free + cached != server.kv_size:
        out.append(f"after every request finished the KV pool has {free} free slots and {cached} cached in the radix "
                   f"tree, of {server.kv_size}: {server.kv_size - free - cached} leaked{why}")
    if locked:
        out.append(f"after every request finished the radix tree still locks {locked} tokens{why}")
    rows = server.req_pool.available_size()
    if rows != server.max_running:
        out.append(f"after every request finished {server.max_running - rows} request-pool rows are still held{why}")
    return out


__all__ = ["HEADROOM", "check_returned", "least_tokens", "pool_tokens", "rework"]
