"""The one way fuzzrunner lists and reads the files a user points it at: corpus entries, seed
cases, findings, reports.

A corpus folder is shared and edited by hand, so it can hold anything: a FIFO named ``x.json``
(opening it blocks forever: ``fuzz`` and ``replay`` hung silently), a symlink loop
(``Path.resolve`` raised "RuntimeError: Symlink loop" out of ``fuzz`` and ``nightly``), a
device, a file of gigabytes. Listing follows nothing; reading opens without blocking, checks the
open file (not the name: it may change in between) is a regular file of bounded size, and reads
at most that. Anything else raises ``SkippedFile`` (one line), which callers report and leave
where it is.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .errors import InvalidCase, SkippedFile, UnreadableFile

MAX_ENTRY_BYTES = 16 * 1024 * 1024     # a case or finding file (a large one is ~100 KB)
MAX_REPORT_BYTES = 512 * 1024 * 1024   # a JSON report (--previous, trend readers)

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _what(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


def read_bytes(path: str | os.PathLike, limit: int = MAX_ENTRY_BYTES) -> bytes:
    """The contents of the regular file ``path`` (symlinks to one are fine), at most ``limit`` bytes;
    ``SkippedFile`` for anything else, ``UnreadableFile`` if it cannot be opened or read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SkippedFile(f"{_show(path)}: skipped: a symlink loop (or too many levels of links); "
                              f"fuzzrunner reads regular .json files only: remove the link.") from None
        raise UnreadableFile(f"{_show(path)}: cannot read ({e.strerror}).") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SkippedFile(f"{_show(path)}: skipped: {_what(st.st_mode)}, not a regular file; fuzzrunner reads "
                              f"regular .json files only: move it out of the corpus.")
        if st.st_size > limit:
            raise SkippedFile(too_big(path, st.st_size, limit))
        data = _read_up_to(fd, limit + 1)  # the file may have grown since fstat
    except OSError as e:
        raise UnreadableFile(f"{_show(path)}: cannot read ({e.strerror}).") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise SkippedFile(too_big(path, len(data), limit))
    return data


def _read_up_to(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def too_big(path, size: int, limit: int) -> str:
    return (f"{_show(path)}: skipped: {_size(size)}, over the {_size(limit)} a fuzzrunner file may hold; "
            f"is this a fuzzrunner file? Move it out of the corpus.")


def read_text(path: str | os.PathLike, limit: int = MAX_ENTRY_BYTES) -> str:
    """``read_bytes`` decoded as UTF-8; ``InvalidCase`` (one line) if it is not text."""
    try:
        return read_bytes(path, limit).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidCase(f"{_show(path)}: not a text file; is this a fuzzrunner JSON file?") from None


def json_files(folder: str | os.PathLike) -> list[Path]:
    """The ``*.json`` names in ``folder``, sorted; nothing is followed or opened (``read_text`` decides
    what each one is). A folder that cannot be listed (missing, a loop, no permission) has none."""
    try:
        with os.scandir(str(folder)) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(".json"))
    except OSError:
        return []
    return [Path(folder) / n for n in names]


def subfolders(folder: str | os.PathLike, on_skip=None) -> list[Path]:
    """The folders in ``folder`` (links to folders too), sorted; a link that loops or dangles is
    passed to ``on_skip(path, SkippedFile)`` and left out."""
    try:
        with os.scandir(str(folder)) as entries:
            items = sorted(entries, key=lambda e: e.name)
    except OSError:
        return []
    out = []
    for e in items:
        try:
            if e.is_dir():
                out.append(Path(e.path))
        except OSError as err:  # ELOOP and the like: is_dir raises instead of answering False
            if on_skip is not None:
                on_skip(Path(e.path), SkippedFile(f"{_show(e.path)}: skipped: cannot follow ({err.strerror}); "
                                                  f"remove the link."))
    return out


def _show(path) -> str:
    """A path for a message: its str, with undecodable bytes kept as ``surrogateescape`` (printable
    by the front ends, which write them back as the original bytes)."""
    return os.fsdecode(path) if isinstance(path, bytes) else str(path)
