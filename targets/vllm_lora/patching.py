"""``FUZZRUNNER_VLLM_PATCH=FILE``: fuzz a patched copy of the vLLM under test, to check a fix before sending it.

FILE is a unified diff against the release, made from the directory that holds ``vllm/`` (``-p1``
paths: ``a/vllm/...``, ``b/vllm/...``, as ``git diff`` in vLLM's repository writes them). The target
copies the ``vllm/`` package it would otherwise import (the set-up tree, ``FUZZRUNNER_VLLM_SITE`` or an
installed vLLM) into ``.cache/vllm/patched/NAME-HASH/`` (hard links, so ~1 s; the patched files are
real copies), applies FILE there, and imports vLLM from the copy; the original is never touched. The
copy is made once per (patch, tree) and reused by every worker and later run.

The patch is applied here, in Python (no ``patch`` or ``git`` needed: GPU machines may have neither):
every hunk's context must match the file exactly (at its stated line or, as ``patch`` allows, shifted);
a hunk that does not match is refused with one line, naming the file and the hunk.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from fuzzrunner.errors import TargetUnavailable

ENV = "FUZZRUNNER_VLLM_PATCH"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def requested() -> Path | None:
    """The patch file asked for, or None; a path that is not a readable file is refused with one line."""
    value = os.environ.get(ENV)
    if not value:
        return None
    p = Path(value).expanduser()
    if not p.is_file():
        raise TargetUnavailable(f"{ENV}={value!r} is not a file; give the path of a unified diff against the "
                                f"vLLM release under test (paths a/vllm/..., b/vllm/...), or unset it.")
    return p.resolve()


def parse(text: str, name: str) -> list[tuple[str, list[tuple[int, list[str], list[str]]]]]:
    """[(path inside the tree, [(old start line, old lines, new lines), ...]), ...] of a unified diff."""
    files: list = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("+++ "):
            path = line[4:].split("\t")[0].strip()
            if path == "/dev/null":
                raise TargetUnavailable(f"{ENV}: {name} deletes a file; only changes and new files are supported.")
            files.append((path.split("/", 1)[1] if "/" in path else path, []))
        elif line.startswith("@@"):
            m = _HUNK.match(line)
            if not m or not files:
                raise TargetUnavailable(f"{ENV}: {name} line {i + 1}: {line[:60]!r} is not a hunk header of a "
                                        f"unified diff (diff -u / git diff output is expected).")
            old, new = [], []
            n_old = int(m.group(2) if m.group(2) is not None else 1)
            n_new = int(m.group(4) if m.group(4) is not None else 1)
            i += 1
            while i < len(lines) and (len(old) < n_old or len(new) < n_new):
                body = lines[i]
                tag, rest = (body[:1], body[1:]) if body else (" ", "")
                if tag in (" ", "-"):
                    old.append(rest)
                if tag in (" ", "+"):
                    new.append(rest)
                if tag not in (" ", "-", "+", "\\"):
                    raise TargetUnavailable(f"{ENV}: {name} line {i + 1}: a hunk ends early ({body[:60]!r}).")
                i += 1
            files[-1][1].append((int(m.group(1)), old, new))
            continue
        i += 1
    if not files:
        raise TargetUnavailable(f"{ENV}: {name} holds no file changes (+++ lines); is it a unified diff?")
    return files


def _apply_hunks(text: str, hunks, where: str, name: str) -> str:
    trailing = text.endswith("\n") or not text  # a new file ends its last line too
    lines = text.splitlines()
    shift = 0
    for h, (start, old, new) in enumerate(hunks, 1):
        at = max(start - 1 + shift, 0) if old else start + shift
        pos = next((p for d in range(0, len(lines) + 1) for p in (at - d, at + d)
                    if 0 <= p <= len(lines) - len(old) and lines[p:p + len(old)] == old), None)
        if pos is None:
            raise TargetUnavailable(f"{ENV}: hunk {h} of {name} does not apply to {where} (its context is not "
                                    f"there: a patch for another release?); make the patch against this release.")
        lines[pos:pos + len(old)] = new
        shift += len(new) - len(old)
    return "\n".join(lines) + ("\n" if trailing or not lines else "")


def _link_tree(src: Path, dst: Path) -> None:
    try:
        shutil.copytree(src, dst, copy_function=os.link, ignore=shutil.ignore_patterns("__pycache__"))
    except OSError:  # another file system: plain copies
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))


def apply(patch: Path, tree: Path, cache: Path) -> Path:
    """A copy of ``tree/vllm`` with ``patch`` applied, under ``cache/patched/``; the directory holding it."""
    text = patch.read_text(encoding="utf-8")
    key = hashlib.sha256(text.encode() + os.fsencode(tree.resolve())).hexdigest()[:12]  # bytes: maybe not UTF-8
    dest = cache / "patched" / f"{patch.stem}-{key}"
    if (dest / "ok").exists():
        return dest
    files = parse(text, patch.name)
    tmp = dest.with_name(f"{dest.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _link_tree(tree / "vllm", tmp / "vllm")
        for rel, hunks in files:
            if not rel.startswith("vllm/"):
                raise TargetUnavailable(f"{ENV}: {patch.name} changes {rel!r}, outside vllm/ (paths must be "
                                        f"a/vllm/..., b/vllm/...: make the diff from the directory holding vllm/).")
            target = tmp / rel
            old = target.read_text(encoding="utf-8") if target.exists() else ""
            new = _apply_hunks(old, hunks, str(tree / rel), patch.name)
            if target.exists():
                target.unlink()  # a hard link to the original: never write through it
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(new, encoding="utf-8")
        (tmp / "ok").write_bytes(os.fsencode(patch) + b"\n" + os.fsencode(tree) + b"\n")
        try:
            tmp.rename(dest)
        except OSError:  # a concurrent worker made it first
            if not (dest / "ok").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def digest(patch: Path) -> str:
    """The patch's sha256 (what a report names: the same file name can hold another fix)."""
    return hashlib.sha256(patch.read_bytes()).hexdigest()


def changed_files(patch: Path) -> list[str]:
    """The files (``vllm/...``) the patch changes or adds."""
    return [rel for rel, _ in parse(patch.read_text(encoding="utf-8"), patch.name)]


def check_run(patch: Path, patched: Path, ran: set[str], notes: list[str]) -> None:
    """Refuse a patch that changes a file whose code the target does not run here: a campaign would then test
    the release as shipped (or a re-statement of it) while the user believes it tests the fix (issue 47: on a
    GPU machine the dummy-mapping function could not be compiled and its unpatched re-statement ran).
    ``ran``: real paths of the files the target imported or compiled code from; ``notes``: what the target
    says of its parts (the reason a part is re-stated or left out)."""
    missing = [rel for rel in changed_files(patch) if os.path.realpath(patched / rel) not in ran]
    if not missing:
        return
    why = [n for n in notes if "re-stated" in n]
    raise TargetUnavailable(
        f"{ENV}={patch.name} changes {', '.join(missing)}, which the vllm_lora target does not run on this "
        f"machine{' (' + '; '.join(why)[:300] + ')' if why else ''}: a campaign would test vLLM without the "
        f"patch. Run where that code imports (`fuzzrunner doctor` lists what is re-stated), or leave that file out "
        f"of the patch.")
