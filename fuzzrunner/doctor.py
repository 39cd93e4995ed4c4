"""``fuzzrunner doctor``: what this machine offers fuzzrunner, one line per fact."""

from __future__ import annotations

import platform


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
    lines.append("jsonschema   " + ("ok: case files are checked against each target's schema"
                                  if schema_checks_available() else
                                  "missing: case files run unchecked (pip install jsonschema)"))
    for name in BUILTIN:
        reason = unavailable(name)
        target = None if reason else load_target(name)
        lines.append(f"target       {name}: " + (f"unavailable: {reason}" if target is None else
                                                 f"ok ({target.description})"))
        lines += [f"               {d}" for d in (target.details if target is not None else ())]
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
