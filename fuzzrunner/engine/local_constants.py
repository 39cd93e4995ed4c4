"""Hypothesis' scan of "local" source files for literals, kept off an engine's source tree.

Hypothesis draws an integer or float from the literals of the process's local modules now and then (5% of
draws), and collects them the first time it needs one after a module was loaded: it reads, hashes and
parses every module file outside site-packages. A vendored engine tree (``.cache/vllm/0.33.0/site`` and
its ``deps``, a tree carried to a GPU machine) is outside site-packages: vllm_lora's campaign process and
each shard process parsed some 1,800 modules (vLLM's and its dependencies') before their first case, 43 s
of a 123 s campaign on the 2-core CPU machine (``benchmarks/stage_profile.py``, the ``generate`` stage).
Our cases' ranges are small and the literals of vLLM's source do not steer them, so the modules of the
code under test's tree (``Target.code_under_test["tree"]``, and the folder that holds it: its ``deps``)
are marked scanned without being parsed. Other local modules (fuzzrunner's, a user's target file) are
scanned as before. This reaches into Hypothesis' internals (``providers._seen_modules``): where they
differ, nothing is done (the scan just costs its time).
"""

from __future__ import annotations

import os
import sys


def skip_tree(code_under_test: dict) -> int:
    """Mark the loaded modules under the code under test's tree's folder as scanned; how many were marked."""
    tree = code_under_test.get("tree") if isinstance(code_under_test, dict) else None
    if not tree or not isinstance(tree, str):
        return 0
    try:
        from hypothesis.internal.conjecture import providers
        seen = providers._seen_modules
    except (ImportError, AttributeError):
        return 0
    root = os.path.dirname(os.path.abspath(tree.rstrip(os.sep))) + os.sep
    marked = 0
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.abspath(path).startswith(root) and id(module) not in seen:
            seen.add(id(module))
            marked += 1
    return marked
