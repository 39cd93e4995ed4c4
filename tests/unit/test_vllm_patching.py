"""FUZZRUNNER_VLLM_PATCH: a patched copy of a vLLM tree (targets/vllm_lora/patching.py); no vLLM needed."""

from __future__ import annotations

import os

import pytest

from fuzzrunner.errors import TargetUnavailable
from targets.vllm_lora import patching, site

ORIGINAL = "".join(f"line {i}\n" for i in range(1, 41))
PATCH = """--- a/vllm/mod.py
+++ b/vllm/mod.py
@@ -3,3 +3,4 @@
 line 3
-line 4
+line four
+line 4b
 line 5
@@ -30,3 +31,2 @@
 line 30
-line 31
 line 32
--- /dev/null
+++ b/vllm/new.py
@@ -0,0 +1,2 @@
+a = 1
+b = 2
"""


@pytest.fixture()
def tree(tmp_path):
    (tmp_path / "tree" / "vllm" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "vllm" / "mod.py").write_text(ORIGINAL)
    (tmp_path / "tree" / "vllm" / "sub" / "other.py").write_text("x = 1\n")
    return tmp_path / "tree"


def _patch(tmp_path, text=PATCH, name="fix.patch"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_the_copy_is_patched_and_the_original_is_untouched(tmp_path, tree):
    out = patching.apply(_patch(tmp_path), tree, tmp_path / "cache")
    got = (out / "vllm" / "mod.py").read_text().splitlines()
    assert got[2:6] == ["line 3", "line four", "line 4b", "line 5"]
    assert "line 31" not in got and len(got) == 40
    assert (out / "vllm" / "new.py").read_text() == "a = 1\nb = 2\n"
    assert (out / "vllm" / "sub" / "other.py").read_text() == "x = 1\n"
    assert (tree / "vllm" / "mod.py").read_text() == ORIGINAL  # never written through a hard link
    assert not (tree / "vllm" / "new.py").exists()


def test_a_tree_and_patch_in_a_folder_whose_name_is_not_utf8_apply(tmp_path, tree):
    """Issue 47, item 11's class: the copy's key and stamp encoded the tree's path as strict UTF-8."""
    bad = os.fsencode(str(tmp_path)) + b"/dir\xff"
    os.mkdir(bad)
    moved = os.fsdecode(bad + b"/tree")
    os.rename(tree, moved)
    patch = _patch(tmp_path / os.fsdecode(b"dir\xff"))
    out = patching.apply(patch, type(tree)(moved), tmp_path / os.fsdecode(b"dir\xff") / "cache")
    assert "line four" in (out / "vllm" / "mod.py").read_text()


def test_a_shifted_hunk_applies_where_its_context_is(tmp_path, tree):
    (tree / "vllm" / "mod.py").write_text("inserted\n" * 5 + ORIGINAL)
    out = patching.apply(_patch(tmp_path), tree, tmp_path / "cache")
    assert "line four" in (out / "vllm" / "mod.py").read_text()


def test_the_copy_is_made_once_per_release_and_patch_content(tmp_path, tree):
    first = patching.apply(_patch(tmp_path), tree, tmp_path / "cache")
    stamp = (first / patching.STAMP).stat().st_mtime_ns
    assert patching.apply(_patch(tmp_path), tree, tmp_path / "cache") == first
    assert (first / patching.STAMP).stat().st_mtime_ns == stamp
    # the same content under another name and place is the same copy; other content under the same name is not
    (tmp_path / "elsewhere").mkdir()
    assert patching.apply(_patch(tmp_path / "elsewhere"), tree, tmp_path / "cache").name.endswith(first.name[-12:])
    other = patching.apply(_patch(tmp_path, PATCH.replace("line four", "line FOUR")), tree, tmp_path / "cache")
    assert other != first
    # another release in the same tree (re-set-up in place) is another copy, and the copy's name says which
    (tree / "vllm-9.9.9.dist-info").mkdir()
    newer = patching.apply(_patch(tmp_path), tree, tmp_path / "cache")
    assert newer != first and "-9.9.9-" in newer.name and (newer / "vllm-9.9.9.dist-info").is_dir()


def test_the_release_is_read_from_the_dist_info_else_from_vllm_version(tmp_path, tree):
    assert site.release_of(tree) == "unknown"
    (tree / "vllm" / "_version.py").write_text("__version__: str\n__version__ = version = '0.24.0'\n")
    assert site.release_of(tree) == "0.24.0"
    (tree / "vllm-0.24.1.dist-info").mkdir()
    assert site.release_of(tree) == "0.24.1"


# A patched copy given as the tree (FUZZRUNNER_VLLM_SITE=.cache/vllm/patched/X, the patch still set): on 0.22.0 a
# second run applied the patch again to that copy and refused it, "hunk 1 ... does not apply ... a patch for another
# release?". A patch applies to the pristine tree, whatever copy of it is given: the same copy comes back.
@pytest.mark.parametrize("stamp", ["json", "legacy"])
def test_a_patch_given_a_copy_that_holds_it_applies_to_the_pristine_tree_once(tmp_path, tree, stamp):
    patch = _patch(tmp_path)
    first = patching.apply(patch, tree, tmp_path / "cache")
    if stamp == "legacy":  # a copy made by the fuzzrunner before this one: `ok` = patch path, tree path
        (first / patching.STAMP).rename(first / "ok")
        (first / "ok").write_bytes(os.fsencode(patch) + b"\n" + os.fsencode(tree) + b"\n")
    again = patching.apply(patch, first, tmp_path / "cache")
    got = (again / "vllm" / "mod.py").read_text().splitlines()
    assert got.count("line four") == 1 and got[2:6] == ["line 3", "line four", "line 4b", "line 5"]
    other = patching.apply(_patch(tmp_path, PATCH.replace("line four", "line FOUR"), "other.patch"), first,
                           tmp_path / "cache")  # another fix: the pristine tree's, never stacked on the first
    assert "line four" not in (other / "vllm" / "mod.py").read_text()
    assert "line FOUR" in (other / "vllm" / "mod.py").read_text()


def test_a_tree_patched_by_hand_is_refused_saying_so_and_what_to_do(tmp_path, tree):
    patch = _patch(tmp_path)
    made = patching.apply(patch, tree, tmp_path / "cache")
    hand = tmp_path / "hand"
    hand.mkdir()
    (hand / "vllm").mkdir()
    (hand / "vllm" / "mod.py").write_text((made / "vllm" / "mod.py").read_text())  # `patch -p1` by hand
    with pytest.raises(TargetUnavailable) as e:
        patching.apply(patch, hand, tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg and "already holds hunk 1's change" in msg and "unset FUZZRUNNER_VLLM_PATCH" in msg, msg
    assert "another release" not in msg


def test_a_copy_whose_pristine_tree_is_gone_is_refused_in_one_line(tmp_path, tree):
    patch = _patch(tmp_path)
    first = patching.apply(patch, tree, tmp_path / "cache")
    (tree / "vllm" / "mod.py").unlink()
    (tree / "vllm" / "sub" / "other.py").unlink()
    (tree / "vllm" / "sub").rmdir()
    (tree / "vllm").rmdir()
    with pytest.raises(TargetUnavailable, match=r"is a patched copy of .*holds no vllm/ any more; point "
                                                r"FUZZRUNNER_VLLM_SITE at the release's unpatched tree"):
        patching.apply(patch, first, tmp_path / "cache")


_CRASH = """
import os, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from targets.vllm_lora import patching, site
real = patching._apply_hunks
def crash(text, hunks, rel, where):
    if rel == "vllm/new.py":  # the first file is patched already: die half-way
        os._exit(9)
    return real(text, hunks, rel, where)
patching._apply_hunks = crash
patching.apply(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
"""


def test_a_crash_mid_build_leaves_no_half_patched_copy(tmp_path, tree):
    """A process killed while building the copy: the next run builds it whole (never takes a half-patched copy for
    a finished one) and removes the dead build's folder."""
    import subprocess
    import sys
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    patch = _patch(tmp_path)
    r = subprocess.run([sys.executable, "-c", _CRASH.format(root=os.path.abspath(root)), str(patch), str(tree),
                        str(tmp_path / "cache")], capture_output=True, text=True)
    assert r.returncode == 9, r.stderr
    left = list((tmp_path / "cache" / "patched").iterdir())
    assert left and all(p.name.startswith(".") for p in left)  # the dead build, under a name no run looks up
    out = patching.apply(patch, tree, tmp_path / "cache")
    assert (out / "vllm" / "new.py").read_text() == "a = 1\nb = 2\n" and "line four" in (out / "vllm" / "mod.py").read_text()
    assert [p.name for p in (tmp_path / "cache" / "patched").iterdir()] == [out.name]


def test_a_folder_in_the_copys_place_without_a_stamp_is_rebuilt_never_reused(tmp_path, tree):
    """A half-made copy where the finished one goes (an older fuzzrunner built in place; a copy by hand): rebuilt."""
    patch = _patch(tmp_path)
    out = patching.apply(patch, tree, tmp_path / "cache")
    (out / patching.STAMP).unlink()
    (out / "vllm" / "new.py").unlink()
    (out / "vllm" / "mod.py").unlink()
    (out / "vllm" / "mod.py").write_text(ORIGINAL)  # half-patched: the first file not yet written
    again = patching.apply(patch, tree, tmp_path / "cache")
    assert again == out and (again / patching.STAMP).is_file()
    assert "line four" in (again / "vllm" / "mod.py").read_text() and (again / "vllm" / "new.py").is_file()


def test_a_hunk_whose_context_is_not_there_is_refused_in_one_line(tmp_path, tree):
    bad = PATCH.replace(" line 5\n@@ -30", " line 55\n@@ -30")
    with pytest.raises(TargetUnavailable) as e:
        patching.apply(_patch(tmp_path, bad), tree, tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg and "hunk 1 (line 3 of vllm/mod.py) does not apply to vLLM unknown's" in msg, msg
    assert "make the patch against vLLM unknown's own source" in msg
    assert not list((tmp_path / "cache" / "patched").glob("*"))  # nothing half-made is left to be reused


@pytest.mark.parametrize("text, said", [
    ("not a diff at all\n", "holds no file changes"),
    ("--- a/setup.py\n+++ b/setup.py\n@@ -1 +1 @@\n-x\n+y\n", "outside vllm/"),
    ("--- a/vllm/mod.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-line 1\n", "deletes a file"),
])
def test_what_cannot_be_applied_is_said(tmp_path, tree, text, said):
    with pytest.raises(TargetUnavailable, match=said):
        patching.apply(_patch(tmp_path, text), tree, tmp_path / "cache")


def test_the_variable_must_name_a_file(monkeypatch, tmp_path):
    monkeypatch.setenv(patching.ENV, str(tmp_path / "missing.patch"))
    with pytest.raises(TargetUnavailable, match="is not a file"):
        patching.requested()
    monkeypatch.delenv(patching.ENV)
    assert patching.requested() is None


def test_the_shipped_v1_fix_parses_as_one_file_two_hunks():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "findings")
    with open(os.path.join(root, "v1_specialize_active_lora.patch"), encoding="utf-8") as f:
        files = patching.parse(f.read(), "v1_specialize_active_lora.patch")
    assert [(path, len(hunks)) for path, hunks in files] == [("vllm/v1/worker/lora_model_runner_mixin.py", 2)]


def test_a_patch_of_a_file_the_target_does_not_run_is_refused_naming_it(tmp_path, tree):
    """Issue 47, item 14: the target re-stated a function the patch changed, and the campaign tested the release
    without the fix. Every file the patch changes must be one whose code ran (imported or compiled)."""
    patch = _patch(tmp_path)
    out = patching.apply(patch, tree, tmp_path / "cache")
    ran = {os.path.realpath(out / "vllm" / "mod.py"), os.path.realpath(out / "vllm" / "new.py")}
    patching.check_run(patch, out, ran, [], "vllm_lora")  # both files ran: fine
    notes = ["dummy mapping: re-stated (NameError: ...)", "PunicaWrapperGPU"]
    with pytest.raises(TargetUnavailable, match=r"fix.patch changes vllm/new.py, which the vllm_engine target does "
                                                r"not run on this machine \(dummy mapping: re-stated"):
        patching.check_run(patch, out, ran - {os.path.realpath(out / "vllm" / "new.py")}, notes, "vllm_engine")
    assert patching.digest(patch) == __import__("hashlib").sha256(patch.read_bytes()).hexdigest()
