"""Target ``vllm_lora``: vLLM's own LoRA metadata and Triton ops, driven the way its model runners drive them.

Needs a vLLM release importable (``scripts/vllm_setup.sh VERSION`` makes one importable on a
machine with no GPU and none of vLLM's dependencies). Without it the target is unavailable:
``vllm_available()`` says why in one line, loading the target raises ``TargetUnavailable`` with it
(``fuzzrunner targets``, ``doctor`` and ``nightly`` show the reason and go on).
See docs/vllm.md.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys

from fuzzrunner.errors import HarnessError, TargetUnavailable

from . import patching, site

# what of vLLM this target drives, as `fuzzrunner targets` says it (catalog.py reads it without importing this)
DRIVES = ("LoRAKernelMeta and the punica wrapper's update_metadata (embeddings included)",
          "vLLM's lora_shrink, lora_expand and fused_moe_lora Triton ops",
          "dummy runs, padding, CUDA-graph captures and stale states")
INSTALL_HINT = "run scripts/vllm_setup.sh {v} (or pip install vllm, or set FUZZRUNNER_VLLM_SITE)"
_API = {}
_FAILED: dict = {}  # device -> the error its import raised (after sys.path was changed: final for this process)
_FROM: dict = {}  # device -> where the loaded vLLM came from (said before importing it: after, it reads as installed)


def _device() -> str:
    from fuzzrunner import _env
    return _env.device_type()


def vllm_available() -> tuple[bool, str]:
    """Cheap (no import of vLLM): whether a vLLM is there to load, else the one-line reason and fix."""
    paths = site.candidate_paths()
    if paths is None:
        v = site.wanted_version()
        return False, (f"vLLM is not importable (no installed vllm, no FUZZRUNNER_VLLM_SITE, no set-up tree "
                       f".cache/vllm/{v}/); {INSTALL_HINT.format(v=v)}.")
    problem = site.explicit_site_problem()
    if problem:
        return False, problem
    try:
        patch = patching.requested()
    except TargetUnavailable as e:
        return False, str(e)
    where = "FUZZRUNNER_VLLM_SITE" if site.os.environ.get("FUZZRUNNER_VLLM_SITE") else \
        ("installed vllm" if not paths else f"{paths[0].parent}")
    return True, where + (f", patched with {patch.name} ({patching.ENV})" if patch else "")


def load_api():
    """Import the vLLM under test (once per process) and adapt it. A failure once sys.path has been changed is this
    process's answer for good: a second target (doctor and nightly load both) would otherwise look again with the
    patched copy on sys.path and take it for the tree to patch."""
    device = _device()
    if device in _API:
        return _API[device]
    if device in _FAILED:
        raise _FAILED[device]
    ok, why = vllm_available()
    if not ok:
        raise TargetUnavailable(why)
    _FROM[device] = why
    try:
        _API[device] = _import(device)
    except HarnessError as e:
        _FAILED[device] = e
        raise
    return _API[device]


def _import(device: str):
    site.prepare_environment(device)
    paths = site.candidate_paths() or []
    patch = patching.requested()
    tree = site.tree_of(paths)
    patched = patching.apply(patch, tree, site.CACHE) if patch is not None else None
    if patched is not None:  # a patched copy of the same tree, imported first (patching.py)
        site.activate_first(patched)
    site.activate(paths)
    from . import api
    try:
        a = api.load(device)
    except HarnessError:
        raise
    except Exception as e:  # an incomplete tree or an incompatible release: say which and how to fix
        raise TargetUnavailable(f"vLLM failed to import ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                                f"{INSTALL_HINT.format(v=site.wanted_version())}.") from None
    a.patched = patched
    a.code = {"engine": "vllm", "release": a.version, "tree": str(tree),
              "patch": str(patch) if patch else None, "patch_sha256": patching.digest(patch) if patch else None}
    return a


def check_patch(a, target: str) -> None:
    """Refuse a ``FUZZRUNNER_VLLM_PATCH`` that changes a file ``target`` does not run here (patching.check_run):
    called by each target once it has imported what it drives (vllm_engine imports more than vllm_lora)."""
    patch = patching.requested()
    if patch is not None and a.patched is not None:
        patching.check_run(patch, a.patched, _files_run(a), a.found, target)


def _files_run(a) -> set[str]:
    """Real paths of the vLLM files whose code the target runs: the imported modules, and the files of the
    functions it compiled from source (dummy.py)."""
    files = {os.path.realpath(f) for m in list(sys.modules.values()) if (f := getattr(m, "__file__", None))}
    if a.dummy_select is not None:  # (a @contextmanager: the function it wraps holds the code)
        files.add(os.path.realpath(inspect.unwrap(a.dummy_select).__code__.co_filename))
    return files


def describe_vllm() -> list[str]:
    """Lines for ``fuzzrunner doctor``: where vLLM comes from, its version, the components found."""
    ok, why = vllm_available()
    if not ok:
        return [f"vllm         unavailable: {why}"]
    try:
        a = load_api()
    except HarnessError as e:
        return [f"vllm         broken: {e}"]
    return [f"vllm         {a.version} (API {a.generation}, from {_FROM.get(_device(), why)})",
            f"vllm found   {', '.join(a.found)}"]


def make_target():
    """The ``vllm_lora`` Target, adapted to the installed vLLM; HarnessError (one line) without one."""
    from fuzzrunner.target import Target

    from . import cases, features, runner
    a = load_api()
    check_patch(a, "vllm_lora")
    entries = cases.ENTRIES if a.punica_cls else tuple(e for e in cases.ENTRIES if e != "punica")
    return Target(
        name="vllm_lora",
        description=f"vLLM {a.version}'s LoRAKernelMeta, lora_shrink/expand, fused_moe_lora and punica wrapper "
                    f"(update_metadata, embedding), driven through dummy runs, padding, captures and stale states",
        # the campaign's device comes as cases(..., device=): bfloat16 only where Triton runs compiled
        cases=functools.partial(cases.vllm_lora_cases, entries=entries, grid_control=a.has_grid_control,
                                moe=a.has_moe, embedding=a.has_embedding),
        run=functools.partial(runner.run, api=a),
        faults=tuple(runner.FAULTS),
        fault_descriptions=dict(runner.FAULTS),
        features=features.features,
        feature_space=features.FEATURE_SPACE,
        details=tuple(describe_vllm()),
        faults_unavailable=_faults_unavailable(a),
        code_under_test=a.code,
        own_code=(os.path.dirname(os.path.abspath(__file__)),),  # an exception raised here is ours, not vLLM's
    )


def _faults_unavailable(a) -> dict:
    """Planted faults whose layer this vLLM (or this machine's copy of it) cannot run: asking for
    one is an error, never a campaign that passes having tested nothing of it."""
    out = {}
    if not a.has_embedding:
        out["dummy_run_skips_embedding_indices"] = (
            "its embedding layer needs PunicaWrapperGPU and LoRAMapping, "
            + ("not importable here (see fuzzrunner doctor)" if a.punica_cls is None else "LoRAMapping not found"))
    if not a.has_moe:
        out["fused_moe_ignores_no_lora_flag"] = "this vLLM has no fused_moe_lora that the target can drive"
    return out


TARGET = make_target  # a factory: fuzzrunner.target.load_target calls it, so loading is when vLLM is imported
