"""The one way fuzzrunner writes a file: a report, a repro script, a corpus entry.

Every write of a regular file goes to a temporary file beside it, then ``os.replace``: a
``kill -9`` at any moment leaves the old file or the new one, never half of one. But a rename
replaces whatever is at the path: run as root, ``fuzzrunner export F.json -o /dev/null``
replaced the machine's ``/dev/null`` with a regular file. So what is there decides:

- a path the user named (``--report``, ``--junit``, ``--html``, ``export -o``, the nightly's
  report folder; ``follow=True``):
  * nothing, or a regular file: written atomically as above;
  * a symlink: its target is written (atomically, beside the target); the link stays;
  * a character device (``/dev/null``, a terminal) or a FIFO: written in place, never replaced;
    a FIFO nobody reads is waited for ``FIFO_WAIT_S`` seconds, then refused (no hang);
  * ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N``: this process's own
    descriptor, written in place whatever it is (a pipe, a terminal, a redirected file, a socket);
  * a directory, a block device, a socket, a symlink loop: refused, nothing written;
- a file fuzzrunner names in its own folders (the corpus, the plugin's repro folder;
  ``follow=False``): a regular file or a symlink is replaced as a directory entry (a link is never
  followed out of the corpus, which others may write to), anything else is refused and left.

Errors are ``OSError`` whose ``strerror`` says what is wrong in words (``explain`` turns any
``OSError`` of a write into them: the file-size limit, a full disk, a file where a folder should
be, a file system that takes no files); ``check_output`` says it before a campaign starts.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
import tempfile
import time
from pathlib import Path

from .errors import InvalidArgument

FIFO_WAIT_S = 30.0  # how long a FIFO's reader may take to open it before the write is refused

# this process's own descriptors, by the names a user passes
_OWN_FD = re.compile(r"^/dev/(?:(?P<std>stdout|stderr)|fd/(?P<fd>\d+))$|^/proc/(?P<pid>self|thread-self|\d+)"
                     r"(?:/task/\d+)?/fd/(?P<pfd>\d+)$")
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"))


def write_file(path: str | os.PathLike, text: str, *, mode: int = 0o644, follow: bool = True) -> Path:
    """Write ``text`` to ``path`` as the module says (``follow``: a path the user named); ``OSError``
    otherwise, its ``strerror`` in words. Undecodable path bytes in ``text`` are written as themselves."""
    name = os.fspath(path)
    if not name:
        raise OSError(errno.ENOENT, "an empty path names no file")
    data = text.encode("utf-8", "surrogateescape")
    if follow:
        fd = own_descriptor(name)
        if fd is not None:
            _write_descriptor(fd, data)
            return Path(path)
        st = _stat(name)
        if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            _write_in_place(name, data)
            return Path(path)
        _refuse_unless_regular(st)
        _replace(os.path.realpath(name), data, mode)  # a link: its target is written, the link stays
    else:
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISLNK(st.st_mode):
            _refuse_unless_regular(st)
        _replace(name, data, mode)
    return Path(path)


def streamed(path) -> bool:
    """Whether ``path`` is written in place (this process's descriptor, a character device, a FIFO)."""
    name = os.fspath(path)
    if own_descriptor(name) is not None:
        return True
    try:
        mode = os.stat(name).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def own_descriptor(name: str) -> int | None:
    """The descriptor of this process that ``name`` spells (``/dev/stdout`` -> 1), or None."""
    m = _OWN_FD.match(os.path.abspath(name))
    if not m:
        return None
    if m["pid"] not in (None, "self", "thread-self", str(os.getpid())):
        return None
    return {"stdout": 1, "stderr": 2}[m["std"]] if m["std"] else int(m["fd"] or m["pfd"])


def _stat(name: str) -> os.stat_result | None:
    """What ``name`` names, links followed; None if nothing (a dangling link: its target is made);
    ``OSError`` in words if a file stands where a folder of its path should be."""
    try:
        return os.stat(name)
    except FileNotFoundError:
        return None
    except NotADirectoryError as e:
        raise OSError(e.errno, _folder_reason(os.path.dirname(os.path.abspath(name)), e)) from None


def _refuse_unless_regular(st: os.stat_result | None) -> None:
    if st is None or stat.S_ISREG(st.st_mode):
        return
    what = kind_of(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        raise OSError(errno.EISDIR, f"it is {what}; name a file in it")
    raise OSError(errno.EEXIST, f"it is {what}, not a file: fuzzrunner writes regular files, character devices "
                                f"(/dev/null) and FIFOs, and replaces nothing else")


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _replace(target: str, data: bytes, mode: int) -> None:
    """``data`` into a temporary file beside ``target``, then renamed over it."""
    folder = os.path.dirname(target) or "."
    make_folder(folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(target), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_descriptor(fd: int, data: bytes) -> None:
    """Into this process's own descriptor, after what Python's streams hold for it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.fileno() == fd:
                stream.flush()
        except (OSError, ValueError, AttributeError):  # a test's capture has no descriptor
            pass
    _write_all(fd, data)


def _write_in_place(name: str, data: bytes, wait_s: float | None = None) -> None:
    """Into a character device or a FIFO, opened (not created, not truncated) for writing. A FIFO
    with no reader refuses a non-blocking open (ENXIO): tried again until ``wait_s``, then refused."""
    wait_s = FIFO_WAIT_S if wait_s is None else wait_s
    flags = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(name, flags)
            break
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:
                raise OSError(errno.ENXIO, f"no process opened the FIFO to read it within {wait_s:g} s; start "
                                           f"its reader first (e.g. `cat {name} &`)") from None
            time.sleep(0.05)
    try:
        st = os.fstat(fd)
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):  # swapped since it was looked at
            raise OSError(errno.EEXIST, f"it became {kind_of(st.st_mode)} while being opened")
        os.set_blocking(fd, True)  # a reader is there: wait for it as a shell's `>` would
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def make_folder(folder: str | os.PathLike) -> None:
    """``folder`` and its parents, made if missing; ``OSError`` in words if that cannot be."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise OSError(e.errno, _folder_reason(os.fspath(folder), e)) from None
    if not os.path.isdir(folder):
        raise OSError(errno.ENOTDIR, f"{os.fspath(folder)!r} is not a folder")


def _folder_reason(folder: str, e: OSError) -> str:
    """Why ``folder`` cannot be made: a file where a folder should be, a file system that takes no
    new files (/proc, /sys: ENOENT although the folder above is there), or what the system says."""
    above = _nearest_existing(folder)
    if above is not None and not os.path.isdir(above):
        return f"{above!r} is a file, not a folder"
    if e.errno == errno.ENOENT and above is not None:
        return f"the file system of {above!r} takes no new files or folders (a virtual one, such as /proc or /sys)"
    return explain(e)


def _nearest_existing(path: str) -> str | None:
    path = os.path.abspath(path)
    while True:
        if os.path.lexists(path):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def explain(e: OSError) -> str:
    """What an ``OSError`` of a write means, with the fix where there is one (raised here: its own words)."""
    if e.strerror and e.strerror != os.strerror(e.errno or 0):
        return e.strerror
    if e.errno == errno.EFBIG:
        return f"the file would pass this process's file-size limit ({_fsize_limit()}); raise it " \
               f"(`ulimit -f unlimited`) or write it elsewhere"
    if e.errno == errno.ENOSPC:
        return "no space left on the device; free some or choose a path on another disk"
    if e.errno == errno.EDQUOT:
        return "over the disk quota; free some or choose a path on another disk"
    if e.errno == errno.EROFS:
        return "a read-only file system; choose a path in a writable folder"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied; choose a path in a writable folder"
    if e.errno == errno.EPIPE:
        return "its reader closed it before everything was written"
    if e.errno == errno.ELOOP:
        return "a symlink loop (or too many levels of links); remove the link or name another path"
    return e.strerror or str(e)


def _fsize_limit() -> str:
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return "ulimit -f"
    return "ulimit -f: unlimited" if soft == resource.RLIM_INFINITY else f"ulimit -f: {soft:,} bytes"


def write_error(what: str, path, e: OSError) -> InvalidArgument:
    """The one-line error of a failed write: ``cannot write report 'r.json': <why>.``"""
    return InvalidArgument(f"cannot write {what} {_show(path)!r}: {explain(e)}.")


def check_output(path, what: str) -> None:
    """Before a campaign: can ``path`` (a path the user named) take ``what``? ``InvalidArgument`` in one
    line if not (an empty path, a directory, a block device, a socket, a loop, a folder that cannot
    be made or written); the missing folders above it are made, as the write would."""
    name = os.fspath(path) if path is not None else ""
    if not name:
        raise InvalidArgument(f"{what}: an empty path names no file; give a file name.")
    if own_descriptor(name) is not None:
        return
    try:
        st = _stat(name)
        if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            return  # written in place
        _refuse_unless_regular(st)
        target = os.path.realpath(name)
        if st is not None and not os.access(target, os.W_OK):
            raise OSError(errno.EACCES, "permission denied: the file is read-only; choose another path")
        folder = os.path.dirname(target) or "."
        make_folder(folder)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".fuzzrunner-probe-")  # root passes every access check
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise write_error(what, name, e) from None


def check_folder(folder, what: str, fix: str) -> None:
    """Before a campaign: ``folder`` made if missing and written to once (root passes every access
    check), or ``InvalidArgument``: ``cannot use <what>: <why>. <fix>``."""
    try:
        if not os.fspath(folder):
            raise OSError(0, "an empty path names no folder")
        make_folder(folder)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".fuzzrunner-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InvalidArgument(f"cannot use {what}: {explain(e)}. {fix}") from None


def same_file(a, b) -> bool:
    """Whether two paths name one file: by inode when both exist (a hard link, a symlink, ``./x`` and
    ``x``), else by their resolved paths."""
    try:
        sa, sb = os.stat(a), os.stat(b)
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _show(path) -> str:
    return os.fsdecode(path) if isinstance(path, bytes) else str(path)


def check_outputs(outputs: dict, inputs: dict | None = None) -> None:
    """Before any case runs (a front end's flags): each output path the user named ({flag: path}, None: not
    asked for) can be written (``check_output``: an empty path, a directory, a block device or a socket is
    refused; /dev/null, /dev/stdout and FIFOs are written in place), no two name one file, and none is one of
    the ``inputs`` ({what: path}) the command reads (``export F.json -o F.json``)."""
    asked = {flag: p for flag, p in outputs.items() if p is not None}
    check_distinct_files(asked)
    for flag, p in asked.items():
        for what, source in (inputs or {}).items():
            if source and p and same_file(p, source):
                raise InvalidArgument(f"{flag} {p!r} is {what}: writing it would overwrite what is being read. "
                                      f"Name another file.")
        check_output(p, flag)


def check_distinct_files(paths: dict) -> None:
    """Two report flags naming one file (``--report x --junit x``, or ``./x`` and ``x``, or a link):
    the second write would silently replace the first report. Devices and FIFOs (``/dev/null`` for
    two of them) are written in place: they may be shared."""
    seen: dict = {}
    for flag, p in paths.items():
        if not p or streamed(p):
            continue
        other = next((f for f, q in seen.items() if same_file(p, q)), None)
        if other is not None:
            raise InvalidArgument(f"{other} and {flag} name the same file {p!r}: one would overwrite the other. "
                                  f"Give each report its own file (--report r.json --junit r.xml --html r.html).")
        seen[flag] = p
