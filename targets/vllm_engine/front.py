"""What stands in front of the engine target's runner in a case that draws it: vLLM's serving layer (serving.py:
the API server's adapter routes and request path) and the scheduler's prefix cache (prefix_cache.py), in the order a
request meets them: the API server admits it, the scheduler finds its cached prefix and allocates its blocks, the
worker runs the step."""

from __future__ import annotations


def wrap(session, ctx):
    """``session`` itself, or its front ends where the case draws them (``serving``, ``prefix_caching``)."""
    c = session.c
    out = session
    if c.get("prefix_caching"):
        from . import prefix_cache
        out = prefix_cache.PrefixCache(out, ctx, prefix_cache.find())
    if c.get("serving"):
        from . import serving
        out = serving.Frontend(out, ctx)
    return out
