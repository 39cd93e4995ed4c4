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
import traceback
from collections.abc import Callable
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


def exit_code(main: Callable[..., int], *args) -> int:
    """``main(*args)``'s answer (1 "bug reproduced", 0 "not reproduced"); 2 "could not run" where SGLang does not
    import or crashes, never 1 (the exit codes of every script in this folder)."""
    try:
        return main(*args)
    except Exception:  # noqa: BLE001 - SGLang that does not import or crashes: "could not run" (2), never "bug" (1)
        traceback.print_exc()
        print("could not run (exit 2)", file=sys.stderr)
        return 2


def validate_patch(case: Callable, apply: Callable, patched: bool) -> int:
    """A patch validated through the ``sglang_engine`` target: ``case(t)`` (the integration test module) gives the
    case's config and ops, run on the set-up release, after ``apply(tree)`` where ``patched``; 1 where found."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from fuzzrunner.case import Case
    from fuzzrunner.execute import run_case
    from fuzzrunner.target import load_target
    target = load_target("sglang_engine")
    if patched:
        apply(Path(target.code_under_test["tree"]))
    config, ops = case(importlib.import_module("test_sglang_engine"))
    vs = run_case(Case("sglang_engine", config, tuple(ops), ()), target, device="cpu")
    for v in vs:
        print(f"{v.kind}: {v.message}")
    print("patched" if patched else "unpatched", "->", "found" if vs else "silent")
    return 1 if vs else 0
