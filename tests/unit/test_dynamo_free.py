"""No oracle makes a worker import Dynamo (``oracles/dynamo_free.py``, ``shadow/compiled.py``): its import
costs seconds of every worker's start-up (4 s of 8 on the H200 host). A ``torch.compile`` first called
inside a case still runs its compiled branch with its ops checked."""

import inspect
import os
import subprocess
import sys
import textwrap

import pytest

from fuzzrunner.oracles import dynamo_free
from fuzzrunner.oracles.poison import _FillEmpties
from fuzzrunner.oracles.shadow.gpu.torch_mode import DeviceTorchMode
from fuzzrunner.oracles.shadow.torch_hook import TorchShadowMode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(dynamo_free.HOOKS is None, reason="this torch lacks Dynamo's C hooks: torch wraps "
                                "the modes, and their first op imports Dynamo")


def _fresh(code: str, tmp_path) -> str:
    """``code`` run from a file in a fresh interpreter (nothing imported yet, as in a worker); its output."""
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(code))
    p = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "FUZZRUNNER_DEVICE": "cpu", "PYTHONPATH": ROOT})
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.mark.parametrize("mode", [DeviceTorchMode, TorchShadowMode, _FillEmpties])
def test_torch_does_not_wrap_the_modes_dispatch(mode):
    owner = next(k for k in mode.__mro__ if "__torch_dispatch__" in k.__dict__)  # the class's own, or the base's
    fn = owner.__dict__["__torch_dispatch__"]
    # not torch's wrapper (functools.wraps gives that the mode's name and module, not its code)
    assert inspect.isfunction(fn) and fn.__code__.co_filename == inspect.getfile(owner)


@pytest.mark.slow
def test_a_case_under_any_oracle_imports_no_dynamo(tmp_path):
    out = _fresh("""
        import os, sys
        from fuzzrunner import _env
        _env.configure()
        from fuzzrunner import execute
        from fuzzrunner.case import Case
        from fuzzrunner.context import Context
        from fuzzrunner.target import load_target
        target = load_target("reference_runner")
        ops = [{"op": "add_adapter", "adapter_id": 1, "rank": 4},
               {"op": "step", "requests": [{"adapter_id": 1, "tokens": [1, 2, 3]}]},
               {"op": "capture", "size": 4}, {"op": "replay", "requests": [{"adapter_id": 1, "tokens": [1, 2]}]},
               {"op": "dummy_run", "num_tokens": 2, "kind": "warmup"}]
        case = Case("reference_runner", {"max_loras": 2, "capture_sizes": [1, 2, 4, 8]}, ops, [])
        for shadow, oracles in (("cpu", ["shadow"]), ("device", ["shadow"]), ("cpu", ["poison", "numeric", "invariants"])):
            found = execute.run_case(case, target, oracles=oracles, context=Context.of("cpu", shadow=shadow),
                                     on_op=lambda i, op: None)
            print(shadow, oracles, [v.kind for v in found], "torch._dynamo" in sys.modules)
    """, tmp_path)
    lines = out.strip().splitlines()
    assert len(lines) == 3 and all(line.endswith("[] False") for line in lines), out


@pytest.mark.parametrize("shadow", ["cpu", "device"])
def test_a_compile_first_called_inside_a_case_runs_its_compiled_branch_checked(shadow, tmp_path):
    """Dynamo is imported only inside the case (by ``torch.compile``): the oracle sets its eager stance
    then, so the compiled branch's unwritten read is reported at the user's line, and the stance is the
    user's again after the case."""
    out = _fresh(f"""
        import sys
        from fuzzrunner import _env
        _env.configure()
        import torch
        from fuzzrunner import tracking
        from fuzzrunner.oracles.shadow import ShadowOracle
        from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
        assert "torch._dynamo" not in sys.modules
        o = GpuShadowOracle("cpu") if "{shadow}" == "device" else ShadowOracle(check_triton=False)
        o.start()
        o.begin_op(0, {{"op": "step"}})
        buf = tracking.track(torch.empty(4), "buf", initialized=False)
        buf[:2].fill_(1.0)

        @torch.compile(backend="eager", fullgraph=True)
        def f(b):
            if torch.compiler.is_compiling():
                return b[:3].sum()  # the compiled branch reads the unwritten buf[2]
            return b[:2].sum()

        f(buf)
        o.end_op()
        found = o.finish()
        from torch._dynamo import eval_frame
        print([(v.kind, v.tensor, v.location.split(":")[0]) for v in found], eval_frame._stance.backend)
    """, tmp_path)
    assert out.strip() == "[('uninitialized-read', 'buf', 'prog.py')] None", out


def test_a_dynamo_import_still_running_when_the_case_ends_leaves_the_stance_alone(tmp_path):
    """A thread of the case imports Dynamo (seconds) and the case ends meanwhile: the stance is not set
    after ``uninstall`` (it would stay on the eager backend for every later case of the worker)."""
    out = _fresh("""
        import sys, threading, time
        import torch
        from fuzzrunner.oracles.shadow import compiled
        c = compiled.CompiledRegions()
        c.install()
        t = threading.Thread(target=lambda: __import__("torch._dynamo"))
        t.start()
        while "torch._dynamo" not in sys.modules:  # its body is running
            time.sleep(0.001)
        c.uninstall()
        t.join()
        from torch._dynamo import eval_frame as ef
        print(ef._stance.backend, compiled.visible(), c in sys.meta_path)
    """, tmp_path)
    assert out.strip() == "None False False", out


def test_a_probe_for_dynamo_does_not_use_up_the_watch_for_its_import(tmp_path):
    """``importlib.util.find_spec`` (a library asking whether Dynamo is there) loads nothing: the import
    that comes later still sets the stance."""
    out = _fresh("""
        import importlib.util
        import torch
        from fuzzrunner.oracles.shadow import compiled
        c = compiled.CompiledRegions()
        c.install()
        importlib.util.find_spec("torch._dynamo")
        import torch._dynamo
        print(torch._dynamo.eval_frame._stance.backend, compiled.visible())
        c.uninstall()
        print(torch._dynamo.eval_frame._stance.backend, compiled.visible())
    """, tmp_path)
    assert out.split() == ["eager", "True", "None", "False"], out
