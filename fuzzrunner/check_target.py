"""``fuzzrunner check-target SPEC``: can fuzzrunner test this target, and where?

Builds the target, draws one small case from its strategy, runs it in a child process on the CPU
(Triton's interpreter, the shadow oracle: what the CPU pre-check and triage of a GPU campaign
do) and, where there is one, on the GPU; then says whether the target honours ``ctx.device``,
whether CPU pre-check and triage can run, which buffers are tracked (registered, and
``torch.empty`` tracked automatically), its declared features, and what to fix. The child is
``python -m fuzzrunner.check_target --child DEVICE SPEC CASE.json OPS``, the run's context in its start-up
environment (as a worker's: ``engine.protocol.WorkerEnv``); it prints one JSON object, and writes each op it
enters to the file OPS, so that a crash or a hang can be placed.

Each run has a timeout (``timeout_s``: ``--timeout``), and says while it waits that it is still
running. What the case did decides the advice (issue 47: a first case that crashed, hung or
raised ``KeyboardInterrupt`` was told to "build every tensor on ctx.device"): a process crash is
said with its signal, its op and the line faulthandler shows; a hang with its op and the
timeout; an exception before the first op with its type and line; only a device error gets the
``ctx.device`` advice. The child runs in a session of its own: whatever the case forks is ended
with it, also after a timeout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import InvalidArgument
from .text import describe

CHILD_TIMEOUT_S = 120.0  # one small case, from its start; the first compile of a GPU kernel takes seconds
SETUP_TIMEOUT_S = 300.0  # the child's imports and the target's set-up, before the case starts (vLLM: ~10 s)
PROGRESS_S = 10.0        # "still running" every this many seconds
STARTED = "start"        # the child's first line in OPS: the case starts now (its timeout counts from here)


# -- the child: one case on one device --------------------------------------------------------------

def _child(device: str, spec: str, case_file: str, ops_file: str) -> int:
    import faulthandler

    from . import _env, names, tracking
    from .engine import processes
    from .engine.case_threads import CaseThreads
    from .errors import TargetError
    faulthandler.enable(all_threads=True)  # a segfault shows its line on stderr
    processes.become_subreaper()
    _env.configure()
    from .case import Case
    from .engine.protocol import WorkerEnv
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

    with open(ops_file, "a") as ops:
        def on_op(index: int, op: dict) -> None:
            threads.at_op(index)
            ops.write(f"{index} {op.get('op', '?')}\n")
            ops.flush()

        memory.ShadowMemory.add = add  # type: ignore[method-assign]
        with open(case_file) as f:
            case = Case.from_dict(json.load(f))
        target = load_target(spec)
        threads = CaseThreads(lambda case_no, v: None, target.own_code)
        threads.install()
        children = processes.own_children()
        ops.write(f"{STARTED}\n")
        ops.flush()
        t0 = time.perf_counter()
        threads.begin(1)
        try:
            with tracking.watch(Seen()):
                violations = run_case(case, target, context=WorkerEnv.read().context, on_op=on_op,
                                      oracles=names.precheck_oracles() if device == "cpu" else None)
            threads.wait(1, 1.0)  # what its threads raise is the case's (as in a campaign's worker)
            violations += threads.end()
        except TargetError as e:  # its run broke its contract (returned a coroutine): said as it is
            print(json.dumps({"error": str(e), "target_error": True}))
            return 0
        finally:
            processes.end_new_children(children)  # what the case started ends with it
    print(json.dumps({"seconds": time.perf_counter() - t0, "violations": [v.to_dict() for v in violations],
                      "registered": registered, "auto": sorted(set(auto))}, default=str))
    return 0


@dataclass(frozen=True)
class Outcome:
    """How a child's run ended when it gave no result: ``kind`` is ``crash`` or ``hang``."""
    kind: str
    text: str
    fix: str


def _ops(ops_file: str) -> list[str]:
    try:
        with open(ops_file) as f:
            return f.read().splitlines()
    except OSError:
        return []


def _last_op(ops: list[str]) -> str:
    if not ops:
        return " while the target was set up"
    index, _, name = ops[-1].partition(" ")
    return f" in op {index} ({name})" if ops[-1] != STARTED else " before its first op"


_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')
_LIBRARY = tuple(os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib")) + (
    os.path.join(os.path.dirname(os.path.abspath(__file__)), ""), os.sep + "torch" + os.sep, os.sep + "triton" + os.sep)


def _crash_site(stderr: str) -> str:
    """Where the crashing thread was, from faulthandler's dump: " at FILE:LINE in FUNC" of its innermost frame
    outside Python's library, fuzzrunner, torch and Triton (else its innermost)."""
    dump = stderr.split("Fatal Python error", 1)
    if len(dump) < 2:
        return ""
    frames = _FRAME.findall(dump[1].split("Current thread", 1)[-1].split("\n\n", 1)[0])
    if not frames:
        return ""
    path, line, func = next((f for f in frames if not f[0].startswith(_LIBRARY) and not any(s in f[0] for s in
                                                                                             _LIBRARY[2:])), frames[0])
    return f" at {os.path.basename(path)}:{line} in {func}"


def _signal_text(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def _run_child(device: str, spec: str, case, timeout_s: float, say: Callable[[str], None]) -> dict:
    """The child's JSON result, or ``{"outcome": Outcome}`` if it crashed or hung."""
    from . import env_defaults
    from .context import Context
    from .engine.protocol import WorkerEnv
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    context = Context.of(device, shadow=env_defaults.shadow())  # as a campaign's worker on that device runs
    env = WorkerEnv(spec, context).environ(dict(os.environ))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="fuzzrunner-check-") as d:
        case_file, ops_file = os.path.join(d, "case.json"), os.path.join(d, "ops")
        with open(case_file, "w") as f:
            json.dump(case.to_dict(), f)
        with open(os.path.join(d, "out"), "w+") as out, open(os.path.join(d, "err"), "w+") as err:
            p = subprocess.Popen([sys.executable, "-m", "fuzzrunner.check_target", "--child", device, spec, case_file,
                                  ops_file], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 start_new_session=True)  # files, not pipes: a forked child may hold a pipe open
            try:
                code = _wait(p, device, timeout_s, lambda: STARTED in _ops(ops_file), say)
            finally:
                _end_group(p)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        ops = _ops(ops_file)
    where = _last_op(ops)
    if code is None and not ops:
        return {"outcome": Outcome("setup", f"the target's set-up did not finish within {SETUP_TIMEOUT_S:g} s; it was "
                                            f"stopped", "make the target's import and set-up finish (it hangs there)")}
    if code is None:
        return {"outcome": Outcome("hang", f"the case did not finish within {timeout_s:g} s{where}; it was stopped",
                                   f"the case hangs{where}: find what it waits for (if it is only slow here, "
                                   f"give it longer with --timeout SECONDS)")}
    try:
        result = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = None
    if isinstance(result, dict) and "error" in result and not result.get("target_error"):
        return {"outcome": Outcome("setup", f"the target could not be set up in a fresh process: {result['error']}",
                                   f"make the target load in a fresh process with {env_defaults.DEVICE_ENV}={device} "
                                   f"({result['error'][:200]})")}
    if isinstance(result, dict):
        return result
    how, site = _signal_text(code), _crash_site(stderr)
    before_dump = stderr.split("Fatal Python error", 1)[0]  # (the dump itself: site above, module lists)
    tail = " | ".join(line for line in before_dump.strip().splitlines()[-3:] if line.strip())[-300:]
    text = f"the case crashed the process ({how}){where}{site}" + (f"; its output: {tail}" if tail else "")
    return {"outcome": Outcome("crash", text, f"the case crashed the process ({how}){where}{site}: a crash of the "
                                              f"code under test (fuzz the target: it becomes a finding) or of the "
                                              f"target itself; fix it to see what the target tracks")}


def _wait(p: subprocess.Popen, device: str, timeout_s: float, started: Callable[[], bool],
          say: Callable[[str], None]) -> int | None:
    """The child's exit code, or None once its set-up ran past ``SETUP_TIMEOUT_S`` or its case (from ``started``)
    past ``timeout_s``; says every ``PROGRESS_S`` what it is still doing."""
    t0 = time.monotonic()
    case_t0: float | None = None
    said = t0
    while True:
        try:
            return p.wait(timeout=0.25)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if case_t0 is None and started():
            case_t0 = now
        if (case_t0 is None and now - t0 > SETUP_TIMEOUT_S) or (case_t0 is not None and now - case_t0 > timeout_s):
            return None
        if now - said >= PROGRESS_S:
            said = now
            say(f"{device}: still setting the target up after {now - t0:.0f} s" if case_t0 is None else
                f"{device}: still running the case after {now - case_t0:.0f} s (timeout {timeout_s:g} s: --timeout)")


def _end_group(p: subprocess.Popen) -> None:
    """The child and whatever it forked in its session, ended (also after it has exited itself)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


# -- the parent: the verdicts ------------------------------------------------------------------------

def _one_case(target):
    from hypothesis import HealthCheck, find, settings

    from .engine.database import hypothesis_storage
    from .target import DrawError, draw_error
    # checked: what it draws is a Case of plain JSON; one both devices can run (the CPU draws no bfloat16)
    strategy = target.strategy((), 4, device="cpu")
    with hypothesis_storage(None):  # Hypothesis' caches in a temporary folder, not ./.hypothesis
        try:
            return find(strategy, lambda case: True,  # derandomized: no "reproduce with @seed" after an error
                        settings=settings(database=None, max_examples=50, derandomize=True,
                                          suppress_health_check=list(HealthCheck)))
        except DrawError as e:  # a BaseException (Hypothesis must not shrink it): the target's error
            raise draw_error(target.name, e) from None


DEVICE_FIX = ("build every tensor of the runner on ctx.device (the device fuzzrunner passes to run), so that each "
              "case can run on the CPU too")


def _raised_problem(v) -> Outcome | None:
    """An exception of the target's run that stops a CPU run from showing anything, with the advice that fits."""
    from .engine.cpu_check import device_error
    where = f"at {v.location}" + (" before its first op" if v.details.get("op_index") is None else
                                  f" in op {v.details['op_index']}")
    text = v.message.split(": ", 1)[-1] if v.message.startswith(("op ", "before", "target error")) else v.message
    if v.kernel == "KeyboardInterrupt":
        return Outcome("interrupt", f"the target raised KeyboardInterrupt itself {where}",
                       f"the target raises KeyboardInterrupt {where}: fuzzrunner takes it as a crash of the case, "
                       f"never as a stop; raise an ordinary exception there, or none")
    if device_error(v.message):
        return None
    if v.kernel in ("ModuleNotFoundError", "ImportError"):
        return Outcome("imports", f"the target's imports fail {where}: {text}",
                       f"make the target's imports work on this machine ({text})")
    if v.details.get("op_index") is None:
        return Outcome("raised", f"the target's run raised {v.kernel} {where}: {text}",
                       f"fix the target's run: it raised {v.kernel} {where} ({text[:200]})")
    return None


def _device_lines(device: str, run: dict) -> tuple[list[str], Outcome | None]:
    """Lines for one device's run, and what kept it from running the case (None if it ran)."""
    from .engine.cpu_check import classify
    from .finding import group, limitations
    from .names import tool
    from .violation import Violation
    if "outcome" in run:
        return [f"{device:<5} could not run the case: {run['outcome'].text}"], run["outcome"]
    vs = [Violation.from_dict(d) for d in run["violations"]]
    outside = classify(vs).outside
    if outside:
        raised = [v for v in vs if tool(v.tool).raised and v.kind == "crash"]
        problem = _raised_problem(raised[0]) if raised else None
        if problem is None:
            problem = Outcome("device" if "ctx.device" in outside or "device error" in outside else "limitation",
                              outside, DEVICE_FIX if "device" in outside else outside)
        return [f"{device:<5} could not run the case: {problem.text}"], problem
    lines = [f"{device:<5} ran the case in {run['seconds']:.2f} s: "
             + (f"{len(group(vs))} root cause(s) shown" if group(vs) else "no violation")]
    lines += [f"        {head.signature.short()}: {head.message[:200]}" for head, _ in group(vs)[:3]]
    lines += [f"        tool limitation: {v.message[:300]}" for v in limitations(vs)[:3]]
    return lines, None


def _quiet(line: str) -> None:
    return None


def check_timeout(timeout: float | None) -> float:
    """How long the case may run on a device: ``timeout`` (None: ``CHILD_TIMEOUT_S``), a positive number of
    seconds, else ``InvalidArgument``."""
    import math
    value = CHILD_TIMEOUT_S if timeout is None else timeout
    if not (math.isfinite(value) and value > 0):
        raise InvalidArgument(f"--timeout {timeout!r} must be a positive number of seconds: the longest one "
                              f"case may run on a device (e.g. --timeout 300).")
    return value


def check_target(spec: str, timeout_s: float = CHILD_TIMEOUT_S,
                 say: Callable[[str], None] = _quiet) -> tuple[list[str], int]:
    """(lines to print, exit code): 0 all works, 1 something limits what fuzzrunner can do (a fix
    is said), 2 the target cannot even be loaded or cannot make a case. ``timeout_s``: each device's
    run of the case; ``say``: progress, as it happens (the front end prints it on stderr)."""
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
    say("drawing one small case from its strategy")
    try:
        case = _one_case(target)
    except Exception as e:  # the target's strategy: its own error, said in one line
        said = str(e) if isinstance(e, TargetError) else f"the target's strategy failed: {describe(e)}"
        return lines + [f"case         {said}"[:400],
                        "verdict      cannot test: the target makes no case (fix its cases())"], 2
    lines.append(f"case         {len(case.ops)} op(s): {', '.join(str(op.get('op', '?')) for op in case.ops)}")
    say(f"cpu: running the case in a child process (timeout {timeout_s:g} s)")
    cpu = _run_child("cpu", spec, case, timeout_s, say)
    if cpu.get("target_error"):  # no device would run it: the target's own error, and its fix, in one line
        return lines + [f"run          {cpu['error']}", "verdict      cannot test: fix the target's run (above)"], 2
    more, cpu_problem = _device_lines("cpu", cpu)
    lines += more
    fixes: list[str] = []
    if cpu_problem is None:
        lines.append("precheck     CPU pre-check and CPU triage of a GPU campaign: can run")
        lines += _tracked_lines(cpu, fixes)
    elif cpu_problem.kind in ("crash", "hang", "interrupt"):
        lines.append(f"precheck     CPU pre-check and CPU triage of a GPU campaign: cannot tell (the case "
                     f"{_WHAT[cpu_problem.kind]} on the CPU)")
        fixes.append(cpu_problem.fix)
    else:
        lines.append("precheck     CPU pre-check and CPU triage of a GPU campaign: cannot run (they are turned off, "
                     "with a warning)")
        fixes.append(cpu_problem.fix)
    gpu = _env.cuda_present()
    gpu_problem = None
    if gpu:
        say(f"cuda: running the case in a child process (timeout {timeout_s:g} s)")
        more, gpu_problem = _device_lines("cuda", _run_child("cuda", spec, case, timeout_s, say))
        lines += more
        if gpu_problem:
            fixes.append(f"make the target run on the GPU: {gpu_problem.fix}" if gpu_problem.kind == "device"
                         else f"on the GPU: {gpu_problem.fix}")
    else:
        lines.append("cuda  not checked: no CUDA device here")
    lines += [f"fix          {f}" for f in dict.fromkeys(fixes)]
    return lines + [_verdict(cpu_problem, gpu, gpu_problem, fixes)], 1 if fixes else 0


_WHAT = {"crash": "crashed the process", "hang": "hung", "interrupt": "raised KeyboardInterrupt"}


def _verdict(cpu_problem: Outcome | None, gpu: bool, gpu_problem: Outcome | None, fixes: list) -> str:
    if not fixes:
        return "verdict      ok: fuzzrunner can test this target here"
    unclear = next((p for p in (cpu_problem, gpu_problem) if p is not None and p.kind in _WHAT), None)
    if unclear is not None:
        return (f"verdict      cannot tell: the case {_WHAT[unclear.kind]} (above); fix that, then check again "
                f"(a campaign would report it as a finding of the case)")
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
    if argv[:1] == ["--child"] and len(argv) == 5:
        try:
            return _child(*argv[1:])
        except BaseException as e:  # noqa: B036 - outside the case (its set-up): said as such, not as its crash
            print(json.dumps({"error": describe(e, 600)}))
            return 1
    print("usage: python -m fuzzrunner.check_target --child DEVICE SPEC CASE.json OPS", file=sys.stderr)
    return 2


if __name__ == "__main__":
    from .engine.processes import exit_now
    exit_now(main(sys.argv[1:]))  # a thread the target left running must not keep the child (and the check) waiting
