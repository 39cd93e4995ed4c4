"""Each finding records the engine release it was found on (``Target.code_under_test``: engine, release, tree,
patch); its exported repro names it in its header; ``replay`` warns in one line when the release it loads is
another. Before, only the run of a report named the release: a finding file, a repro and ``replay`` did not
(a new user's trial could not tell which SGLang tree a finding was made on)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from fuzzrunner.cli import main
from fuzzrunner.target import release_change

ROOT = Path(__file__).resolve().parents[2]

TARGET = '''
import os
from hypothesis import strategies as st
from fuzzrunner import Case, Target

def run(case, ctx):
    if not os.environ.get("TOY_FIXED"):
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


def test_a_repro_run_on_another_release_says_so_in_one_line_and_keeps_its_verdict(tmp_path):
    """An exported repro names the release it was found on in its header, but ran on another one without a word (a
    new user's trial: an SGLang 0.5.23 finding's repro on 0.5.12). Now it says, on stderr, which release it was found
    on and which this replay loaded, and still runs: exit 1 reproduced, 0 not, as on the release it was found on; the
    same release (in another folder too) says nothing. (Three runs: each is a fresh interpreter importing torch.)"""
    (tmp_path / "toy.py").write_text(TARGET)
    spec = f"{tmp_path / 'toy.py'}:TARGET"
    assert main(["fuzz", "--target", spec, "--max-examples", "3", "--corpus", str(tmp_path / "c"), "--no-shrink"]) == 1
    [repro] = (tmp_path / "c" / "repro" / "toy_engine").glob("*.py")

    def run(**env) -> tuple[int, list[str]]:
        done = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True, timeout=300,
                              env={**{k: v for k, v in os.environ.items() if not k.startswith("TOY_")},
                                   "PYTHONPATH": str(ROOT), **env})
        return done.returncode, [ln for ln in done.stderr.splitlines() if "found on" in ln]

    other = ["warning: it was found on toy 1.0 (/trees/toy/1.0); this replay loaded toy 2.0 (/trees/toy/1.0)"]
    assert run(TOY_TREE="/elsewhere/toy/1.0") == (1, [])  # the same release (in another folder): nothing said
    assert run(TOY_RELEASE="2.0") == (1, other)
    assert run(TOY_RELEASE="2.0", TOY_FIXED="1") == (0, other)
