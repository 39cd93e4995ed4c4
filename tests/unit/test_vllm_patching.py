"""FUZZRUNNER_VLLM_PATCH: a patched copy of a vLLM tree (targets/vllm_lora/patching.py); no vLLM needed."""

from __future__ import annotations

import os

import pytest

from fuzzrunner.errors import TargetUnavailable
from targets.vllm_lora import patching

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


def test_the_copy_is_made_once_per_patch_and_tree(tmp_path, tree):
    first = patching.apply(_patch(tmp_path), tree, tmp_path / "cache")
    stamp = (first / "ok").stat().st_mtime_ns
    assert patching.apply(_patch(tmp_path), tree, tmp_path / "cache") == first
    assert (first / "ok").stat().st_mtime_ns == stamp
    other = patching.apply(_patch(tmp_path, PATCH.replace("line four", "line FOUR")), tree, tmp_path / "cache")
    assert other != first


def test_a_hunk_whose_context_is_not_there_is_refused_in_one_line(tmp_path, tree):
    bad = PATCH.replace(" line 5\n@@ -30", " line 55\n@@ -30")
    with pytest.raises(TargetUnavailable) as e:
        patching.apply(_patch(tmp_path, bad), tree, tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg and "hunk 1 of fix.patch does not apply" in msg and "mod.py" in msg
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
    patching.check_run(patch, out, ran, [])  # both files ran: fine
    notes = ["dummy mapping: re-stated (NameError: ...)", "PunicaWrapperGPU"]
    with pytest.raises(TargetUnavailable, match=r"fix.patch changes vllm/new.py, which the vllm_lora target does not "
                                                r"run on this machine \(dummy mapping: re-stated"):
        patching.check_run(patch, out, ran - {os.path.realpath(out / "vllm" / "new.py")}, notes)
    assert patching.digest(patch) == __import__("hashlib").sha256(patch.read_bytes()).hexdigest()
