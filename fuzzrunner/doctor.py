"""``fuzzrunner doctor``: what this machine offers fuzzrunner, one line per fact."""

from __future__ import annotations

import platform


def shadow_line(device: str) -> str:
    """Which shadow mode a campaign's workers on ``device`` run (``FUZZRUNNER_SHADOW`` included), and for the
    device mode whether its dispatch filter is on (built here once per machine and torch: about 30 s)."""
    from .oracles.shadow import workers_use_device_mode
    if not workers_use_device_mode(device):
        return "shadow       CPU mode (Triton's interpreter, torch dispatch)" + (
            ": on cuda it sees torch ops only, Triton kernels run unchecked (FUZZRUNNER_SHADOW=cpu)"
            if device == "cuda" else "")
    from .oracles.shadow.gpu import dispatch_filter
    return f"shadow       device mode on {device}, dispatch filter {dispatch_filter.status()}" + (
        "" if dispatch_filter.get() is not None else ": every torch op goes through Python (slower, same reports)")


def report() -> tuple[list[str], bool]:
    """(lines to print, whether everything needed here works)."""
    import hypothesis
    import numpy
    import torch
    import triton

    from . import _env
    from ._version import __version__
    from .target import BUILTIN, load_target, schema_checks_available, unavailable
    lines = [f"fuzzrunner   {__version__}", f"python       {platform.python_version()}",
             f"torch        {torch.__version__}", f"triton       {triton.__version__}",
             f"hypothesis   {hypothesis.__version__}", f"numpy        {numpy.__version__}"]
    gpu = _env.cuda_present()
    lines.append(f"device       {'cuda: ' + torch.cuda.get_device_name(0) if gpu else 'cpu (no CUDA device)'}")
    lines.append(f"triton mode  {'interpreter (TRITON_INTERPRET=1)' if _env.interpreted() else 'compiled'}")
    lines += interpreter_lines()
    lines.append("jsonschema   " + ("ok: case files are checked against each target's schema"
                                  if schema_checks_available() else
                                  "missing: case files run unchecked (pip install jsonschema)"))
    for name in BUILTIN:
        reason = unavailable(name)
        target = None if reason else load_target(name)
        lines.append(f"target       {name}: " + (f"unavailable: {reason}" if target is None else
                                                 f"ok ({target.description})"))
        lines += [f"               {d}" for d in (target.details if target is not None else ())]
    lines.append(shadow_line(_env.device_type()))
    if not gpu:
        lines.append("sanitizer    not checked: compute-sanitizer needs a GPU (the shadow oracle covers the CPU)")
        return lines, True
    more, ok = _sanitizer_lines()
    return lines + more, ok


def _sanitizer_lines() -> tuple[list[str], bool]:
    from .errors import SanitizerNotFound
    from .sanitizer.locate import find_sanitizer
    from .sanitizer.selftest import self_test
    try:
        s = find_sanitizer()
    except SanitizerNotFound as e:
        return [f"sanitizer    missing: {e}"], False
    ok, detail = self_test()
    return [f"sanitizer    {s.path} ({s.version})", f"self-test    {'ok' if ok else 'FAILED'}: {detail}"], ok


def interpreter_probe() -> dict:
    """What Triton's interpreter runs here, probed in a CPU process of its own (as the CPU pre-check,
    triage and ``--device cpu`` campaigns run it); ``{"error": ...}`` if the probe itself failed."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    try:
        out = subprocess.run([sys.executable, "-m", "fuzzrunner.interpreter_probe"], env=env, capture_output=True,
                             text=True, timeout=300)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        return {"error": f"the probe did not run: {type(e).__name__}: {e}"}


def interpreter_lines() -> list[str]:
    """The interpreter's verdicts: what it cannot run here is run only on a GPU (CPU pre-check, triage
    and CPU campaigns see a ``tool-limitation`` instead)."""
    p = interpreter_probe()
    if "error" in p:
        return [f"interpreter  unknown: {p['error']}"]
    bad = [f for f in p["features"] if not f["ok"]]
    repairs = f"; repaired here: {', '.join(p['repairs'])}" if p["repairs"] else ""
    head = (f"interpreter  Triton {p['triton']} + numpy {p['numpy']}: runs "
            + ("every probed feature" if not bad else f"{len(p['features']) - len(bad)} of {len(p['features'])} "
               f"probed features") + repairs)
    return [head] + [f"               cannot run {f['feature']}: {f['error']} (CPU runs report it as a "
                     f"tool-limitation)" for f in bad]
