"""Each finding records the engine release it was found on (``Target.code_under_test``: engine, release, tree,
patch); its exported repro names it in its header; ``replay`` warns in one line when the release it loads is
another. Before, only the run of a report named the release: a finding file, a repro and ``replay`` did not
(a new user's trial could not tell which SGLang tree a finding was made on)."""

import json
import sys

from fuzzrunner.cli import main
from fuzzrunner.target import release_change

TARGET = '''
import os
from hypothesis import strategies as st
from fuzzrunner import Case, Target

def run(case, ctx):
    raise ValueError("the engine's bug")

TARGET = Target("toy_engine", "a toy engine", lambda faults, max_ops=4: st.just(Case("toy_engine", {}, ({"op": "step"},), ())),
                run, code_under_test={"engine": "toy", "release": os.environ.get("TOY_RELEASE", "1.0"),
                                      "tree": os.environ.get("TOY_TREE", "/trees/toy/1.0")})
'''


def test_a_finding_its_repro_and_its_replay_name_the_release_it_was_found_on(tmp_path, monkeypatch, capsys):
    (tmp_path / "toy.py").write_text(TARGET)
    spec = f"{tmp_path / 'toy.py'}:TARGET"
    assert main(["fuzz", "--target", spec, "--max-examples", "3", "--corpus", str(tmp_path / "c"),
                 "--report", str(tmp_path / "r.json"), "--no-shrink"]) == 1
    [path] = (tmp_path / "c" / "findings" / "toy_engine").glob("*.json")
    finding = json.loads(path.read_text())
    release = {"engine": "toy", "release": "1.0", "tree": "/trees/toy/1.0"}
    assert finding["code_under_test"] == release
    [reported] = json.loads((tmp_path / "r.json").read_text())["runs"][0]["findings"]
    assert reported["code_under_test"] == release  # the report's copy too (schema-checked where jsonschema is)
    [repro] = (tmp_path / "c" / "repro" / "toy_engine").glob("*.py")
    assert "# found on: toy 1.0 (/trees/toy/1.0)\n" in repro.read_text()
    capsys.readouterr()

    assert main(["replay", str(path)]) == 1  # the same release: no warning
    assert "warning" not in capsys.readouterr().err
    monkeypatch.setenv("TOY_TREE", "/elsewhere/toy/1.0")  # the same release in another folder: the same code
    monkeypatch.delitem(sys.modules, "fuzzrunner_user_target_toy")  # loaded again, as a new replay process would
    assert main(["replay", str(path)]) == 1
    assert "warning" not in capsys.readouterr().err
    monkeypatch.setenv("TOY_RELEASE", "2.0")
    monkeypatch.delitem(sys.modules, "fuzzrunner_user_target_toy")
    assert main(["replay", str(path)]) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert err == [f"fuzzrunner: warning: {path}: it was found on toy 1.0 (/trees/toy/1.0); this replay loaded "
                   f"toy 2.0 (/elsewhere/toy/1.0)"], err


def test_what_counts_as_another_release():
    one = {"engine": "sglang", "release": "0.5.22", "tree": "/a"}
    assert release_change({}, one) == ""  # recorded nothing: our own code, or a file from before
    assert release_change(one, dict(one, tree="/b")) == ""
    assert release_change(one, dict(one, release="0.5.23")).startswith("it was found on sglang 0.5.22 (/a);")
    assert release_change(one, dict(one, patch="p.patch", patch_sha256="ab")) != ""
    assert release_change(one, {}) == "it was found on sglang 0.5.22 (/a); this replay loaded no code named"
