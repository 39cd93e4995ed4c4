"""Find the compute-sanitizer executable, its version, and the options it accepts.

Looked for, in order: an explicit path (argument, or ``FUZZRUNNER_COMPUTE_SANITIZER``),
``PATH``, ``$CUDA_HOME/bin`` and ``/usr/local/cuda/bin``, and the
``nvidia-cuda-sanitizer-api`` wheel under each ``sys.path`` entry. Options are read
from ``--help`` once per executable, so a flag newer than the installed tool (say
``--strip-paths``) is left out instead of making every worker fail to start.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from ..errors import SanitizerNotFound

ENV_VAR = "FUZZRUNNER_COMPUTE_SANITIZER"
EXE = "compute-sanitizer"
# Layouts of the pip wheel: CUDA 13 puts every tool under nvidia/cu13/bin, CUDA 12 had one
# folder per component.
WHEEL_PATHS = (
    ("nvidia", "cu13", "bin", EXE),
    ("nvidia", "cuda_sanitizer_api", "bin", EXE),
    ("nvidia", "cuda_sanitizer_api", "compute-sanitizer", EXE),
)
SYSTEM_CUDA = ("/usr/local/cuda",)
_VERSION = re.compile(r"\bVersion\s+(\d+(?:\.\d+)+)", re.IGNORECASE)
_OPTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]+)")


@dataclass(frozen=True)
class Sanitizer:
    path: str
    version: str                 # "2025.3.1.0", or "" when --version said nothing we could read
    version_line: str = ""       # the raw line it came from
    options: frozenset = field(default=frozenset(), compare=False)  # long options --help lists

    def supports(self, option: str) -> bool:
        """Whether ``--help`` lists ``option`` (given with or without its dashes)."""
        return option.lstrip("-") in self.options


def parse_version(text: str) -> tuple[str, str]:
    """``(version, raw line)`` from ``compute-sanitizer --version`` output; ``("", "")`` if none."""
    for line in text.splitlines():
        m = _VERSION.search(line)
        if m:
            return m.group(1), line.strip()
    return "", ""


def parse_options(help_text: str) -> frozenset:
    return frozenset(_OPTION.findall(help_text))


def _run(path: str, arg: str) -> str:
    try:
        done = subprocess.run([path, arg], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (done.stdout or "") + (done.stderr or "")


@functools.lru_cache(maxsize=8)
def describe(path: str) -> Sanitizer:
    """The executable at ``path`` with its version and options (each asked once per process)."""
    version, line = parse_version(_run(path, "--version"))
    return Sanitizer(path, version, line, parse_options(_run(path, "--help")))


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _wheel_dirs() -> list[str]:
    dirs = [p for p in sys.path if p and os.path.isdir(p)]
    try:
        import site
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except (AttributeError, ImportError):  # some virtualenvs' site lacks these
        pass
    return list(dict.fromkeys(dirs))


def candidates() -> list[str]:
    """Every place looked at, in order (absent ones included: they go into the error message)."""
    out = []
    which = shutil.which(EXE)
    if which:
        out.append(which)
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *SYSTEM_CUDA):
        if root:
            out.append(os.path.join(root, "bin", EXE))
    for d in _wheel_dirs():
        out += [os.path.join(d, *parts) for parts in WHEEL_PATHS]
    return list(dict.fromkeys(out))


def _explicit(path: str, source: str) -> Sanitizer:
    if os.path.isdir(path):
        path = os.path.join(path, EXE)
    if not _executable(path):
        raise SanitizerNotFound(f"{source}={path!r} is not an executable file. Point it at compute-sanitizer "
                                f"(e.g. /usr/local/cuda/bin/{EXE}), or unset it to search PATH, CUDA_HOME "
                                f"and the nvidia-cuda-sanitizer-api wheel.")
    return describe(os.path.abspath(path))


def find_sanitizer(explicit: str | None = None) -> Sanitizer:
    """The compute-sanitizer to use; raises ``SanitizerNotFound`` with where it looked and the fix."""
    if explicit:
        return _explicit(explicit, "the explicit path")
    if os.environ.get(ENV_VAR):
        return _explicit(os.environ[ENV_VAR], ENV_VAR)
    looked = candidates()
    for path in looked:
        if _executable(path):
            return describe(os.path.abspath(path))
    places = "PATH, $CUDA_HOME/bin, /usr/local/cuda/bin and the nvidia-cuda-sanitizer-api wheel"
    raise SanitizerNotFound(f"compute-sanitizer not found (looked in {places}: {len(looked)} paths). "
                            f"Install the CUDA toolkit or `pip install nvidia-cuda-sanitizer-api`, "
                            f"or set {ENV_VAR}=/path/to/{EXE}.")


def gpu_available() -> bool:
    """Whether a CUDA device is visible, without creating a CUDA context in this process."""
    from .. import _env
    return _env.cuda_present()
