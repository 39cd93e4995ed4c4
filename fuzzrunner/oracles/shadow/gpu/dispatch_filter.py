"""Ops past the device shadow's dispatch mode when it would only run them: a filter in C++ (dispatch_filter.cpp).

Every torch op under a Python dispatch mode costs a call into Python, about 10 us on an H200's host; a
case of the reference runner makes about 660, most of them on memory nothing tracks, and a mode that only
runs each op was measured at 1.9-2.0x the plain case (scripts/gpu/shadow_breakdown.py). The filter is a boxed
fallback at a dispatch key ahead of torch's Python keys (``TESTING_ONLY_GenericMode``, which torch's own
libraries leave free), included on the case's thread while the oracle runs. It sends an op on to the mode
unless the mode is the only one on the stack and the op is a view or metadata op, or a plain aten op none of
whose tensor arguments touches a tracked region (the mode names each op's kind at its first dispatch:
``torch_mode.use_filter``); those run natively, past the Python keys, and a result of theirs in fresh memory where a
region lies is handed to the oracle (``take_fresh``), as the mode's own ``_allocations`` would have.

Built once per machine, source and torch the first time an oracle starts (the C++ compiler, torch's
headers and libraries; about 30 s; kept in ``cache_dir()``); where it cannot be built (no compiler, a
torch without these headers) or with ``FUZZRUNNER_DISPATCH_FILTER=0``, the mode sees every op as before
(slower, same reports): ``status()`` says which and why.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading

_LOCK = threading.Lock()
_STATE: dict = {}  # "module": the built module or None, "why": the reason it is None
_OWNER: list = [None]  # the oracle using the filter now (one at a time: it holds that oracle's mode and index)


def get():
    """The filter's module, built or loaded at the first call; None where it cannot be (``status()``)."""
    if "module" in _STATE:
        return _STATE["module"]
    with _LOCK:
        if "module" not in _STATE:
            _STATE["module"], _STATE["why"] = _load()
    return _STATE["module"]


def claim(oracle) -> bool:
    """Make ``oracle`` the filter's one user, unless another oracle of the process is (then its mode sees every
    op, as without the filter)."""
    with _LOCK:
        if _OWNER[0] is not None and _OWNER[0] is not oracle:
            return False
        _OWNER[0] = oracle
        return True


def release(oracle) -> None:
    with _LOCK:
        if _OWNER[0] is oracle:
            _OWNER[0] = None


def status() -> str:
    """One line: whether ops on untracked memory skip the mode, and if not, why."""
    module = get()
    return "on" if module is not None else f"off ({_STATE['why']})"


def _load():
    if os.environ.get("FUZZRUNNER_DISPATCH_FILTER", "1").strip() == "0":
        return None, "FUZZRUNNER_DISPATCH_FILTER=0"
    try:
        module = _build()
    except Exception as e:  # noqa: BLE001  (no compiler, no headers, a registration refused: the mode sees every op)
        return None, " ".join(f"{type(e).__name__}: {e}".split())[:300]
    return module, ""


def cache_dir() -> str:
    """Where the built filter is kept: ``FUZZRUNNER_CACHE_DIR``, else ``$XDG_CACHE_HOME/fuzzrunner`` (~/.cache)."""
    root = os.environ.get("FUZZRUNNER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "fuzzrunner")
    return os.path.join(root, "dispatch_filter")


def _build():
    """Compile and link the filter with the C++ compiler torch's extensions use (``CXX``, else ``c++``),
    once per source and torch (the name carries both), under a file lock (several workers may start at once),
    and import it. No ninja needed (GPU images often lack it)."""
    import fcntl
    import importlib.util
    import shlex
    import subprocess
    import sysconfig

    import torch
    cxx = os.environ.get("CXX", "c++")
    try:
        compiler = shlex.split(cxx)
    except ValueError as e:
        raise RuntimeError(f"CXX={cxx!r} cannot be read as a command: {e}") from None
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dispatch_filter.cpp")
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read() + torch.__version__.encode() + os.fsencode(sysconfig.get_path("include"))
                                + os.fsencode(cxx))  # paths: their bytes may not be UTF-8
    name = f"fuzzrunner_dispatch_filter_{digest.hexdigest()[:12]}"
    folder = cache_dir()
    os.makedirs(folder, exist_ok=True)
    built = os.path.join(folder, name + ".so")
    failed = os.path.join(folder, name + ".failed")  # a build that failed, not tried again by every process
    with open(os.path.join(folder, name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(built) and os.path.exists(failed):
            with open(failed) as f:
                raise RuntimeError(f"{f.read().strip()} (remembered: delete {failed} to try again)")
        if not os.path.exists(built):
            print(f"fuzzrunner: building the GPU shadow's dispatch filter in {folder} (once per machine and torch, "
                  f"about 30 s)", file=sys.stderr, flush=True)
            inc = os.path.join(os.path.dirname(torch.__file__), "include")
            lib = os.path.join(os.path.dirname(torch.__file__), "lib")
            tmp = f"{built}.{os.getpid()}.tmp"
            cmd = [*compiler, f"-DTORCH_EXTENSION_NAME={name}",
                   "-DTORCH_API_INCLUDE_EXTENSION_H", "-isystem", inc, "-isystem",
                   os.path.join(inc, "torch", "csrc", "api", "include"), "-isystem", sysconfig.get_path("include"),
                   "-fPIC", "-std=c++20", "-O2", "-shared", source, f"-L{lib}", "-lc10", "-ltorch_cpu", "-ltorch",
                   "-ltorch_python", "-o", tmp]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True)
                why = f"exit {done.returncode}: {done.stderr.strip()[-240:]}" if done.returncode else ""
            except OSError as e:  # no such compiler
                why = str(e)
            if why:
                why = f"the C++ build failed (CXX={cxx}, {why})"
                with open(failed, "w") as f:
                    f.write(why)
                raise RuntimeError(why)
            os.replace(tmp, built)
    spec = importlib.util.spec_from_file_location(name, built)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the built dispatch filter {built}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
