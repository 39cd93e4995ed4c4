"""``FUZZRUNNER_VLLM_PATCH=FILE``: fuzz a patched copy of the vLLM under test, to check a fix before sending it.

FILE is a unified diff against the release, made from the directory that holds ``vllm/`` (``-p1``
paths: ``a/vllm/...``, ``b/vllm/...``, as ``git diff`` in vLLM's repository writes them). The target
copies the ``vllm/`` package it would otherwise import (the set-up tree, ``FUZZRUNNER_VLLM_SITE`` or an
installed vLLM) with its dist-info into ``.cache/vllm/patched/NAME-RELEASE-HASH/`` (hard links, so ~1 s;
the patched files are real copies), applies FILE there, and imports vLLM from the copy; the original is
never touched. The copy is keyed by (release, patch content, pristine tree), made once and reused by every
worker and later run; it is built in a folder of its own and published by one rename with its stamp inside,
so a crash mid-build leaves no half-patched copy. A tree that is itself a patched copy (given as
``FUZZRUNNER_VLLM_SITE``) stands for the pristine tree it was made from: a patch never applies twice.

The patch is applied here, in Python (no ``patch`` or ``git`` needed: GPU machines may have neither):
every hunk's context must match the file exactly (at its stated line or, as ``patch`` allows, shifted);
a hunk that does not match is refused with one line naming the file, the hunk and the release, or saying
that the tree holds the change already.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from fuzzrunner.errors import TargetUnavailable

from .site import release_of

ENV = "FUZZRUNNER_VLLM_PATCH"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
STAMP = "fuzzrunner-patched.json"  # in a finished copy: release, patch, its sha256, the pristine tree


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


def _found(lines: list[str], block: list[str], at: int) -> int | None:
    """Where ``block`` is in ``lines``, nearest ``at`` first (as ``patch`` shifts a hunk); None if nowhere."""
    return next((p for d in range(0, len(lines) + 1) for p in (at - d, at + d)
                 if 0 <= p <= len(lines) - len(block) and lines[p:p + len(block)] == block), None)


def _apply_hunks(text: str, hunks, rel: str, where: Where) -> str:
    trailing = text.endswith("\n") or not text  # a new file ends its last line too
    lines = text.splitlines()
    shift = 0
    for h, (start, old, new) in enumerate(hunks, 1):
        at = max(start - 1 + shift, 0) if old else start + shift
        pos = _found(lines, old, at)
        if pos is None:
            raise TargetUnavailable(where.refusal(h, start, rel, done=bool(new) and new != old
                                                  and _found(lines, new, at) is not None))
        lines[pos:pos + len(old)] = new
        shift += len(new) - len(old)
    return "\n".join(lines) + ("\n" if trailing or not lines else "")


@dataclass(frozen=True)
class Where:
    """What a refusal names: the patch, the tree it was applied to, that tree's release."""
    patch: str
    tree: Path
    release: str

    def refusal(self, hunk: int, line: int, rel: str, done: bool) -> str:
        if done:  # the tree holds the hunk's result already: never say "another release" of the same one
            return (f"{ENV}={self.patch}: {self.tree / rel} already holds hunk {hunk}'s change, so the tree "
                    f"{self.tree} is patched already (by hand?); point FUZZRUNNER_VLLM_SITE at vLLM {self.release}'s "
                    f"unpatched tree, or unset {ENV} to run this tree as it is.")
        return (f"{ENV}={self.patch}: hunk {hunk} (line {line} of {rel}) does not apply to vLLM {self.release}'s "
                f"{self.tree / rel}: its context is not in the file (a patch for another release, or a tree changed "
                f"by hand?); make the patch against vLLM {self.release}'s own source.")


def pristine(tree: Path) -> Path:
    """The unpatched tree a patched copy was made from (its stamp names it); ``tree`` itself if it is no copy.
    A patch always applies to the release as shipped: applied to a copy that holds it (or another patch) already,
    every hunk would be refused, or two fixes stacked that nobody asked for."""
    stamp = tree / STAMP
    if stamp.is_file():
        try:
            origin = Path(json.loads(stamp.read_text(encoding="utf-8"))["pristine"])
        except (ValueError, KeyError, TypeError):
            raise TargetUnavailable(f"{ENV}: {stamp} is not a patched copy's stamp (JSON naming its pristine tree); "
                                    f"point FUZZRUNNER_VLLM_SITE at the release's unpatched tree.") from None
    elif (tree / "ok").is_file() and tree.parent.name == "patched":  # a copy made before the stamp was JSON
        lines = (tree / "ok").read_bytes().splitlines()
        if len(lines) < 2:
            return tree
        origin = Path(os.fsdecode(lines[1]))
    else:
        return tree
    if not (origin / "vllm").is_dir():
        raise TargetUnavailable(f"{ENV}: {tree} is a patched copy of {origin}, which holds no vllm/ any more; point "
                                f"FUZZRUNNER_VLLM_SITE at the release's unpatched tree (the patch is applied to it).")
    return origin


def _link_tree(src: Path, dst: Path) -> None:
    try:
        shutil.copytree(src, dst, copy_function=os.link, ignore=shutil.ignore_patterns("__pycache__"))
    except OSError:  # another file system: plain copies
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))


def _sweep(patched: Path) -> None:
    """Remove the build folders of processes that died mid-build (a crash, a kill): never reused, only in the way."""
    for tmp in patched.glob(".*.build-*"):
        try:
            pid = int(tmp.name.rsplit("-", 2)[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except (ValueError, IndexError, PermissionError):
            pass  # not ours to judge: another user's process, or a name we did not write


def apply(patch: Path, tree: Path, cache: Path) -> Path:
    """A copy of ``tree``'s vLLM (its pristine origin's, if ``tree`` is a patched copy) with ``patch`` applied,
    under ``cache/patched/``: the directory holding it. Keyed by (release, patch content, pristine tree); built
    in a folder of its own and published by one rename, its stamp inside: a crash mid-build leaves nothing that a
    later run takes for a copy."""
    data = patch.read_bytes()
    src = pristine(tree)
    release = release_of(src)
    sha = hashlib.sha256(data).hexdigest()
    key = hashlib.sha256(release.encode() + b"\0" + sha.encode() + b"\0" + os.fsencode(src.resolve())).hexdigest()
    dest = cache / "patched" / f"{patch.stem}-{release}-{key[:12]}"
    if (dest / STAMP).is_file():
        return dest
    files = parse(data.decode("utf-8"), patch.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _sweep(dest.parent)
    tmp = dest.parent / f".{dest.name}.build-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        _build(tmp, files, src, Where(patch.name, src, release))
        (tmp / STAMP).write_text(json.dumps({
            "release": release, "patch": os.fsdecode(patch), "patch_sha256": sha,
            "pristine": str(src.resolve())}) + "\n", encoding="utf-8")  # ASCII: paths' odd bytes escaped
        _publish(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _build(tmp: Path, files, src: Path, where: Where) -> None:
    _link_tree(src / "vllm", tmp / "vllm")
    # the copy is a whole site (FUZZRUNNER_VLLM_SITE can name it): vLLM reads its own version from its dist-info at
    # import, and its dependencies are the pristine tree's (deps/ in it, or beside it: .cache/vllm/VERSION/deps)
    for info in src.glob("vllm-*.dist-info"):
        _link_tree(info, tmp / info.name)
    deps = next((d for d in (src / "deps", src.parent / "deps") if d.is_dir()), None)
    if deps is not None:
        (tmp / "deps").symlink_to(deps.resolve(), target_is_directory=True)
    for rel, hunks in files:
        if not rel.startswith("vllm/"):
            raise TargetUnavailable(f"{ENV}: {where.patch} changes {rel!r}, outside vllm/ (paths must be "
                                    f"a/vllm/..., b/vllm/...: make the diff from the directory holding vllm/).")
        target = tmp / rel
        old = target.read_text(encoding="utf-8") if target.exists() else ""
        new = _apply_hunks(old, hunks, rel, where)
        if target.exists():
            target.unlink()  # a hard link to the original: never write through it
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(new, encoding="utf-8")


def _publish(tmp: Path, dest: Path) -> None:
    """Rename the finished build into place. A folder there without a stamp is no copy (made by an older
    fuzzrunner that built in place, or by hand): set aside and removed, never reused."""
    if dest.exists() and not (dest / STAMP).is_file():
        aside = dest.parent / f".{dest.name}.build-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            dest.rename(aside)
            shutil.rmtree(aside, ignore_errors=True)
        except FileNotFoundError:
            pass
    try:
        tmp.rename(dest)
    except OSError:  # a concurrent process published it first
        if not (dest / STAMP).is_file():
            raise


def digest(patch: Path) -> str:
    """The patch's sha256 (what a report names: the same file name can hold another fix)."""
    return hashlib.sha256(patch.read_bytes()).hexdigest()


def changed_files(patch: Path) -> list[str]:
    """The files (``vllm/...``) the patch changes or adds."""
    return [rel for rel, _ in parse(patch.read_text(encoding="utf-8"), patch.name)]


def check_run(patch: Path, patched: Path, ran: set[str], notes: list[str], target: str) -> None:
    """Refuse a patch that changes a file whose code the target does not run here: a campaign would then test
    the release as shipped (or a re-statement of it) while the user believes it tests the fix (issue 47: on a
    GPU machine the dummy-mapping function could not be compiled and its unpatched re-statement ran).
    ``ran``: real paths of the files the target imported or compiled code from; ``notes``: what the target
    says of its parts (the reason a part is re-stated or left out); ``target``: whose files (``vllm_engine`` runs
    the adapter manager, which ``vllm_lora`` never imports on some releases: each target checks its own)."""
    missing = [rel for rel in changed_files(patch) if os.path.realpath(patched / rel) not in ran]
    if not missing:
        return
    why = [n for n in notes if "re-stated" in n]
    raise TargetUnavailable(
        f"{ENV}={patch.name} changes {', '.join(missing)}, which the {target} target does not run on this "
        f"machine{' (' + '; '.join(why)[:300] + ')' if why else ''}: a campaign would test vLLM without the "
        f"patch. Fuzz a target that runs it (vllm_engine drives the adapter manager and the runners), or run where "
        f"that code imports (`fuzzrunner doctor` lists what is re-stated), or leave that file out of the patch.")
