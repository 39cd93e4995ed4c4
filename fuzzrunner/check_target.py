"""``fuzzrunner check-target SPEC``: can fuzzrunner test this target, and where?

Builds the target, draws one small case from its strategy, runs it in a child process on the CPU
(Triton's interpreter, the shadow oracle: what the CPU pre-check and triage of a GPU campaign
do) and, where there is one, on the GPU; then says whether the target honours ``ctx.device``,
whether CPU pre-check and triage can run, which buffers are tracked (registered, and
``torch.empty`` tracked automatically), its declared features, and what to fix. The child is
``python -m fuzzrunner.check_target --child DEVICE SPEC`` with the case on stdin; it prints one
JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .text import describe

CHILD_TIMEOUT_S = 300.0


# -- the child: one case on one device --------------------------------------------------------------

def _child(device: str, spec: str) -> int:
    from . import _env, names, tracking
    _env.configure()
    from .case import Case
    from .execute import run_case
    from .oracles.shadow import memory
    from .target import load_target
    registered: list = []
    auto: list = []
    original = memory.ShadowMemory.add

    def add(self, start, nbytes, name, **kw):  # see what the shadow oracle tracks on its own
        if kw.get("auto"):
            auto.append(name)
        return original(self, start, nbytes, name, **kw)

    class Seen(tracking.Watcher):
        def on_track(self, tensor, name, per_step, initialized) -> None:
            registered.append({"name": name, "per_step": bool(per_step), "device": str(tensor.device)})

    memory.ShadowMemory.add = add  # type: ignore[method-assign]
    from .errors import TargetError
    case = Case.from_dict(json.loads(sys.stdin.read()))
    t0 = time.perf_counter()
    try:
        with tracking.watch(Seen()):
            violations = run_case(case, load_target(spec), device=device,
                                  oracles=names.precheck_oracles() if device == "cpu" else None)
    except TargetError as e:  # its run broke its contract (returned a coroutine): said as it is
        print(json.dumps({"error": str(e), "target_error": True}))
        return 0
    print(json.dumps({"seconds": time.perf_counter() - t0, "violations": [v.to_dict() for v in violations],
                      "registered": registered, "auto": sorted(set(auto))}, default=str))
    return 0


def _run_child(device: str, spec: str, case) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from .devices import ENV as DEVICE_ENV
    env = dict(os.environ, **{DEVICE_ENV: device},
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    try:
        p = subprocess.run([sys.executable, "-m", "fuzzrunner.check_target", "--child", device, spec],
                           input=json.dumps(case.to_dict()), env=env, capture_output=True, text=True,
                           timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"the case did not finish within {CHILD_TIMEOUT_S:.0f} s"}
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " | ".join(p.stderr.strip().splitlines()[-3:])
        return {"error": f"the child process ended with exit status {p.returncode}: {tail[-400:]}"}


# -- the parent: the verdicts ------------------------------------------------------------------------

def _one_case(target):
    from hypothesis import HealthCheck, find, settings

    from .engine.database import hypothesis_storage
    from .target import DrawError, draw_error
    strategy = target.strategy((), max_ops=4)  # checked: what it draws is a Case of plain JSON
    with hypothesis_storage(None):  # Hypothesis' caches in a temporary folder, not ./.hypothesis
        try:
            return find(strategy, lambda case: True,  # derandomized: no "reproduce with @seed" after an error
                        settings=settings(database=None, max_examples=50, derandomize=True,
                                          suppress_health_check=list(HealthCheck)))
        except DrawError as e:  # a BaseException (Hypothesis must not shrink it): the target's error
            raise draw_error(target.name, e) from None


def _device_lines(device: str, run: dict) -> tuple[list[str], str | None]:
    """Lines for one device's run, and why it could not run the case (None if it could)."""
    from .engine.cpu_check import classify
    from .finding import group, limitations
    from .violation import Violation
    if "error" in run:
        return [f"{device:<5} could not run the case: {run['error']}"], run["error"]
    vs = [Violation.from_dict(d) for d in run["violations"]]
    outside = classify(vs).outside
    if outside:
        return [f"{device:<5} could not run the case: {outside}"], outside
    lines = [f"{device:<5} ran the case in {run['seconds']:.2f} s: "
             + (f"{len(group(vs))} root cause(s) shown" if group(vs) else "no violation")]
    lines += [f"        {head.signature.short()}: {head.message[:200]}" for head, _ in group(vs)[:3]]
    lines += [f"        tool limitation: {v.message[:300]}" for v in limitations(vs)[:3]]
    return lines, None


def check_target(spec: str) -> tuple[list[str], int]:
    """(lines to print, exit code): 0 all works, 1 something limits what fuzzrunner can do (a fix
    is said), 2 the target cannot even be loaded or cannot make a case."""
    from . import _env
    from .errors import TargetError
    from .target import load_target
    target = load_target(spec)
    space = list(target.feature_space)
    features = (f"{len(space)} declared ({', '.join(space[:6])}{', ...' if len(space) > 6 else ''})" if space
                else "none declared: reports cannot say what the campaign never reached")
    schema = "declared: case files are checked" if target.schema else "none: case files run unchecked"
    lines = [f"target       {target.name}: {target.description}",
             f"faults       {', '.join(target.faults) or 'none'}", f"schema       {schema}", f"features     {features}"]
    try:
        case = _one_case(target)
    except Exception as e:  # the target's strategy: its own error, said in one line
        said = str(e) if isinstance(e, TargetError) else f"the target's strategy failed: {describe(e)}"
        return lines + [f"case         {said}"[:400],
                        "verdict      cannot test: the target makes no case (fix its cases())"], 2
    lines.append(f"case         {len(case.ops)} op(s): {', '.join(str(op.get('op', '?')) for op in case.ops)}")
    cpu = _run_child("cpu", spec, case)
    if cpu.get("target_error"):  # no device would run it: the target's own error, and its fix, in one line
        return lines + [f"run          {cpu['error']}", "verdict      cannot test: fix the target's run (above)"], 2
    more, cpu_problem = _device_lines("cpu", cpu)
    lines += more
    fixes = []
    if cpu_problem:
        lines.append("precheck     CPU pre-check and CPU triage of a GPU campaign: cannot run (they are turned off, "
                     "with a warning)")
        fixes.append("build every tensor of the runner on ctx.device (the device fuzzrunner passes to run), so "
                     "that each case can run on the CPU too")
    else:
        lines.append("precheck     CPU pre-check and CPU triage of a GPU campaign: can run")
        lines += _tracked_lines(cpu, fixes)
    gpu = _env.cuda_present()
    gpu_problem = None
    if gpu:
        more, gpu_problem = _device_lines("cuda", _run_child("cuda", spec, case))
        lines += more
        if gpu_problem:
            fixes.append(f"make the target run on the GPU: {gpu_problem}")
    else:
        lines.append("cuda  not checked: no CUDA device here")
    lines += [f"fix          {f}" for f in fixes]
    return lines + [_verdict(cpu_problem, gpu, gpu_problem, fixes)], 1 if fixes else 0


def _verdict(cpu_problem, gpu: bool, gpu_problem, fixes: list) -> str:
    if not fixes:
        return "verdict      ok: fuzzrunner can test this target here"
    if cpu_problem and (not gpu or gpu_problem):
        return ("verdict      cannot test here: the target runs on neither device of this machine"
                + ("" if gpu else " (no GPU here)"))
    if cpu_problem:
        return "verdict      GPU campaigns only, without CPU pre-check and triage, until the fix above"
    return "verdict      can test, with less power until the fix above"


def _tracked_lines(run: dict, fixes: list) -> list[str]:
    reg = run.get("registered", [])
    per_step = sorted({r["name"] for r in reg if r["per_step"]})
    other = sorted({r["name"] for r in reg if not r["per_step"]})
    lines = [f"tracked      per step (stale reads seen): {', '.join(per_step) or 'none'}",
             f"tracked      registered: {', '.join(other) or 'none'}",
             "tracked      torch.empty tracked automatically (never-written reads only): "
             + (", ".join(run.get("auto", [])[:4]) + (", ..." if len(run.get("auto", [])) > 4 else "") or "none")]
    if not per_step:
        fixes.append("register the per-step metadata buffers with fuzzrunner.track(buf, name, per_step=True): "
                     "without it a dummy run reading the previous step's mapping (a stale read) is not seen")
    return lines


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"] and len(argv) == 3:
        return _child(argv[1], argv[2])
    print("usage: python -m fuzzrunner.check_target --child DEVICE SPEC < case.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
