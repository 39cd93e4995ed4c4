"""safe_write: what a write does to whatever is at the path (issue 47, item 1, and item 15's messages).

Run as root, ``fuzzrunner export F.json -o /dev/null`` replaced the machine's /dev/null with a
regular file: the atomic write (temporary file + rename) renamed over it. Every node here is made
under tmp_path (``os.mknod``: a character device numbered as /dev/null, whose writes go nowhere,
and a block device numbered 0:0, which opens to nothing); no real /dev node is ever touched.
"""

import errno
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fuzzrunner import safe_write
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.safe_write import check_output, make_folder, write_file

ROOT = Path(__file__).resolve().parents[2]
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="os.mknod of a device needs root")


def _char_device(path: Path) -> Path:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # the numbers of /dev/null: writes go nowhere
    return path


def _block_device(path: Path) -> Path:
    os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(0, 0))  # no such device: opening it fails
    return path


def _socket(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


def _only(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))  # no temporary file left behind


@root_only
def test_a_character_device_is_written_in_place_never_replaced(tmp_path):
    null = _char_device(tmp_path / "null")
    for _ in range(2):
        assert write_file(null, "report\n") == null
        assert stat.S_ISCHR(os.lstat(null).st_mode) and os.lstat(null).st_rdev == os.makedev(1, 3)
    assert _only(tmp_path) == ["null"]


def test_a_fifo_is_written_in_place_to_its_reader(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(Path(fifo).read_text()), daemon=True)  # never holds the process
    reader.start()
    write_file(fifo, "x" * 200_000)  # more than a pipe holds: the write waits for the reader
    reader.join(30)
    assert got == ["x" * 200_000] and stat.S_ISFIFO(os.lstat(fifo).st_mode) and _only(tmp_path) == ["fifo"]


def test_a_fifo_nobody_reads_is_refused_after_a_bounded_wait_not_a_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_write, "FIFO_WAIT_S", 0.3)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as e:
        write_file(fifo, "report")
    assert e.value.errno == errno.ENXIO and "no process opened the FIFO to read it within 0.3 s" in str(e.value)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@root_only
def test_a_block_device_a_socket_and_a_directory_are_refused_and_left_as_they_are(tmp_path):
    block = _block_device(tmp_path / "block")
    sock = _socket(tmp_path / "sock")
    (tmp_path / "dir").mkdir()
    try:
        for path, says in ((block, "it is a block device"), (tmp_path / "sock", "it is a socket"),
                           (tmp_path / "dir", "it is a directory")):
            for follow in (True, False):
                with pytest.raises(OSError) as e:
                    write_file(path, "report", follow=follow)
                assert says in str(e.value)
            with pytest.raises(InvalidArgument) as e:
                check_output(path, "--report")
            assert says in str(e.value) and str(path) in str(e.value)
        assert stat.S_ISBLK(os.lstat(block).st_mode) and stat.S_ISSOCK(os.lstat(tmp_path / "sock").st_mode)
        assert _only(tmp_path) == ["block", "dir", "sock"] and os.listdir(tmp_path / "dir") == []
    finally:
        sock.close()


@root_only
def test_a_symlink_named_by_the_user_has_its_target_written_and_stays_a_link(tmp_path):
    real = tmp_path / "reports" / "2026-12-06.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    write_file(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    null = _char_device(tmp_path / "null")
    (tmp_path / "to_null").symlink_to(null)
    write_file(tmp_path / "to_null", "x")  # a link to a device: the device, in place
    assert stat.S_ISCHR(os.lstat(null).st_mode) and (tmp_path / "to_null").is_symlink()
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "made" / "there.json")
    write_file(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "made" / "there.json").read_text() == "made"
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OSError) as e:
        write_file(loop, "x")
    assert e.value.errno == errno.ELOOP and "symlink loop" in safe_write.explain(e.value)


def test_a_file_in_fuzzrunners_own_folder_replaces_a_link_and_refuses_a_fifo(tmp_path):
    """The corpus is shared: a link planted there is never followed out of it (root would write
    through it), and a FIFO named like a finding file is neither waited for nor replaced."""
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "abc.json").symlink_to(outside)
    write_file(corpus / "abc.json", "finding", follow=False)
    assert outside.read_text() == "precious" and not (corpus / "abc.json").is_symlink()
    assert (corpus / "abc.json").read_text() == "finding"
    os.mkfifo(corpus / "fifo.json")
    with pytest.raises(OSError) as e:
        write_file(corpus / "fifo.json", "finding", follow=False)
    assert "it is a FIFO" in str(e.value) and stat.S_ISFIFO(os.lstat(corpus / "fifo.json").st_mode)


def test_this_processs_own_descriptors_are_written_whatever_they_are(tmp_path):
    """/dev/stdout, /dev/fd/N, /proc/self/fd/N: the descriptor itself (a pipe here), never opened by name."""
    for name in ("/dev/fd/{}", "/proc/self/fd/{}", f"/proc/{os.getpid()}/fd/{{}}"):
        r, w = os.pipe()
        try:
            write_file(name.format(w), "through the pipe")
            os.close(w)
            assert os.read(r, 100) == b"through the pipe"
        finally:
            os.close(r)
    assert safe_write.own_descriptor("/dev/stdout") == 1 and safe_write.own_descriptor("/dev/stderr") == 2
    assert safe_write.own_descriptor("/proc/1/fd/1") is None  # another process's: not ours to write
    assert safe_write.own_descriptor(str(tmp_path / "dev" / "stdout")) is None


def test_an_empty_path_is_refused_and_a_regular_file_is_replaced_whole(tmp_path):
    with pytest.raises(InvalidArgument) as e:
        check_output("", "--report")
    assert "--report: an empty path names no file" in str(e.value)
    with pytest.raises(OSError):
        write_file("", "x")
    path = tmp_path / "r.json"
    path.write_text("old and longer")
    os.link(path, tmp_path / "hard.json")
    write_file(path, "new")
    assert path.read_text() == "new" and (tmp_path / "hard.json").read_text() == "old and longer"  # a new inode
    assert _only(tmp_path) == ["hard.json", "r.json"]


def test_folders_that_cannot_be_made_say_why(tmp_path):
    """Issue 47, item 15: "File exists" for a file where a folder should be, "No such file or
    directory" for a folder under /proc."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for folder, says in ((blocker, f"{str(blocker)!r} is a file, not a folder"),
                         (blocker / "sub", f"{str(blocker)!r} is a file, not a folder"),
                         ("/proc/fuzzrunner-test-corpus", "the file system of '/proc' takes no new files")):
        with pytest.raises(OSError) as e:
            make_folder(folder)
        assert says in str(e.value) and "File exists" not in str(e.value) and "No such file" not in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        check_output(blocker / "r.json", "--report")
    assert f"{str(blocker)!r} is a file, not a folder" in str(e.value)


def test_a_write_past_the_file_size_limit_says_so(tmp_path):
    """Issue 47, item 15: a report past `ulimit -f` said "choose a path in a writable directory"."""
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
            "from fuzzrunner.report.json_report import write_text\n"
            "from fuzzrunner.errors import InvalidArgument\n"
            "try:\n    write_text(sys.argv[1], 'x' * 100_000)\n"
            "except InvalidArgument as e:\n    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.json")], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert "file-size limit (ulimit -f: 4,096 bytes)" in p.stdout and "ulimit -f unlimited" in p.stdout, p
    assert "writable" not in p.stdout and os.listdir(tmp_path) == []  # the partial temporary file is gone
