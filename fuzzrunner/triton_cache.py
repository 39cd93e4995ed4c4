"""One persistent Triton cache per machine and release, shared by every worker and every later campaign.

Compiling a kernel variant costs seconds on a GPU (vLLM's shrink/expand: tens of variants a campaign), and
a worker that compiles what another worker or yesterday's campaign compiled pays it again unless they share
Triton's cache. Each worker sets ``TRITON_CACHE_DIR`` at its start-up, before its first compile
(``engine/worker.py``), to

    ROOT/triton-<Triton's version>/<the code under test's release>/<the device>

ROOT: ``FUZZRUNNER_TRITON_CACHE``, else ``$FUZZRUNNER_CACHE_DIR/triton``, else
``$XDG_CACHE_HOME/fuzzrunner/triton`` (``~/.cache``); the release: the target's ``code_under_test``
(``vllm-0.33.0``, ``sglang-0.5.23``), else fuzzrunner's own; the device: the GPU's name and compute
capability, or ``cpu``. Triton's own key already holds its version, the kernel's source and the GPU's
architecture, so the folders are hygiene (one release's kernels deleted at once, a new Triton never
reading an old one's files), not correctness. A ``TRITON_CACHE_DIR`` the user set wins, as it is;
``FUZZRUNNER_TRITON_CACHE=off`` leaves Triton's default (``~/.triton/cache``). Where Triton runs in its
interpreter (the CPU) it compiles nothing: the folder is pointed at, proven makeable, and not left made.
"""

from __future__ import annotations

import os
import re

from ._version import __version__

ROOT_ENV = "FUZZRUNNER_TRITON_CACHE"
OFF = ("0", "off", "no", "none")


def root() -> str | None:
    """Where the shared caches live; None if switched off (``FUZZRUNNER_TRITON_CACHE=off``)."""
    given = os.environ.get(ROOT_ENV, "").strip()
    if given.lower() in OFF:
        return None
    if given:
        return os.path.abspath(os.path.expanduser(given))
    base = os.environ.get("FUZZRUNNER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "fuzzrunner")
    return os.path.join(base, "triton")


def _part(text: str) -> str:
    """``text`` as one folder name: letters, digits, ``.``, ``_``, ``-`` (anything else ``_``), at most 80."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:80] or "_"


def release(code_under_test: dict) -> str:
    """The code under test's release (``vllm-0.33.0``), else fuzzrunner's own (``fuzzrunner-0.1.0``)."""
    engine, version = code_under_test.get("engine"), code_under_test.get("release")
    return f"{engine}-{version}" if engine and version else f"fuzzrunner-{__version__}"


def triton_version() -> str:
    try:
        import triton
    except ImportError:
        return "none"
    return str(getattr(triton, "__version__", "unknown"))


def device_name(device: str) -> str:
    """``cpu``, or the current GPU's name and compute capability (CUDA initialized: a worker's set-up)."""
    if device != "cuda":
        return "cpu"
    import torch
    major, minor = torch.cuda.get_device_capability()
    return f"{torch.cuda.get_device_name()}-sm{major}{minor}"


def folder(code_under_test: dict, device: str) -> str | None:
    """This machine's cache for this release and device, or None if the shared cache is off."""
    base = root()
    if base is None:
        return None
    return os.path.join(base, f"triton-{_part(triton_version())}", _part(release(code_under_test)),
                        _part(device_name(device)))


def _cannot_make(path: str, keep: bool = False) -> OSError | None:
    """Whether ``path`` can be made, proven by making it, then (unless ``keep``) removing the folders that this
    made: a run that compiles nothing (Triton's interpreter on the CPU) leaves no empty folders behind. None: it
    can."""
    made, p = [], path
    while p and not os.path.exists(p):
        made.append(p)
        p = os.path.dirname(p)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        return e
    for d in made if not keep else ():  # deepest first; one another process filled meanwhile stays
        try:
            os.rmdir(d)
        except OSError:
            break
    return None


def unusable(compiled: bool = True) -> str:
    """Why the shared cache cannot be used on this machine, in one line ('' when it can, or is off, or the user's
    ``TRITON_CACHE_DIR`` wins): workers then compile into Triton's default cache (``use``), which is said.
    ``compiled``: as for ``use`` (the root is kept where workers compile, so none of theirs races its removal)."""
    base = root()
    if base is None or os.environ.get("TRITON_CACHE_DIR"):
        return ""
    e = _cannot_make(base, keep=compiled)
    if e is not None:
        where = f"{ROOT_ENV}={os.environ[ROOT_ENV]}" if os.environ.get(ROOT_ENV, "").strip() else "the shared cache"
        return (f"{where}: the Triton cache folder {base} cannot be made ({e.strerror or e}): workers compile into "
                f"Triton's default cache instead (set {ROOT_ENV} to a writable folder, or to off)")
    if os.path.isdir(base) and not os.access(base, os.W_OK | os.X_OK):
        return (f"the Triton cache folder {base} is not writable: workers compile into Triton's default cache "
                f"instead (set {ROOT_ENV} to a writable folder, or to off)")
    return ""


def use(code_under_test: dict, device: str, *, compiled: bool = True) -> str | None:
    """Point this process's Triton at the shared cache (before its first compile); the folder it uses now (the
    user's ``TRITON_CACHE_DIR`` if set; None: Triton's default). A folder that cannot be made leaves Triton's
    default: a cache is never a reason for a worker not to start. ``compiled``: Triton compiles here (a GPU);
    in its interpreter nothing is compiled, so the folder is only proven makeable, not left made (Triton's cache
    manager makes it if anything writes there): a CPU campaign left empty folders in the cache."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return os.environ["TRITON_CACHE_DIR"]
    path = folder(code_under_test, device)
    if path is None:
        return None
    if _cannot_make(path, keep=compiled) is not None:
        return None
    os.environ["TRITON_CACHE_DIR"] = path
    return path
