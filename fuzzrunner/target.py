"""Targets: something fuzzable, with the strategy that makes its cases and ``run(case, ctx)``.

Built-in targets live in the repository's top-level ``targets/`` folder and import as
``fuzzrunner.targets``; a user's target is named ``path/to/file.py:OBJ`` or
``package.module:OBJ``, where OBJ is a ``Target`` (or a callable returning one).

The contract: ``cases(faults, *, max_ops)`` returns a Hypothesis strategy of ``Case`` (a ``cases`` that also
takes ``device`` gets the campaign's: ``cpu`` or ``cuda``, to draw what runs there);
``run(case, ctx)`` runs one; ``features(case)`` names what a case exercises (coverage.py);
``schema`` (a JSON Schema of ``{"config": ..., "ops": [...]}``)
rejects malformed cases before any worker sees them, so bad input is never a finding.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .arguments import several
from .callbacks import function_kind, refuse_async, refuse_awaitable, value_kind
from .case import Case
from .errors import HarnessError, InvalidArgument, InvalidCase, TargetError, did_you_mean
from .safe_io import json_files
from .target_spec import TargetSpec
from .text import describe, safe_repr, safe_str, type_name

BUILTIN = {
    "reference_runner": "fuzzrunner.targets.reference_runner:TARGET",
    "lora_kernels": "fuzzrunner.targets.lora_kernels:TARGET",
    "vllm_lora": "fuzzrunner.targets.vllm_lora:TARGET",
    "vllm_engine": "fuzzrunner.targets.vllm_engine:TARGET",
    "sglang_lora": "fuzzrunner.targets.sglang_lora:TARGET",
    "sglang_engine": "fuzzrunner.targets.sglang_engine:TARGET",
}
_SHIPPED = dict(BUILTIN)  # fuzzrunner's own: a plug-in's target takes another name


def register_target(name: str, spec: str) -> None:
    """Name a target (a plug-in's): ``--target NAME``, ``fuzzrunner targets``, the nightly, corpus items and
    repro scripts find it as they find a built-in one. ``spec``: ``package.module:OBJ``, importable in every
    process (a worker loads it by that spec). Registering the same again is harmless."""
    if not isinstance(name, str) or not name or ":" in name or not isinstance(spec, str) \
            or TargetSpec.parse(spec).is_name:
        raise InvalidArgument(f"register_target({name!r}, {spec!r}): give a name without ':' and a spec "
                              f"'package.module:OBJ' (OBJ a Target, or a callable returning one).")
    if name in _SHIPPED and spec != _SHIPPED[name]:
        raise InvalidArgument(f"register_target({name!r}, {spec!r}): {name!r} is fuzzrunner's own target; "
                              f"register yours under another name.")
    BUILTIN[name] = spec


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    cases: Callable[..., Any]          # cases(faults, *, max_ops: int[, device: str]) -> SearchStrategy[Case]
    run: Callable[..., None]           # run(case: Case, ctx: RunContext) -> None
    faults: tuple = ()                 # fault names this target understands
    fault_descriptions: dict = field(default_factory=dict)  # {fault name: one line}
    schema: dict | None = None         # JSON Schema of {"config": {...}, "ops": [...]}
    seeds: str | None = None           # a folder of seed case files shipped with the target
    features: Callable[..., Any] | None = None  # features(case) -> iterable of "name" or "name=value"
    feature_space: tuple = ()          # every feature ``features`` can give: those never reached are reported
    summary_features: tuple = ()       # feature names (before "=") the summary shows value by value, counted over the
    #                                    cases that ran: what a user must see ran (sglang_engine's "path")
    details: tuple = ()                # more lines for ``doctor``: e.g. which parts of the code under test it drives
    faults_unavailable: dict = field(default_factory=dict)  # {fault: why it cannot run here (a part is missing)}
    own_code: tuple = ()               # files/folders of the target's own adapter code around the code under test:
    #                                    an exception raised there is a target error (tool "target"), not the code's
    code_under_test: dict = field(default_factory=dict)  # which code runs (an engine's release, tree, patch and
    #                                    its hash): reported, and every worker must load the same (engine/hub.py)
    known_bugs: Callable[[dict], dict | None] | None = None  # known_bugs(finding as a report writes it) -> {"id",
    #     "title", "upstream", "status"} where the finding is a known bug of the code under test, else None: the
    #     campaign labels it (triage["known"], engine/known.py; docs/triage.md)
    skip_seed: Callable[[Any], str | None] | None = None  # skip_seed(case) -> why this campaign leaves a replayed
    #     case out, the target's own seeds and the user's corpus alike (a config its cases are not drawn from, e.g. a
    #     backend the user narrowed away), or None to replay it; those left out are counted in one warning per
    #     source (engine/corpus_replay.py)

    def __post_init__(self):
        """Names are strings (a name is a corpus folder and is quoted in every message), and each field of
        several names takes one as one (``faults="x"`` is ``("x",)``: ``arguments.several``)."""
        for field_name in ("name", "description"):
            value = getattr(self, field_name)
            if not isinstance(value, str) or (field_name == "name" and not value.strip()):
                raise InvalidArgument(f"Target({field_name}={safe_repr(value, 100)}): the {field_name} must be a "
                                      f"{'non-empty ' if field_name == 'name' else ''}string.")
        for field_name in ("faults", "feature_space", "summary_features", "details", "own_code"):
            value = several(getattr(self, field_name), f"Target {self.name!r}: {field_name}",
                            paths=field_name == "own_code")
            object.__setattr__(self, field_name, value)
        if not callable(self.run):  # (cases is checked where it is called: a target may only replay cases)
            raise InvalidArgument(f"Target {self.name!r}: run must be a function, not {type_name(self.run)}.")
        if self.known_bugs is not None and not callable(self.known_bugs):
            raise InvalidArgument(f"Target {self.name!r}: known_bugs must be a function or None, not "
                                  f"{type_name(self.known_bugs)}.")
        if self.skip_seed is not None and not callable(self.skip_seed):
            raise InvalidArgument(f"Target {self.name!r}: skip_seed must be a function or None, not "
                                  f"{type_name(self.skip_seed)}.")
        if self.features is not None and not callable(self.features):
            raise InvalidArgument(f"Target {self.name!r}: features must be a function or None, not "
                                  f"{type_name(self.features)}.")

    def seed_files(self) -> list:
        """The target's own seed cases (replayed first by every campaign, after the corpus's)."""
        if not self.seeds:
            return []
        return [str(p) for p in json_files(self.seeds)]

    def check_faults(self, names) -> tuple:
        names = several(names, "faults")
        for n in names:
            if n in self.faults_unavailable:
                raise InvalidArgument(f"fault {n!r} of target {self.name!r} cannot run here: "
                                      f"{safe_str(self.faults_unavailable[n], 300)} (a campaign would pass without "
                                      f"testing it).")
            if n not in self.faults:
                hint = did_you_mean(n, self.faults)
                known = ", ".join(self.faults) or "none"
                raise InvalidArgument(f"unknown fault {n!r} for target {self.name!r}.{hint} Known faults: {known}.")
        return names

    def check_callbacks(self) -> Target:
        """This target, after ``TargetError`` if its ``run`` or ``cases`` is a generator function or
        ``async def``, or its ``features`` is ``async`` (callbacks.py: such a target tests nothing)."""
        refuse_async(self.name, "run", self.run)
        refuse_async(self.name, "cases", self.cases)
        if self.features is not None:
            refuse_async(self.name, "features", self.features, generators=False)
        if self.known_bugs is not None:
            refuse_async(self.name, "known_bugs", self.known_bugs, generators=False)
        if self.skip_seed is not None:
            refuse_async(self.name, "skip_seed", self.skip_seed, generators=False)
        return self

    def takes_palette(self) -> bool:
        """Whether ``cases`` draws its shapes from a palette (takes a ``palette`` argument)."""
        import inspect
        try:
            return "palette" in inspect.signature(self.cases).parameters
        except (TypeError, ValueError):
            return False

    def strategy(self, faults: tuple, max_ops: int, *, device: str, palette=None):
        """``cases(faults, max_ops=max_ops)``, with ``device=device`` (the run's, ``cpu`` or ``cuda``) when
        ``cases`` takes it, and ``palette`` (a ``palette.Palette``: the campaign's shapes) when one is given and
        ``cases`` takes it (a target without shapes of its own draws as before); checked: a ``cases`` that raises,
        or returns no strategy, is a ``TargetError``
        naming this target; so is a strategy that raises while it draws a case (``DrawError`` at once,
        which the search turns into a ``TargetError``: see ``draw_error``)."""
        import inspect

        from hypothesis.strategies import SearchStrategy
        kwargs: dict[str, Any] = {"max_ops": max_ops}
        try:
            takes = inspect.signature(self.cases).parameters
            if "device" in takes:
                kwargs["device"] = device
            if palette is not None and "palette" in takes:
                kwargs["palette"] = palette
            inspect.signature(self.cases).bind(faults, **kwargs)
        except TypeError as e:
            raise TargetError(f"target {self.name!r}: its cases cannot be called as cases(faults, *, max_ops) "
                              f"({safe_str(e, 300)}); "
                              f"a target's cases must accept the faults and the keyword max_ops.") from None
        except ValueError:
            pass  # no signature to read (a builtin): calling it says
        try:
            strategy = self.cases(faults, **kwargs)
        except Exception as e:
            raise TargetError(f"target {self.name!r}: its cases(faults, max_ops={max_ops}) raised "
                              f"{describe(e)}") from e
        refuse_awaitable(self.name, "cases", strategy)
        if not isinstance(strategy, SearchStrategy):
            raise TargetError(f"target {self.name!r}: its cases(faults, max_ops={max_ops}) returned "
                              f"{type_name(strategy)}, not a Hypothesis strategy of Case.")
        # an empty strategy draws nothing that could raise; left bare, Hypothesis says "empty strategy"
        return strategy if strategy.is_empty else _guarded(strategy)

    def check_case(self, case: Case) -> None:
        """``InvalidCase`` (one line: where, what, the rule) unless ``case`` fits this target's schema."""
        if case.target != self.name:
            raise InvalidCase(f"the case is for target {case.target!r}, not {self.name!r}.")
        if self.schema is None or not schema_checks_available():
            return
        import jsonschema
        errors = list(_validator(self.schema).iter_errors({"config": case.config, "ops": list(case.ops)}))
        if errors:
            best = jsonschema.exceptions.best_match(errors)
            rest = [e for e in errors if e is not best and list(e.absolute_path) != list(best.absolute_path)]
            more = "; ".join(f"{_where(e)}: {e.message[:120]}" for e in rest[:3])
            more += f"; and {len(rest) - 3} more" if len(rest) > 3 else ""
            raise InvalidCase(f"{self.name} case: {_where(best)}: {best.message[:300]}"
                              + (f" (also {more})" if more else ""))


def release_change(recorded: dict, loaded: dict) -> str:
    """What differs between the code a finding was found on (``recorded``) and the code loaded now, in one line;
    "" if the same engine, release and patch (or nothing was recorded: our own code, an older finding). A tree in
    another folder holding the same release is the same code."""
    if not recorded:
        return ""
    same = all(recorded.get(k) == loaded.get(k) for k in ("engine", "release", "patch_sha256"))
    return "" if same else f"it was found on {describe_code(recorded)}; this replay loaded {describe_code(loaded)}"


def describe_code(code: dict) -> str:
    """A target's code under test in a few words: ``vllm 0.33.0 (TREE), patched with P (sha256 0123456789ab)``."""
    if not code:
        return "no code named"
    text = f"{code.get('engine', '?')} {code.get('release', '?')} ({code.get('tree', '?')})"
    if code.get("patch"):
        text += f", patched with {code['patch']} (sha256 {str(code.get('patch_sha256'))[:12]})"
    return text



class DrawError(BaseException):
    """A target's strategy raised while drawing a case, or drew something that is no case. A
    BaseException, so that Hypothesis stops at once instead of shrinking the target's own error as if
    it were a bug of the code under test (and never formats the value drawn)."""

    def __init__(self, what: str, error: Exception | None = None):
        super().__init__(what)
        self.what, self.error = what, error


def draw_error(target_name: str, e: DrawError) -> TargetError:
    return TargetError(f"target {target_name!r}: its strategy {e.what}")


def _guarded(strategy):
    from hypothesis import strategies as st
    from hypothesis.errors import Frozen, UnsatisfiedAssumption

    @st.composite
    def target_cases(draw):
        try:
            case = draw(strategy)
        except (UnsatisfiedAssumption, Frozen):  # Hypothesis' own flow: assume() and filters, end of data
            raise
        except Exception as e:
            raise DrawError(f"raised {type_name(e)} while drawing a case: "
                            f"{describe(e).removeprefix(type_name(e)).removeprefix(': ')}", e) from e
        problem = _not_a_case(case)
        if problem:
            raise DrawError(problem)
        return case
    return target_cases()


def _not_a_case(value) -> str | None:
    """Why a drawn value is no case a worker can run (None if it is one): a ``Case`` of plain JSON data.
    Anything else ended the campaign as fuzzrunner's "internal error" (an int has no 'target'), or
    made Hypothesis format a value whose ``repr`` may raise."""
    import json
    kind = value_kind(value)
    if kind is not None:
        return (f"drew {kind} ({type_name(value)}), not a Case: build cases with plain functions (an async "
                f"function given to st.builds or .map makes coroutines).")
    if not isinstance(value, Case):
        return f"drew {type_name(value)}, not a fuzzrunner Case: its cases() must return a strategy of Case."
    try:
        json.dumps(value.to_dict())  # what goes to the worker
    except (TypeError, ValueError, RecursionError) as e:
        return f"drew a case that is not plain JSON data ({describe(e, 200)}): cases must round-trip through JSON."
    return None


def _where(error) -> str:
    """A schema error's place in the case, as ``ops[2].tokens``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".") or "case"


_VALIDATORS: dict[int, Any] = {}


def schema_checks_available() -> bool:
    """Whether jsonschema is importable. It is a dependency of the package; an image that runs
    fuzzrunner from a checkout without it (the GPU machine's) runs cases unchecked, and
    ``fuzzrunner doctor`` says so."""
    return importlib.util.find_spec("jsonschema") is not None


def _validator(schema: dict):
    key = id(schema)
    if key not in _VALIDATORS:
        import jsonschema
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        _VALIDATORS[key] = cls(schema)
    return _VALIDATORS[key]


def _exec_file(module_part: str):
    path = os.path.abspath(module_part)
    if not os.path.exists(path):
        raise InvalidArgument(f"target file {module_part!r} does not exist.")
    mod_name = "fuzzrunner_user_target_" + os.path.splitext(os.path.basename(path))[0]
    if mod_name in sys.modules and getattr(sys.modules[mod_name], "__file__", None) == path:
        return sys.modules[mod_name]
    s = importlib.util.spec_from_file_location(mod_name, path)
    if s is None or s.loader is None:
        raise InvalidArgument(f"target file {module_part!r} is not a Python module.")
    module = importlib.util.module_from_spec(s)
    sys.modules[mod_name] = module
    try:
        s.loader.exec_module(module)
    except KeyboardInterrupt:  # the user's stop (Ctrl-C, SIGTERM) during the import: not the target's failure
        del sys.modules[mod_name]
        raise
    except BaseException as e:  # noqa: B036 - SystemExit at import must not end the campaign
        del sys.modules[mod_name]
        raise HarnessError(f"target file {module_part!r} failed to import: {describe(e)}") from None
    return module


def _import_module(module_part: str):
    try:
        return importlib.import_module(module_part)
    except ImportError as e:
        raise InvalidArgument(f"cannot import target module {module_part!r}: {safe_str(e, 300)}.") from None
    except KeyboardInterrupt:  # the user's stop during the import: not the target's failure
        raise
    except BaseException as e:  # noqa: B036 - SystemExit at import must not end the campaign
        raise HarnessError(f"target module {module_part!r} failed to import: {describe(e)}") from None


def _import_object(spec: str):
    parsed = TargetSpec.parse(spec)
    module_part, obj_name = parsed.module, parsed.obj
    module = _exec_file(module_part) if parsed.is_file else _import_module(module_part)
    if not hasattr(module, obj_name):
        raise InvalidArgument(f"target module {module_part!r} has no object {obj_name!r}.")
    return getattr(module, obj_name)


def resolve_spec(spec: str) -> str:
    """A built-in name -> its module spec; anything else as it is."""
    if not TargetSpec.parse(spec).is_name:
        return spec
    if spec not in BUILTIN:
        hint = did_you_mean(spec, BUILTIN)
        raise InvalidArgument(f"unknown target {spec!r}.{hint} Built-in targets: {', '.join(BUILTIN)}; "
                              f"or name your own as path/to/file.py:OBJ or package.module:OBJ.")
    return BUILTIN[spec]


def is_builtin(spec: str) -> bool:
    """Whether ``spec`` names one of our built-in targets (by its name or its module spec)."""
    return spec in BUILTIN or spec in BUILTIN.values()


def recorded_for(recorded: str | None, spec: str) -> bool:
    """Whether a finding recorded with target spec ``recorded`` is one of target ``spec``'s (their names
    being the same: the corpus folder is ``findings/<name>/``). A user's target may take a built-in
    name; the two share the folder but never their findings: a built-in spec's findings are the
    built-in target's, any other spec's are the user's (a user's file may move: any user spec of that
    name). A finding that recorded no spec (an older corpus) is anyone's of that name, as before."""
    return not recorded or is_builtin(recorded) == is_builtin(spec)


def load_target(spec: str) -> Target:
    """A built-in name, ``file.py:OBJ`` or ``module:OBJ`` -> Target."""
    full = resolve_spec(spec)
    obj = _import_object(full)
    if not isinstance(obj, Target) and callable(obj):
        kind = function_kind(obj)
        if kind is not None:  # its Target would never be built (an async factory's body never runs here)
            raise TargetError(f"target factory {full!r} is {kind}: a factory must be a plain function that builds "
                              f"and returns the Target.")
        try:
            obj = obj()
        except HarnessError:
            raise  # already one line (TargetUnavailable: what is missing and how to get it)
        except BaseException as e:  # noqa: B036 - SystemExit in a factory is a broken harness too
            raise HarnessError(f"target factory {full!r} failed: {describe(e)}") from None
    if not isinstance(obj, Target):
        raise InvalidArgument(f"{full!r} is a {type_name(obj)}, not a fuzzrunner.Target.")
    return obj.check_callbacks()


def spec_of(target: Target) -> str:
    """A spec another process can load ``target`` from: the module-level name it is bound to."""
    import inspect
    module = inspect.getmodule(target.run)
    if module is None:
        raise InvalidArgument(f"target {target.name!r} must be a module-level object so worker processes can import "
                              f"it.")
    for name, obj in vars(module).items():
        if obj is target:
            path = getattr(module, "__file__", None)
            if module.__name__.startswith("fuzzrunner.") or not path:
                return f"{module.__name__}:{name}"  # ours: importable anywhere fuzzrunner is
            return f"{path}:{name}"
    raise InvalidArgument(f"target {target.name!r} must be a module-level object so worker processes can import it.")


def unavailable(name: str) -> str | None:
    """Why built-in target ``name`` cannot run here (its software is missing), or None."""
    from .errors import TargetUnavailable
    try:
        load_target(name)
    except TargetUnavailable as e:
        return str(e)
    return None
