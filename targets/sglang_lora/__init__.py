"""Target ``sglang_lora``: SGLang's own LoRA backends and Triton kernels, driven the way its model runner drives them.

Needs an SGLang release set up (``scripts/sglang_setup.sh VERSION``: its wheel without compiled
kernels, plus the few pure-Python packages its LoRA modules import). Without one the target is
unavailable: ``sglang_available()`` says why in one line, loading raises ``TargetUnavailable``.
See docs/sglang.md.
"""

from __future__ import annotations

import functools
import os

from fuzzrunner.errors import HarnessError, TargetUnavailable

from . import site

# what of SGLang this target drives, as `fuzzrunner targets` says it (catalog.py reads it without importing this)
DRIVES = ("the LoRA backends (triton, csgmv) and their batch-info preparation", "SGLang's LoRA Triton kernels",
          "CUDA-graph capture and padded replays, DP-attention idle batches, pool eviction, the overlap thread")
INSTALL_HINT = "run scripts/sglang_setup.sh {v} (or set FUZZRUNNER_SGLANG_SITE to a tree holding sglang/)"
_API: dict = {}


def _device() -> str:
    from fuzzrunner import _env
    return _env.device_type()


def sglang_available() -> tuple[bool, str]:
    """Cheap (no import of SGLang): whether a tree is there to load, else the one-line reason and fix."""
    paths = site.candidate_paths()
    if paths is None:
        v = site.wanted_version()
        return False, (f"SGLang is not set up (no FUZZRUNNER_SGLANG_SITE, no tree .cache/sglang/{v}/); "
                       f"{INSTALL_HINT.format(v=v)}.")
    return True, str(paths[0].parent if not os.environ.get("FUZZRUNNER_SGLANG_SITE") else paths[0])


def load_api():
    device = _device()
    if device in _API:
        return _API[device]
    ok, why = sglang_available()
    if not ok:
        raise TargetUnavailable(why)
    site.prepare_environment(device)
    paths = site.candidate_paths() or []
    site.activate(paths)
    from . import api
    try:
        _API[device] = api.load(device, paths[0])
    except HarnessError:
        raise
    except Exception as e:
        raise TargetUnavailable(f"SGLang failed to import ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                                f"{INSTALL_HINT.format(v=site.wanted_version())}.") from None
    finally:
        site.drop_import_stubs()
    return _API[device]


def describe_sglang() -> list[str]:
    ok, why = sglang_available()
    if not ok:
        return [f"sglang       unavailable: {why}"]
    try:
        a = load_api()
    except HarnessError as e:
        return [f"sglang       broken: {e}"]
    return [f"sglang       {a.version} (API {a.generation}, from {why})", f"sglang found {', '.join(a.found)}"]


def make_target():
    """The ``sglang_lora`` Target, adapted to the SGLang set up; HarnessError (one line) without one."""
    from fuzzrunner.target import Target

    from . import cases, features, runner
    a = load_api()
    return Target(
        name="sglang_lora",
        description=f"SGLang {a.version}'s LoRA backends (triton sgemm, csgmv) with their batch-info preparation, "
                    f"CUDA-graph batch info, capture/replay, idle and padded batches, adapter churn, overlap thread",
        cases=functools.partial(cases.sglang_lora_cases, idle=a.handles_idle),
        run=functools.partial(runner.run, api=a),
        faults=tuple(runner.FAULTS),
        fault_descriptions=dict(runner.FAULTS),
        # the known bugs' minimal cases, replayed first; FUZZRUNNER_SGLANG_SEEDS=0 leaves them out (from scratch)
        seeds=None if os.environ.get("FUZZRUNNER_SGLANG_SEEDS") == "0" else
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds"),
        features=features.features,
        feature_space=features.FEATURE_SPACE,
        details=tuple(describe_sglang()),
        own_code=(os.path.dirname(os.path.abspath(__file__)),),
        code_under_test={"engine": "sglang", "release": a.version, "tree": sglang_available()[1]},
    )


TARGET = make_target
