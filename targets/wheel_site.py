"""A release's Python files from its wheel, for the engine targets (vllm_lora, sglang_lora).

``pip`` runs pip quietly and turns a failure into one line; ``wheel`` downloads a release's wheel once
into a cache folder; ``extract`` unpacks it without compiled code (``*.so``, CUDA and C++ sources);
``missing_module`` imports the modules a target drives in a fresh interpreter and names the first
top-level module that is missing (None when they all import).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

SKIP = {".so", ".h", ".hpp", ".cuh", ".inl", ".cu", ".cpp", ".cc"}


def pip(prog: str, *args: str) -> None:
    """``python -m pip -q ARGS``; a failure ends the setup with its last lines (``prog``: whose setup)."""
    cmd = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        err = [ln for ln in (r.stderr or r.stdout).splitlines() if not ln.startswith("WARNING")]
        raise SystemExit(f"{prog}: pip {' '.join(args[:3])} ... failed: {' '.join(err[-3:])[:400]}")


def wheel(prog: str, package: str, version: str, wheels: Path, *download_args: str) -> Path:
    """``package==version``'s wheel in ``wheels/``, downloaded (no dependencies) if it is not there yet."""
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"{package}-{version}-*.whl"))
    if not found:
        pip(prog, "download", f"{package}=={version}", "--no-deps", *download_args, "-d", str(wheels))
        found = sorted(wheels.glob(f"{package}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"{prog}: no wheel of {package}=={version} was downloaded.")
    return found[0]


def _skipped(name: str, keep: tuple) -> bool:
    return (Path(name).suffix in SKIP or ".so." in name) and not (keep and name.startswith(keep))


def extract(whl: Path, site: Path, keep: tuple = ()) -> None:
    """The wheel's files but compiled code, into ``site`` (replaced whole, through a temporary folder);
    files under a ``keep`` prefix are extracted whatever they are (sources a module looks for at import)."""
    tmp = site.with_name("site.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if not _skipped(name, keep):
                z.extract(name, tmp)
    shutil.rmtree(site, ignore_errors=True)
    tmp.rename(site)


def extract_kept(whl: Path, site: Path, keep: tuple) -> None:
    """The files under ``keep`` that a tree extracted without them lacks (an earlier ``extract``)."""
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if name.startswith(keep) and not (site / name).exists():
                z.extract(name, site)


_PROBE = """import sys, json
{setup}
def _missing(e):
    seen = set()
    while e is not None and id(e) not in seen:  # the error, then what it was raised from or while handling
        seen.add(id(e))
        if isinstance(e, ModuleNotFoundError) and e.name:
            return e.name
        e = e.__cause__ or e.__context__
    return None
try:
    import {imports}
except Exception as e:
    name = _missing(e)
    if name is None:
        raise
    print(json.dumps(name))
"""


def missing_module(prog: str, setup: str, imports, env: dict) -> str | None:
    """Run ``setup`` (Python that puts the release on ``sys.path``), then import ``imports``: the first
    missing top-level module's name, or None when they all import. A module missing under another error counts:
    ``pydantic_extra_types`` raises ``RuntimeError`` from the ``ModuleNotFoundError`` of ``pycountry`` (vLLM 0.14's
    engine imports reach it through ``mistral_common``), and the set-up used to end without installing it. An
    import that fails naming no missing module ends the set-up with one line: the error."""
    probe = _PROBE.format(setup=setup, imports=", ".join(imports))
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith('"')]
    if lines:
        return json.loads(lines[-1]).split(".")[0]
    if r.returncode:
        last = (r.stderr.strip().splitlines() or ["(no error output)"])[-1]
        raise SystemExit(f"{prog}: importing {', '.join(imports)} failed, naming no missing module to install: "
                         f"{last[:300]}")
    return None
