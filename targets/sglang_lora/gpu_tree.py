"""One archive of set-up SGLang trees for a GPU machine with no network (``scripts/gpu_acceptance.py``).

Layout: ``sglang/VERSION/sglang/`` (SGLang's Python and JSON files, no compiled code) per release, and one
``sglang/deps/``: the pure-Python packages of the releases' ``deps/`` as installed here, and the compiled ones
(``COMPILED``) from their CPython 3.12 manylinux wheels at the same versions (the GPU image's Python). Packages
the GPU image already has (``IN_IMAGE``: pillow, psutil, charset-normalizer, numpy: 0.5.23's archive was 40 MB
with numpy, over what can be carried beside vLLM's tree) are left out, and so are the JIT CUDA
sources (0.5.2x's ``sglang/kernels/jit/include`` and ``csrc``: their folders are there, empty, because importing
``sglang.kernels.jit`` on CUDA looks for them; nothing the target drives compiles them).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from .site import site_dirs

IN_IMAGE = ("PIL", "pillow", "pillow.libs", "psutil", "charset_normalizer", "numpy", "numpy.libs")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_34_x86_64", "manylinux_2_24_x86_64")


def _dists(deps: Path) -> dict:
    """{top-level name: (dist name, version, compiled?)} of a --target install."""
    out = {}
    for info in deps.glob("*.dist-info"):
        m = re.match(r"(.+?)-(\d[^-]*)\.dist-info$", info.name)
        if not m:
            continue
        record = (info / "RECORD").read_text() if (info / "RECORD").exists() else ""
        compiled = ".so" in record
        tops = {ln.split("/")[0].split(",")[0] for ln in record.splitlines() if ln and not ln.startswith("..")}
        tops = {t.removesuffix(".py") for t in tops if not t.endswith(".dist-info") and t not in ("bin", "share")}
        for t in sorted(tops) or [m.group(1)]:
            out[t] = (m.group(1), m.group(2), compiled)
    return out


def _add_release(tar: tarfile.TarFile, version: str, seen: set, compiled: dict) -> None:
    site, deps = site_dirs(version)
    for f in sorted([*(site / "sglang").rglob("*"), *site.glob("sglang-*.dist-info/METADATA")]):
        if f.is_file() and f.suffix in (".py", ".json", "") and "__pycache__" not in f.parts:
            tar.add(f, arcname=f"sglang/{version}/{f.relative_to(site)}", recursive=False)
    if (site / "sglang/kernels/jit").is_dir():  # imported on CUDA, it looks for its C++ source folders (left out:
        for sub in ("include", "csrc"):        # no code the target drives compiles them): empty folders
            d = tarfile.TarInfo(f"sglang/{version}/sglang/kernels/jit/{sub}")
            d.type, d.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(d)
    for top, (dist, ver, is_compiled) in _dists(deps).items():
        if top in IN_IMAGE or top in seen:
            continue
        seen.add(top)
        if is_compiled:
            compiled[dist] = ver
            continue
        for f in (deps / top, deps / f"{top}.py", *deps.glob(f"{dist}-{ver}.dist-info")):
            paths = [f] if f.is_file() else [q for q in f.rglob("*") if q.is_file()]
            for q in paths:
                if "__pycache__" not in q.parts:
                    tar.add(q, arcname=f"sglang/deps/{q.relative_to(deps)}", recursive=False)


def _add_wheels(tar: tarfile.TarFile, compiled: dict, tmp: Path) -> None:
    """The compiled dependencies, from their CPython 3.12 wheels at the versions installed here."""
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    for dist, ver in sorted(compiled.items()):
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12", "--implementation", "cp", *plat, "-d", str(tmp),
                            f"{dist}=={ver}"], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"gpu_tree: no CPython 3.12 wheel of {dist}=={ver}: {r.stderr.strip()[-300:]}")
    for whl in sorted(tmp.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            z.extractall(tmp / "x")
            for name in z.namelist():
                if not name.endswith("/"):
                    tar.add(tmp / "x" / name, arcname=f"sglang/deps/{name}", recursive=False)


def archive(versions: list[str], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    compiled: dict = {}
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(out, "w:xz") as tar:
        seen: set = set()
        for v in versions:
            _add_release(tar, v, seen, compiled)
        _add_wheels(tar, compiled, Path(tmp))
    print(f"gpu tree {', '.join(versions)}: {out} ({out.stat().st_size >> 20} MB; compiled deps for 3.12: "
          f"{', '.join(sorted(compiled))})")
