"""Where in the source a violation happened, said so that it survives a move and an edit.

``location(path, line)`` is ``file:line`` with the file relative to its import root (the folder
above its top package), so the same code gives the same text from any working directory and
from a checkout or site-packages alike. ``site(location)`` is ``file::function``: the function
that contains the line, found by parsing the file. A finding is matched by its site, never by
its line (adding a comment above a bug must not make it "fixed"); the line is only reported.
"""

from __future__ import annotations

import ast
import functools
import os
import re

# location text -> absolute path, for the files this process has located (site needs the source)
_PATHS: dict[str, str] = {}
_LOCATED: dict[tuple[str, int], str] = {}  # (absolute path, line) -> location text
_LOCATION = re.compile(r"^(?P<file>.+\.py):(?P<line>\d+)$")
# a file's undecodable bytes (a non-UTF-8 name, held as surrogates) are part of its name: without them
# ``torch.empty@t\udcfe.py:10`` kept its line in the id
_EMBEDDED = re.compile(r"(?P<loc>(?:[\w./\\-]|[\udc80-\udcff])+\.py:\d+)")


def import_root(path: str) -> str:
    """The folder from which ``path`` is imported: above its outermost package (``__init__.py``)."""
    return _root_of(os.path.dirname(path))


@functools.lru_cache(maxsize=1024)
def _root_of(folder: str) -> str:
    """Cached per folder: a shadow oracle names every allocation by its line, a few file checks each."""
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return folder


def location(path: str, line: int) -> str:
    """``file:line``, the file relative to its import root (a bare module name outside packages)."""
    if not path or path == "?" or path.startswith("<"):
        return f"{path or '?'}:{line}"
    text = _LOCATED.get((path, line))
    if text is not None:
        return text
    full = os.path.abspath(path)
    rel = os.path.relpath(full, import_root(full)).replace(os.sep, "/")
    text = f"{rel}:{line}"
    _PATHS[text] = full
    if os.path.isabs(path):  # the same text from any working directory: kept (a shadow oracle names every allocation)
        _LOCATED[(path, line)] = text
    return text


@functools.lru_cache(maxsize=256)
def _functions(path: str, mtime: float) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every function and class body in ``path``."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return []
    out: list[tuple[int, int, str]] = []

    def walk(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                out.append((child.lineno, child.end_lineno or child.lineno, name))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def function_at(path: str, line: int) -> str:
    """The innermost function (or class) whose body holds ``line``; ``<module>`` if none."""
    try:
        mtime = os.path.getmtime(path)
    except OSError:
        return ""
    spans = [s for s in _functions(path, mtime) if s[0] <= line <= s[1]]
    return max(spans, key=lambda s: s[0])[2] if spans else "<module>"


# location text -> site, learned from violations made in another process (a worker: only it
# could read the file); without them a process would name the same bug by its file alone
_SITES: dict[str, str] = {}


def site(loc: str) -> str:
    """``file::function`` for a ``file:line`` location this process produced or learned; else the
    location without its line (a file we cannot read still gives a line-free identity)."""
    m = _LOCATION.match(loc or "")
    if not m:
        return loc or ""
    path = _PATHS.get(loc)
    func = function_at(path, int(m.group("line"))) if path else ""
    return f"{m.group('file')}::{func}" if func else _SITES.get(loc) or m.group("file")


def without_lines(text: str) -> str:
    """``text`` with every embedded ``file.py:N`` replaced by its site (tensor names of
    automatically tracked allocations carry where they were made)."""
    return _EMBEDDED.sub(lambda m: site(m.group("loc")), text or "")


def files_only(text: str) -> str:
    """``text`` with every embedded ``file.py:N`` replaced by its file: the identity a process
    that could not find the file gives (older findings were named so)."""
    return _EMBEDDED.sub(lambda m: m.group("loc").rsplit(":", 1)[0], text or "")


def no_locations(text: str) -> str:
    """``text`` with every embedded ``file.py:N`` left out (``torch.empty@``): what an automatically
    tracked buffer is wherever the file that made it lives or is called."""
    return _EMBEDDED.sub("", text or "")


def functions_only(text: str) -> str:
    """``text`` with every embedded ``file.py:N`` replaced by the function holding it, without its file
    ("" if unknown): the functions that made the buffers a name mentions, whatever their file is called."""
    return _EMBEDDED.sub(lambda m: function_of(site(m.group("loc"))), text or "")


def function_of(named_site: str) -> str:
    """The function part of a site (``Runner.step`` of ``runner.py::Runner.step``); "" if it names none."""
    return named_site.partition("::")[2]


def known_sites(text: str) -> dict[str, str]:
    """The sites of the locations embedded in ``text`` that this process can name by function."""
    out = {}
    for m in _EMBEDDED.finditer(text or ""):
        named = site(m.group("loc"))
        if "::" in named:
            out[m.group("loc")] = named
    return out


def learn_sites(sites: dict) -> None:
    """Remember sites another process named (carried in a violation's details)."""
    for loc, named in (sites or {}).items():
        if isinstance(loc, str) and isinstance(named, str) and "::" in named:
            _SITES.setdefault(loc, named)
