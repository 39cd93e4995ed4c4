"""Run one case of a target under a set of oracles; the one place that does so.

Used by the engine's workers, by ``fuzzrunner.replay`` (repro scripts) and by tests. A
target's ``run(case, ctx)`` wraps each op in ``ctx.op(i, op)`` and reports results with
``ctx.compare`` (numeric oracle) and ``ctx.output``. An oracle with ``passes = 2`` (poison)
makes the case run twice; the second run keeps only that oracle and its guards.
"""

from __future__ import annotations

import numbers
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import FrameType

import torch

from . import _env, names, tracking, triton_compat
from .callbacks import refuse_awaitable
from .case import Case
from .context import Context
from .errors import InvalidCase, TargetError
from .oracles.base import FinishFailed, Oracle, RunRecord, source_location
from .oracles.numeric import Comparison
from .text import describe, json_safe, safe_repr, safe_str, traceback_text, type_name
from .violation import Violation


@dataclass
class OpRecord:
    comparisons: list = field(default_factory=list)
    outputs: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)  # (label, problems, details) of ctx.check


class RunContext:
    """What a target's ``run`` gets: the run's context, the faults, and ways to report results.

    ``ctx.context`` is the run's ``Context`` (device, whether Triton runs in its interpreter, the shadow
    mode, the sanitizer); ``ctx.device`` is ``ctx.context.device``, where the target builds its tensors.
    ``ctx.op(i, op)`` marks op ``i`` (oracles count per-step buffers per op);
    ``ctx.compare(label, actual, expected, dtype)`` checks ``actual`` against a float64
    ``expected``; ``ctx.check(label, problems)`` reports broken properties of the code's own state;
    ``ctx.output(label, tensor)`` keeps a result for the poison comparison;
    ``ctx.track`` / ``ctx.carry_over`` are ``fuzzrunner.track`` / ``carry_over``.
    """

    track = staticmethod(tracking.track)
    carry_over = staticmethod(tracking.carry_over)

    def __init__(self, case: Case, context: Context, oracles: list[Oracle],
                 on_op: Callable[[int, dict], None] | None = None, stop_early: bool = False):
        self.case, self.context, self.faults = case, context, tuple(case.faults)
        self._oracles, self._on_op, self._stop_early = oracles, on_op, stop_early
        self.outputs: dict = {}
        self._record: OpRecord | None = None
        self.op_index: int | None = None
        self._pending: list = []  # (host tensor, device) of outputs still being copied to the host
        self.output_site: tuple[str, int] | None = None  # where the last such output was kept
        self.misuse: TargetError | None = None  # how run broke its contract, even if it caught what was raised

    def refuse_misuse(self, returned) -> None:
        """After ``run`` returned ``returned``: ``_Misused`` if it broke its contract (a generator, coroutine or
        awaitable returned: nothing of the case ran; ``ctx.op`` misused, even where ``run`` caught the error)."""
        try:
            refuse_awaitable(self.case.target, "run", returned)
        except TargetError as e:
            self.misuse = e
        if self.misuse is not None:
            raise _Misused(self.misuse)

    @property
    def device(self) -> str:
        return self.context.device

    @contextmanager
    def op(self, index: int, op: dict):
        if not isinstance(index, numbers.Integral) or isinstance(index, bool) or not isinstance(op, dict):
            self.misuse = TargetError(f"target {self.case.target!r}: its run called ctx.op({safe_repr(index, 60)}, "
                                      f"{safe_repr(op, 60)}): ctx.op takes the op's index (an int) and its dict "
                                      f"from case.ops (`for i, op in enumerate(case.ops): with ctx.op(i, op): ...`).")
            raise _Misused(self.misuse)
        index = int(index)  # a numpy integer too: it travels as JSON
        self.op_index = index
        if self._on_op:
            self._on_op(index, op)
        for o in self._oracles:
            o.begin_op(index, op)
        self._record = rec = OpRecord()
        yield rec
        self._record = None
        for o in self._oracles:
            o.observe(index, op, rec)
        for label, t in rec.outputs.items():
            self.outputs[(index, op.get("op", ""), label)] = t
        for o in self._oracles:
            o.end_op()
        if self._stop_early and any(o.seen() for o in self._oracles):
            raise _StopCase(index)

    def _current(self) -> OpRecord:
        if self._record is None:
            raise InvalidCase("ctx.compare and ctx.output must be called inside `with ctx.op(i, op):`.")
        return self._record

    def compare(self, label: str, actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
        """Check ``actual`` against the float64 ``expected`` (numeric oracle), and keep it as an output."""
        label = _label(label)
        self._current().comparisons.append(Comparison(label, actual.detach(), expected, dtype))
        self.output(label, actual)

    def check(self, label: str, problems, details: dict | None = None) -> None:
        """Report what the target found broken in the code under test's state (state oracle): each of
        ``problems`` (one line each; none: the property holds) is a ``state-violation`` of this op."""
        problems = [problems] if isinstance(problems, str) else list(problems)  # one line is one problem
        details = json_safe(details) if isinstance(details, dict) else {} if details is None else \
            {"details": safe_repr(details, 300)}
        self._current().checks.append((_label(label), [safe_str(p, 1000) for p in problems], details))

    def output(self, label: str, tensor: torch.Tensor) -> None:
        label = _label(label)
        with tracking.quiet():
            t = tensor.detach()
            if t.device.type == "cuda":  # to pinned host memory, stream-ordered; the host waits once, at the
                host = t.to("cpu", non_blocking=True)  # case's end (settle): on a GPU shared by several
                self._pending.append((host, t.device))  # processes each wait costs a switch of contexts
                self._current().outputs[label] = host
                self.output_site = _caller_outside_this_file()
            else:
                self._current().outputs[label] = t.clone().cpu()

    def settle(self) -> None:
        """Wait for the outputs' copies to the host. Inside the case's run, so that a device fault that
        surfaces here is this case's crash (at its last op), never the next case's."""
        for device in {d for _, d in self._pending}:
            torch.cuda.synchronize(device)
        self._pending.clear()

    def drop_unsettled(self) -> None:
        """After a failed run: outputs whose copies cannot be known to have landed (the device is broken)
        are dropped, so that no comparison reads host memory the copy never wrote."""
        if not self._pending:
            return
        pending = [h for h, _ in self._pending]
        try:
            self.settle()
        except Exception:  # noqa: BLE001 - the run's own error is already recorded
            self._pending.clear()
            self.outputs = {k: v for k, v in self.outputs.items() if not any(v is h for h in pending)}


def _label(label) -> str:
    """A result's label, quoted in violations: a string (a target may pass anything)."""
    return label if isinstance(label, str) else safe_str(label, 200)


def _caller_outside_this_file() -> tuple[str, int] | None:
    """The file and line of the innermost caller outside execute.py (the target's ``ctx.output`` or
    ``ctx.compare``)."""
    f: FrameType | None = sys._getframe(1)
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back
    return (f.f_code.co_filename, f.f_lineno) if f is not None else None


class _Misused(Exception):
    """The target broke the contract of ``run`` (``ctx.misuse``): carried past the handlers that make a
    crash of the target's exceptions, raised again as the ``TargetError`` it holds."""

    def __init__(self, error: TargetError):
        super().__init__(str(error))
        self.error = error


class _StopCase(Exception):
    """Raised after the first op that showed a violation, when the run was asked to stop there."""


class _AtSettle(Exception):
    """A device error raised by ``RunContext.settle`` (the case's end), carried to the crash report."""

    def __init__(self, error: Exception):
        super().__init__(describe(error))
        self.error = error


class _OracleFailed(Exception):
    """An oracle's ``start`` raised: the tool's failure, not the runner's, carried to the report."""

    def __init__(self, oracle: Oracle, error: Exception):
        super().__init__(describe(error))
        self.oracle, self.error = oracle, error


def _oracle_failed(oracle: Oracle, stage: str, exc: Exception, op_index: int | None = None) -> Violation:
    """An oracle's ``start`` or ``finish`` raised. A device fault surfacing there (a kernel's, reported at the
    next wait for the GPU, an oracle's read-back included) is the code under test's: a crash. Anything else
    is the tool's: a tool limitation naming the oracle, never a finding of the runner."""
    if _device_fault(exc):
        return crash_violation(exc, op_index)
    v = _versions()
    text = describe(exc)
    return Violation("fuzzrunner", "tool-limitation", oracle.name, "", "",
                     f"the {oracle.name} oracle failed at its {stage}: {text}. A failure of the oracle (the tool, or "
                     f"a plug-in oracle), not a bug of the code under test"
                     f"{' (the case did not run)' if stage == 'start' else ''}; its versions are in the details.",
                     {"op_index": op_index, "who": f"fuzzrunner's {oracle.name} oracle", "stage": stage, **v,
                      "traceback": traceback_text(exc)})


_OWN = os.path.dirname(os.path.abspath(__file__))
# Frames that sit between a runner and torch (our hooks): never blamed for a crash.
_NOT_BLAMED = (os.sep + "torch" + os.sep, os.sep + "triton" + os.sep, os.path.join(_OWN, "execute.py"),
               os.path.join(_OWN, "oracles") + os.sep, os.path.join(_OWN, "tracking.py"))


_INTERPRETER = (os.sep + os.path.join("triton", "runtime", "interpreter.py"), os.sep + "numpy" + os.sep)
_TOOL = (os.path.join(_OWN, "oracles") + os.sep, os.path.join(_OWN, "tracking.py"))
# a hook's call of the op it wraps: what that op raises is the runner's (an index out of range), not ours
_FORWARDS = re.compile(r"\b(func|orig|original)\(")


def _versions() -> dict:
    import numpy
    try:
        import triton
        version = triton.__version__
    except ImportError:
        version = "absent"
    return {"triton": version, "numpy": numpy.__version__, "torch": torch.__version__.split("+")[0]}


def _device_fault(exc: BaseException) -> bool:
    """A CUDA error: a kernel's fault, which surfaces at the next wait for the GPU whoever waits (an
    oracle's read of a result included), so never the tool's own failure."""
    text = safe_str(exc)
    return type(exc).__name__ == "AcceleratorError" or text.startswith("CUDA error") or "device-side assert" in text


def _limitation(exc: BaseException, op_index: int | None) -> Violation | None:
    """The tool's own failure, if ``exc`` is one: an exception of Triton's interpreter machinery (not of
    the kernel's semantics: an assert, or Triton's language checks, are the kernel's), or one
    raised inside fuzzrunner's oracles. None for anything the runner or its kernels raised."""
    cause, frames = exc, list(traceback.extract_tb(exc.__traceback__))
    while type(cause).__name__ == "InterpreterError" and cause.__cause__ is not None:  # nested launches wrap twice
        cause = cause.__cause__
        frames += traceback.extract_tb(cause.__traceback__)
    if not frames or isinstance(cause, AssertionError) or _device_fault(cause):
        return None
    inner = frames[-1].filename
    if cause is not exc and any(s in inner for s in _INTERPRETER):
        who = "Triton's interpreter"
    elif any(s in inner for s in _TOOL) and not _FORWARDS.search(frames[-1].line or ""):
        who = "fuzzrunner's oracle code"
    else:
        return None
    # the kernel's own line: the innermost frame outside Triton, numpy and fuzzrunner
    own = [f for f in frames if not any(s in f.filename for s in (*_NOT_BLAMED, os.sep + "numpy" + os.sep))]
    at = source_location(own[-1].filename, own[-1].lineno or 0) if own else "?"
    kernel = own[-1].name if own else ""
    v = _versions()
    text = describe(cause)
    return Violation("fuzzrunner", "tool-limitation", kernel, at, "",
                     f"{who} failed in {kernel or '?'} at {at} (Triton {v['triton']}, numpy {v['numpy']}, torch "
                     f"{v['torch']}): {text}. This is a limit of the tool on this installation, not a bug of "
                     f"the code under test; `fuzzrunner doctor` says what this interpreter can run.",
                     {"op_index": op_index, "who": who, **v, "traceback": traceback_text(exc)})


def crash_violation(exc: BaseException, op_index: int | None, own_code: tuple = ()) -> Violation:
    """A Python exception escaping the target: blamed on the innermost frame of non-library code. Raised
    by a line of the target's own adapter code (``Target.own_code``), it is a target error (tool
    ``target``): a bug of the harness around the code under test, not of that code. A failure of the
    tool itself (``_limitation``) is a ``tool-limitation``, never a crash finding."""
    limit = _limitation(exc, op_index)
    if limit is not None:
        return limit
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if not any(s in f.filename for s in _NOT_BLAMED)] or frames
    where = source_location(mine[-1].filename, mine[-1].lineno or 0) if mine else "?"
    own = _raised_by(exc, frames, own_code)
    when = "before the first op" if op_index is None else f"op {op_index}"
    return Violation("target" if own else "python", "crash", type_name(exc), where, "",
                     f"{'target error: ' if own else ''}{when}: {describe(exc)}",
                     {"op_index": op_index, "traceback": traceback_text(exc)})


def _raised_by(exc: BaseException, frames, own_code: tuple) -> bool:
    """Whether the innermost frame, the line that raised, is in ``own_code`` (files or folders). A
    device error surfacing there (CUDA reports a kernel's fault at the next synchronising call,
    whoever makes it) is the code under test's, never the target's."""
    if not own_code or not frames:
        return False
    text = safe_str(exc)
    if type(exc).__name__ == "AcceleratorError" or "CUDA" in text or "device-side" in text:
        return False
    raised = os.path.abspath(frames[-1].filename)
    return any(raised == p or raised.startswith(p.rstrip(os.sep) + os.sep) for p in map(os.path.abspath, own_code))


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _stop_signals():
    """Yield a list that gets the number of each SIGINT / SIGTERM delivered meanwhile.

    A ``KeyboardInterrupt`` raised while no such signal came is the target's own (``raise
    KeyboardInterrupt`` in its ``run``): a finding, not a reason to stop. One that a delivered
    signal raised is the user's Ctrl-C (or a SIGTERM turned into one): it must still stop.
    Python delivers signals to the main thread only: elsewhere no signal can raise one."""
    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return
    previous = {s: signal.getsignal(s) for s in _STOP_SIGNALS}

    def handler(signum, frame):
        seen.append(signum)
        before = previous[signum]
        if callable(before):
            before(signum, frame)
        elif before in (signal.SIG_DFL, None):  # the default action (a worker's SIGTERM ends it): as before
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    for s in _STOP_SIGNALS:
        signal.signal(s, handler)
    try:
        yield seen
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def _start(oracles: list[Oracle], started: list[Oracle]) -> None:
    for o in oracles:
        started.append(o)  # before its start: one that raises halfway is finished too, its hooks undone
        try:
            o.start()
        except Exception as exc:
            raise _OracleFailed(o, exc) from exc


def _finish(started: list[Oracle], record: RunRecord, op_index: int | None) -> None:
    """Each started oracle finished, in reverse order, whatever another's ``finish`` raised (an exception
    is named, and what the oracle had found kept; a ``BaseException`` is raised again once all are done)."""
    stop: BaseException | None = None
    for o in reversed(started):
        try:
            record.violations[:0] = o.finish()
        except FinishFailed as failed:
            record.violations[:0] = [_oracle_failed(o, "finish", failed.error, op_index), *failed.violations]
        except Exception as exc:  # noqa: BLE001  (named; the other oracles are still finished)
            record.violations.insert(0, _oracle_failed(o, "finish", exc, op_index))
        except BaseException as exc:  # noqa: B036  (Ctrl-C: the others finished first, their hooks undone)
            stop = stop or exc
    if stop is not None:
        raise stop


def _one_run(case: Case, target, context: Context, oracles: list[Oracle], on_op,
             stop_early: bool = False) -> RunRecord:
    with _stop_signals() as stop_signals:
        return _run_target(case, target, context, oracles, on_op, stop_early, stop_signals)


def _run_target(case: Case, target, context: Context, oracles: list[Oracle], on_op, stop_early: bool,
                stop_signals: list[int]) -> RunRecord:
    ctx = RunContext(case, context, oracles, on_op, stop_early)
    started: list[Oracle] = []
    record = RunRecord()
    try:
        _start(oracles, started)
        try:
            returned = target.run(case, ctx)
        except _StopCase:
            returned = None
        ctx.refuse_misuse(returned)
        try:
            ctx.settle()
        except Exception as exc:  # a device fault surfaced at the case's end: named where the last output was kept
            raise _AtSettle(exc) from exc
    except InvalidCase:
        raise
    except _Misused as misused:  # the target's own error (run is async, ctx.op misused): nothing ran as it should
        raise misused.error from None
    except _OracleFailed as failed:  # the tool's failure, not the case's: no error to compare between runs
        record.ran = False
        record.violations.append(_oracle_failed(failed.oracle, "start", failed.error))
    except _AtSettle as at:
        fault = at.error
        record.error = describe(fault, 2000)
        v = crash_violation(fault, ctx.op_index, getattr(target, "own_code", ()))
        if ctx.output_site is not None:
            v = replace(v, location=source_location(*ctx.output_site), site="")
        record.violations.append(v)
    except SystemExit as exc:  # a target must not end the worker: that would read as a crash of the runner
        record.error = f"SystemExit: {exc.code}"
        record.violations.append(crash_violation(exc, ctx.op_index, getattr(target, "own_code", ())))
    except Exception as exc:  # the target (or the runner under test) failed: that is a finding
        record.error = describe(exc, 2000)
        record.violations.append(crash_violation(exc, ctx.op_index, getattr(target, "own_code", ())))
    except BaseException as exc:  # KeyboardInterrupt, GeneratorExit, a BaseException of its own
        if isinstance(exc, KeyboardInterrupt) and stop_signals:
            raise  # a real Ctrl-C / SIGTERM: stop
        record.error = describe(exc, 2000)
        record.violations.append(crash_violation(exc, ctx.op_index, getattr(target, "own_code", ())))
    finally:
        _finish(started, record, ctx.op_index)
    ctx.drop_unsettled()
    record.outputs = ctx.outputs
    return record


class _Timed:
    """An oracle whose own calls are timed into ``times[f"oracle:{name}"]`` (seconds, ``perf_counter``): the
    engine's per-stage times (``engine/stages.py``). Anything else is the oracle's own attribute."""

    _TIMED = frozenset({"start", "begin_op", "observe", "end_op", "finish", "begin_pass", "verdict"})

    def __init__(self, oracle: Oracle, times: dict):
        self._oracle, self._times, self._key = oracle, times, f"oracle:{oracle.name}"

    def __getattr__(self, name: str):
        attr = getattr(self._oracle, name)
        if name not in _Timed._TIMED:
            return attr

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self._times[self._key] = self._times.get(self._key, 0.0) + time.perf_counter() - t0
        return timed


def _made(specs, context: Context, times: dict | None) -> list:
    """The oracles of ``specs`` made for ``context``; with ``times``, timed (making them included)."""
    if times is None:
        return [s.make(context) for s in specs]
    out = []
    for s in specs:
        t0 = time.perf_counter()
        o = s.make(context)
        times[f"oracle:{o.name}"] = times.get(f"oracle:{o.name}", 0.0) + time.perf_counter() - t0
        out.append(_Timed(o, times))
    return out


def _oracle_s(times: dict | None) -> float:
    return sum(v for k, v in times.items() if k.startswith("oracle:")) if times else 0.0


def run_case(case: Case, target, *, context: Context | None = None, oracles: Iterable[str] | None = None,
             device: str | None = None, sanitizer: str | None = None,
             on_op: Callable[[int, dict], None] | None = None, on_partial: Callable[[list], None] | None = None,
             stop_early: bool = False, times: dict | None = None) -> list[Violation]:
    """Run ``case`` under the oracles (the device's defaults unless named); return every violation.

    ``context``: the run's (``Context.resolve``: a worker's comes from its start-up, ``fuzzrunner.replay``
    resolves its own); without one, ``device`` and ``sanitizer`` are a shorthand for a context of this
    process on that device (its own by default), the shadow mode the device's default (tests, scripts).
    ``on_partial`` gets the first run's violations before a second run (poison) starts, so a
    crash there loses nothing already found. ``stop_early``: end each run after the first op
    that showed a violation (what a GPU would crash on first; the CPU pre-check needs no more).
    ``times``: a dict that gets the seconds of each oracle's own calls (``oracle:NAME``) and of a second
    run (``second-run``, its oracles' calls excluded): the engine's per-stage times (``engine/stages.py``).
    """
    if context is None:
        context = Context.of(device or _env.device_type(), interpreted=_env.interpreted(),
                             sanitizer=sanitizer or "none")
    triton_compat.apply()  # before the first interpreted kernel (Triton 3.6 + numpy >= 2.4)
    chosen = names.effective_oracles(oracles, context.device, context.sanitizer)
    specs = sorted((names.ORACLES[n] for n in chosen), key=lambda s: not s.needs_second_run)
    made = _made(specs, context, times)  # two-pass oracles first: their dispatch modes sit outermost
    first = _one_run(case, target, context, made, on_op, stop_early)
    twice = [o for o in made if o.passes > 1]
    if not twice or not first.ran:
        return first.violations
    if on_partial:
        on_partial(first.violations)
    guards = {g for s in specs if s.needs_second_run for g in s.guard if g in chosen}
    for o in twice:
        o.begin_pass(1)
    t0, oracle_s = time.perf_counter(), _oracle_s(times)
    second = _one_run(case, target, context, twice + _made([names.ORACLES[g] for g in sorted(guards)], context, times),
                      on_op, stop_early)
    if times is not None:
        times["second-run"] = time.perf_counter() - t0 - (_oracle_s(times) - oracle_s)
    if not second.ran:  # one run only: no comparison, the failure named
        return first.violations + second.violations
    return first.violations + [v for o in twice for v in o.verdict([first, second])]
