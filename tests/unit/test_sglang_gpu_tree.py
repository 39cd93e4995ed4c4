"""The SGLang archive for a GPU machine (targets/sglang_lora/gpu_tree.py): what it leaves out, and that a failed
run leaves no truncated archive where the next device call would carry it."""

from __future__ import annotations

import tarfile

import pytest

from targets.sglang_lora import gpu_tree


def _tree(tmp_path):
    site, deps = tmp_path / "site", tmp_path / "deps"
    for rel in ("sglang/srt/lora/lora_manager.py", "sglang/multimodal_gen/runtime/server.py",
                "sglang/benchmark/datasets/random.py", "sglang/test/parallel_groups.py"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("x = 1\n")
    for top, so in (("safetensors_py", False), ("hf_xet", False)):
        (deps / top).mkdir(parents=True)
        (deps / top / "__init__.py").write_text("")
        info = deps / f"{top}-1.0.dist-info"
        info.mkdir()
        (info / "RECORD").write_text(f"{top}/__init__.py,,\n" + (f"{top}/x.so,,\n" if so else ""))
    return site, deps


def test_the_archive_leaves_out_what_the_engines_server_path_never_imports(tmp_path, monkeypatch):
    site, deps = _tree(tmp_path)
    monkeypatch.setattr(gpu_tree, "site_dirs", lambda v: (site, deps))
    out = tmp_path / "out" / "sglang.tar.xz"
    gpu_tree.archive(["0.5.23"], out)
    names = set(tarfile.open(out).getnames())
    assert "sglang/0.5.23/sglang/srt/lora/lora_manager.py" in names
    assert "sglang/0.5.23/sglang/test/parallel_groups.py" in names  # e3 imports SGLang's test fixture
    assert "sglang/deps/safetensors_py/__init__.py" in names
    assert not [n for n in names if "multimodal_gen" in n or "/benchmark/" in n or "hf_xet" in n], names
    assert not list(out.parent.glob("*.part"))


def test_a_failed_run_leaves_neither_a_truncated_archive_nor_its_part_file(tmp_path, monkeypatch):
    site, deps = _tree(tmp_path)
    monkeypatch.setattr(gpu_tree, "site_dirs", lambda v: (site, deps))

    def no_wheel(tar, compiled, tmp):
        raise SystemExit("gpu_tree: no CPython 3.12 wheel of x==1")

    monkeypatch.setattr(gpu_tree, "_add_wheels", no_wheel)
    out = tmp_path / "sglang.tar.xz"
    with pytest.raises(SystemExit, match="no CPython 3.12 wheel"):
        gpu_tree.archive(["0.5.23"], out)
    assert not out.exists() and not list(tmp_path.glob("*.part"))
