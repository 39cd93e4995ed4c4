"""A failure of the tool itself (Triton's interpreter machinery, an oracle) is never a finding (issue 22):
a campaign counts it and goes on, ``replay`` and repro scripts say "could not run" (exit 2), never
"reproduced" nor "not reproduced". The target here fails inside a file that sits where Triton's
interpreter does (``triton/runtime/interpreter.py``), as Triton 3.6's did with numpy >= 2.4."""

import json
import subprocess
import sys
import textwrap

from fuzzrunner.case import Case
from fuzzrunner.cli import main
from fuzzrunner.finding import Finding
from fuzzrunner.repro import export_repro
from fuzzrunner.violation import Violation

TARGET = '''
import importlib.util, os
from hypothesis import strategies as st
from fuzzrunner import Case, Target

_spec = importlib.util.spec_from_file_location("interp", os.path.join(os.path.dirname(__file__), "triton",
                                                                      "runtime", "interpreter.py"))
interp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(interp)


class InterpreterError(Exception):
    pass


def kernel(n):
    if n % 2:
        interp.machinery()


def run(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            try:
                kernel(op["n"])
            except TypeError as e:
                raise InterpreterError(repr(e)) from e


def cases(faults=(), *, max_ops=3):
    return st.lists(st.integers(0, 9), min_size=1, max_size=max_ops).map(
        lambda ns: Case("limited", {}, tuple({"op": "k", "n": n} for n in ns), tuple(faults)))


TARGET = Target("limited", "a kernel the interpreter cannot run for odd n", cases, run)
'''


def _target(tmp_path) -> str:
    (tmp_path / "triton" / "runtime").mkdir(parents=True)
    (tmp_path / "triton" / "runtime" / "interpreter.py").write_text(
        "def machinery():\n    raise TypeError('only 0-dimensional arrays can be converted to Python scalars')\n")
    (tmp_path / "limited_target.py").write_text(textwrap.dedent(TARGET))
    return str(tmp_path / "limited_target.py") + ":TARGET"


def test_a_campaign_counts_tool_limitations_and_finds_nothing(tmp_path, capsys):
    spec = _target(tmp_path)
    code = main(["fuzz", "--target", spec, "--max-examples", "15", "--seed", "1", "--corpus", str(tmp_path / "c"),
                 "--report", str(tmp_path / "r.json"), "-q"])
    out = capsys.readouterr()
    assert code == 0, out
    run = json.loads((tmp_path / "r.json").read_text())["runs"][0]
    assert run["findings"] == [] and run["tool_limitations"][0]["count"] >= 1
    assert "Triton's interpreter failed in kernel at limited_target.py:" in run["tool_limitations"][0]["message"]
    assert "tool limitation (" in out.out and "tool limitation:" in out.err  # the summary, and the live warning


def test_replay_and_the_repro_script_say_could_not_run(tmp_path, capsys):
    spec = _target(tmp_path)
    case = Case("limited", {}, ({"op": "k", "n": 3},))
    (tmp_path / "case.json").write_text(case.to_json())
    assert main(["replay", str(tmp_path / "case.json"), "--target", spec]) == 2
    assert "a tool limitation" in capsys.readouterr().err
    v = Violation("python", "crash", "InterpreterError", "limited_target.py:22", "", "op 0: InterpreterError: x",
                  {"op_index": 0})  # as an older fuzzrunner reported it
    script = export_repro(Finding.of(v, [], case, target_spec=spec), tmp_path / "repro.py")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert p.returncode == 2 and "could not run: Triton's interpreter failed" in p.stderr, p.stdout + p.stderr
