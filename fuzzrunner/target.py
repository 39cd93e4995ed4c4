"""Targets: something fuzzable, with the strategy that makes its cases and ``run(case, ctx)``.

Built-in targets live in the top-level ``targets`` package; a user's target is named
``path/to/file.py:OBJ`` or ``package.module:OBJ``, where OBJ is a ``Target`` (or a
callable returning one).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

from .errors import HarnessError, InvalidArgument, did_you_mean

BUILTIN = {
    "reference_runner": "targets.reference_runner:TARGET",
    "lora_kernels": "targets.lora_kernels:TARGET",
    "vllm_lora": "targets.vllm_lora:TARGET",
}


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    cases: Callable[..., Any]          # cases(faults: tuple[str, ...]) -> SearchStrategy[Case]
    run: Callable[..., None]           # run(case: Case, ctx: RunContext) -> None
    faults: tuple = ()                 # fault names this target understands
    fault_descriptions: Any = None     # () -> {name: one line}

    def check_faults(self, names) -> tuple:
        names = tuple(names or ())
        for n in names:
            if n not in self.faults:
                hint = did_you_mean(n, self.faults)
                known = ", ".join(self.faults) or "none"
                raise InvalidArgument(f"unknown fault {n!r} for target {self.name!r}.{hint} Known faults: {known}.")
        return names


def _import_object(spec: str):
    module_part, _, obj_name = spec.rpartition(":")
    if module_part.endswith(".py") or os.sep in module_part:
        path = os.path.abspath(module_part)
        if not os.path.exists(path):
            raise InvalidArgument(f"target file {module_part!r} does not exist.")
        mod_name = "fuzzrunner_user_target_" + os.path.splitext(os.path.basename(path))[0]
        s = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(s)
        sys.modules[mod_name] = module
        try:
            s.loader.exec_module(module)
        except Exception as e:
            raise HarnessError(f"target file {module_part!r} failed to import: {type(e).__name__}: {e}") from e
    else:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if root not in sys.path:
            sys.path.append(root)  # the built-in targets package beside fuzzrunner/
        try:
            module = importlib.import_module(module_part)
        except ImportError as e:
            raise InvalidArgument(f"cannot import target module {module_part!r}: {e}.") from e
        except Exception as e:
            raise HarnessError(f"target module {module_part!r} failed to import: {type(e).__name__}: {e}") from e
    if not hasattr(module, obj_name):
        raise InvalidArgument(f"target module {module_part!r} has no object {obj_name!r}.")
    return getattr(module, obj_name)


def load_target(spec: str) -> Target:
    """A built-in name, ``file.py:OBJ`` or ``module:OBJ`` -> Target."""
    if ":" not in spec:
        if spec not in BUILTIN:
            hint = did_you_mean(spec, BUILTIN)
            raise InvalidArgument(f"unknown target {spec!r}.{hint} Built-in targets: {', '.join(BUILTIN)}; "
                                  f"or name your own as path/to/file.py:OBJ or package.module:OBJ.")
        spec = BUILTIN[spec]
    obj = _import_object(spec)
    if not isinstance(obj, Target) and callable(obj):
        try:
            obj = obj()
        except Exception as e:
            raise HarnessError(f"target factory {spec!r} failed: {type(e).__name__}: {e}") from e
    if not isinstance(obj, Target):
        raise InvalidArgument(f"{spec!r} is a {type(obj).__name__}, not a fuzzrunner.Target.")
    return obj
