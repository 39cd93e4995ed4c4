"""Hypothesis' scan for literals stays off the code under test's tree (engine/local_constants.py): a vendored
engine's thousands of modules were parsed before vllm_lora's first case (43 s of a 123 s CPU campaign)."""

import importlib.util
import sys

from hypothesis.internal.conjecture import providers

from fuzzrunner.engine.local_constants import skip_tree


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_engine_tree_and_its_deps_are_not_parsed_but_other_local_modules_are(tmp_path):
    for folder, value in (("site", 918_273_645), ("deps", 918_273_646), ("mine", 918_273_647)):
        (tmp_path / "eng" / folder).mkdir(parents=True)
        (tmp_path / "eng" / folder / f"m_{folder}.py").write_text(f"MAGIC = {value}\n")
    (tmp_path / "own.py").write_text("MAGIC = 918273648\n")
    names = ["fr_lc_site", "fr_lc_deps", "fr_lc_own"]
    try:
        _load(tmp_path / "eng" / "site" / "m_site.py", names[0])
        _load(tmp_path / "eng" / "deps" / "m_deps.py", names[1])
        _load(tmp_path / "own.py", names[2])
        assert skip_tree({"engine": "eng", "tree": str(tmp_path / "eng" / "site")}) == 2
        assert skip_tree({"tree": str(tmp_path / "eng" / "site")}) == 0  # once
        assert skip_tree({}) == 0 and skip_tree({"tree": None}) == 0
        found = providers._get_local_constants().integers
        assert 918_273_648 in found  # a local module outside the tree: scanned as before
        assert not {918_273_645, 918_273_646} & set(found)
    finally:
        for n in names:
            sys.modules.pop(n, None)
