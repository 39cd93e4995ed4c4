"""``fuzzrunner doctor``: what this machine offers fuzzrunner, one line per fact."""

from __future__ import annotations

import platform

from .text import describe


def shadow_line(context) -> str:
    """Which shadow mode a campaign's workers under ``context`` run, and for the device mode whether its
    dispatch filter is on (built here once per machine and torch: about 30 s)."""
    from .env_defaults import SHADOW_ENV
    if context.shadow != "device":
        return "shadow       CPU mode (Triton's interpreter, torch dispatch)" + (
            f": on cuda it sees torch ops only, Triton kernels run unchecked ({SHADOW_ENV}=cpu)"
            if context.device == "cuda" else "")
    from .oracles.shadow.gpu import dispatch_filter
    return f"shadow       device mode on {context.device}, dispatch filter {dispatch_filter.status()}" + (
        "" if dispatch_filter.get() is not None else ": every torch op goes through Python (slower, same reports)")


def report(engines: bool = False) -> tuple[list[str], bool]:
    """(lines to print, whether everything needed here works). ``engines``: import the engine targets (vLLM,
    SGLang: the four at once, about a minute on 2 cores) to list what they found; otherwise each is said set up or
    not, from where, without importing it (``catalog.py``), and with it each loads in a process of its own
    (``target_probe``). The interpreter probe (a process of its own) runs meanwhile."""
    probe = _start_probe()
    probes = _start_target_probes(engines)  # each target in a process of its own, meanwhile too
    import hypothesis
    import numpy
    import torch
    import triton

    from . import _env, env_defaults
    from ._version import __version__
    from .context import Context
    from .target import BUILTIN, schema_checks_available
    lines = [f"fuzzrunner   {__version__}", f"python       {platform.python_version()}",
             f"torch        {torch.__version__}", f"triton       {triton.__version__}",
             f"hypothesis   {hypothesis.__version__}", f"numpy        {numpy.__version__}"]
    gpu = _env.cuda_present()
    lines.append(f"device       {'cuda: ' + torch.cuda.get_device_name(0) if gpu else 'cpu (no CUDA device)'}")
    lines.append(f"triton mode  {'interpreter (TRITON_INTERPRET=1)' if _env.interpreted() else 'compiled'}")
    targets = [line for name in BUILTIN for line in _target_lines(name, engines, probes.get(name))]
    lines += interpreter_lines(probe.result())
    lines.append("jsonschema   " + ("ok: case files are checked against each target's schema"
                                  if schema_checks_available() else
                                  "missing: case files run unchecked (pip install jsonschema)"))
    lines += targets
    # the workers' context on this machine's device, in the shadow mode the environment forces, if any
    lines.append(shadow_line(Context.of(_env.device_type(), shadow=env_defaults.shadow())))
    if not gpu:
        lines.append("sanitizer    not checked: compute-sanitizer needs a GPU (the shadow oracle covers the CPU)")
        return lines, True
    more, ok = _sanitizer_lines()
    return lines + more, ok


def _start_target_probes(engines: bool) -> dict:
    """With ``engines``, every target that tests code not fuzzrunner's own (vLLM, SGLang, a plug-in's), loading
    in a process of its own (``target_probe``): in one process, what one left in ``sys.modules`` broke the next."""
    from .catalog import OURS
    from .target import BUILTIN
    from .target_probe import Probe
    return {name: Probe(spec) for name, spec in BUILTIN.items() if engines and name not in OURS}


def _target_lines(name: str, engines: bool, probe=None) -> list[str]:
    """A built-in target's lines: loaded (its description and details; ``probe``: loaded in a process of its
    own), or, for an engine target without ``engines``, whether its engine is set up and where, without
    importing it."""
    from .catalog import AVAILABILITY, about
    from .target import load_target, unavailable
    if name in AVAILABILITY and not engines:
        known = about(name)
        return [f"target       {name}: " + (f"unavailable: {known.unavailable}" if known.unavailable else
                                            f"set up ({known.engine}), not imported: `fuzzrunner doctor "
                                            f"--engines` imports it and lists what it drives")]
    if probe is not None:
        said = probe.result()
        if "unavailable" in said:
            return [f"target       {name}: unavailable: {said['unavailable']}"]
        return [f"target       {name}: ok ({said['description']})", *(f"               {d}" for d in said["details"]),
                *_features_line(said.get("features", 0))]
    reason = unavailable(name)
    target = None if reason else load_target(name)
    if target is None:
        return [f"target       {name}: unavailable: {reason}"]
    return [f"target       {name}: ok ({target.description})", *(f"               {d}" for d in target.details),
            *_features_line(len(target.feature_space))]


def _features_line(declared: int) -> list[str]:
    """How many features the target declares here (its feature space depends on what the release drives): the
    count a campaign's "all N declared features reached" is out of."""
    return [f"               features: {declared} declared here"] if declared else []


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


class _Probe:
    """The interpreter probe, running in a CPU process of its own (as the CPU pre-check, triage and
    ``--device cpu`` campaigns run Triton's interpreter) while the caller does other work."""

    def __init__(self):
        import os
        import subprocess
        import sys
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="",
                   PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
        self.error, self.proc = "", None
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "fuzzrunner.interpreter_probe"], env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError as e:
            self.error = f"the probe did not run: {describe(e)}"

    def result(self) -> dict:
        """What the interpreter runs here; ``{"error": ...}`` if the probe itself failed."""
        import json
        import subprocess
        if self.proc is None:
            return {"error": self.error}
        try:
            out, _ = self.proc.communicate(timeout=300)
            return json.loads(out.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return {"error": "the probe did not run: it took more than 300 s"}
        except (ValueError, IndexError):
            return {"error": f"the probe did not run: it ended with exit status {self.proc.returncode}"}


def _start_probe() -> _Probe:
    return _Probe()


def interpreter_probe() -> dict:
    """What Triton's interpreter runs here, probed in a CPU process of its own (as the CPU pre-check,
    triage and ``--device cpu`` campaigns run it); ``{"error": ...}`` if the probe itself failed."""
    return _start_probe().result()


def interpreter_lines(p: dict | None = None) -> list[str]:
    """The interpreter's verdicts (``p``: the probe's result; None: probe now): what it cannot run here
    is run only on a GPU (CPU pre-check, triage and CPU campaigns see a ``tool-limitation`` instead)."""
    p = interpreter_probe() if p is None else p
    if "error" in p:
        return [f"interpreter  unknown: {p['error']}"]
    bad = [f for f in p["features"] if not f["ok"]]
    repairs = f"; repaired here: {', '.join(p['repairs'])}" if p["repairs"] else ""
    head = (f"interpreter  Triton {p['triton']} + numpy {p['numpy']}: runs "
            + ("every probed feature" if not bad else f"{len(p['features']) - len(bad)} of {len(p['features'])} "
               f"probed features") + repairs)
    return [head] + [f"               cannot run {f['feature']}: {f['error']} (CPU runs report it as a "
                     f"tool-limitation)" for f in bad]
