"""How the standalone SGLang repros in this folder import SGLang (imported by them; not a repro itself).

An installed SGLang (``pip install sglang``, its own dependencies, a GPU) imports as the server imports it: its
``site-packages`` goes first on ``sys.path``. A CPU tree of this checkout (``scripts/sglang_setup.sh VERSION``:
``.cache/sglang/VERSION/site`` beside its ``deps``, no compiled kernels) imports as fuzzrunner's ``sglang_engine``
target imports it (``targets/sglang_engine/boot.py``: the release's own modules in the server's order, placeholders
for ``torchvision``/``sgl_kernel``/``vllm`` where none is installed, and its CPU adaptations of where memory lives).
Before, the SG1 repro ran only after ``load_engine("cpu")`` had been called in the same process.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SITE = ROOT / ".cache" / "sglang" / "0.5.23" / "site"


def import_sglang(site: str | None) -> str:
    """Put SGLang from ``site`` (the folder holding ``sglang/``; default this checkout's 0.5.23 tree) where the
    repro's imports find it; what was imported, in words. Raises if SGLang cannot be imported from there."""
    tree = Path(site) if site else DEFAULT_SITE
    if not (tree / "sglang").is_dir():
        raise FileNotFoundError(f"{tree} holds no sglang/ (give the folder holding it: an installed SGLang's "
                                f"site-packages, or a tree of scripts/sglang_setup.sh)")
    if not (tree.parent / "deps").is_dir():  # an installed SGLang: as the server imports it
        sys.path.insert(0, str(tree))
        importlib.import_module("sglang.srt.server_args")
        return f"SGLang from {tree} (installed)"
    sys.path.insert(0, str(ROOT))  # a CPU tree: through fuzzrunner's boot of the engine
    import torch
    from fuzzrunner.targets.sglang_engine import boot
    boot.activate([tree, tree.parent / "deps"])
    for module in boot.ENGINE_PROBE:
        importlib.import_module(module)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    boot.adapt(device)
    return f"SGLang from {tree} (a CPU tree, imported by targets/sglang_engine/boot.py, on {device})"
