"""How a target is named is read in one place (``TargetSpec.parse``): the loader, the CLI, the pytest plugin
and Ray's shipping agree on which specs name a file. They spelt it four ways (``.py`` only; ``.py`` or
``os.sep``; ``.py`` or ``/``), so a ``dir/module:OBJ`` spec was a file to the loader and a module to Ray."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from fuzzrunner.target_spec import TargetSpec

# spec -> (module, obj, is_name, is_file)
SPECS = {
    "reference_runner": ("", "reference_runner", True, False),
    "fuzzrunner.targets.reference_runner:TARGET": ("fuzzrunner.targets.reference_runner", "TARGET", False, False),
    "runner.py:TARGET": ("runner.py", "TARGET", False, True),
    "tests/my_runner.py:make": ("tests/my_runner.py", "make", False, True),
    "tests/my_runner:TARGET": ("tests/my_runner", "TARGET", False, True),  # a path, though not a .py
    "/abs/dir/runner.py:TARGET": ("/abs/dir/runner.py", "TARGET", False, True),
    "C:/proj/runner.py:TARGET": ("C:/proj/runner.py", "TARGET", False, True),  # split at the last ':'
}


@pytest.mark.parametrize("spec", SPECS)
def test_parse(spec):
    parsed = TargetSpec.parse(spec)
    assert (parsed.module, parsed.obj, parsed.is_name, parsed.is_file) == SPECS[spec]
    assert str(parsed) == parsed.text == spec
    assert parsed.file == (parsed.module if parsed.is_file else None)


def test_absolute_makes_only_a_files_path_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert TargetSpec.parse("sub/r.py:T").absolute() == f"{tmp_path}/sub/r.py:T"
    assert TargetSpec.parse("r.py:T").absolute("/base") == "/base/r.py:T"
    assert TargetSpec.parse("/x/r.py:T").absolute("/base") == "/x/r.py:T"
    for spec in ("reference_runner", "pkg.mod:T"):
        assert TargetSpec.parse(spec).absolute("/base") == spec


@pytest.mark.parametrize(("spec", "is_file"), [("my_runner", False), ("my_pkg.runner:TARGET", False),
                                               ("runner.py:TARGET", True), ("tests/my_runner.py:make", True),
                                               ("tests/my_runner:TARGET", True)])
def test_every_reader_agrees_which_specs_name_a_file(spec, is_file, tmp_path, monkeypatch):
    """The loader (a file exec'd from its path, a module imported by name), Ray's shipping (a file travels
    as its folder), the plugin's corpus items (a finding's own file while it exists) and its marker specs (a
    file made absolute against the test's folder). Before, ``tests/my_runner:TARGET`` was a file to the
    loader and the CLI, a module to Ray and to the corpus items."""
    from fuzzrunner import target
    from fuzzrunner.engine.ray_shards import packaged
    from fuzzrunner.errors import InvalidArgument
    from fuzzrunner.pytest_plugin import _State
    from fuzzrunner.pytest_runtime import _own_spec
    monkeypatch.chdir(tmp_path)
    parsed = TargetSpec.parse(spec)
    if is_file:
        os.makedirs(os.path.dirname(parsed.module) or ".", exist_ok=True)
        with open(parsed.module, "w") as f:
            f.write("TARGET = make = None\n")
    assert bool(packaged(spec)[1]) == is_file
    assert (_own_spec(SimpleNamespace(target_spec=spec)) == spec) == is_file
    assert (_State._spec_path(None, spec, [tmp_path]) != spec) == is_file  # type: ignore[arg-type]
    if not parsed.is_name:
        how = []
        monkeypatch.setattr(target, "_exec_file", lambda module: how.append("file") or SimpleNamespace())
        monkeypatch.setattr(target, "_import_module", lambda module: how.append("module") or SimpleNamespace())
        with pytest.raises(InvalidArgument):
            target.load_target(spec)
        assert how == ["file" if is_file else "module"]
