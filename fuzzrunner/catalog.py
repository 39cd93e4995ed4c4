"""The built-in targets as ``fuzzrunner targets`` lists them: what each is and whether it can run here,
without importing any of them.

Loading a target imports what it tests: torch and Triton for ours (seconds), a whole vLLM or SGLang
tree for the engine targets (12-25 s on a 2-core machine), and ``fuzzrunner targets`` used to pay all
of it to print four lines. A target's description here is the first line of its package's docstring
(``Target ``name``: what it is.``), read from the file, then what it drives: the module's own declaration
``DRIVES`` (a tuple of string literals, read from the file too: the scheduler path, the MoE layer, the V1 runner of
the engine targets were in no one-liner, and a list in the CLI would drift from the targets); an engine target's
availability is its
package's own cheap check (``AVAILABILITY``: where its tree is, no import of the engine). Whether the
tree then imports is what ``fuzzrunner doctor`` and ``check-target`` find out.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
from dataclasses import dataclass

from .target import BUILTIN
from .target_spec import TargetSpec

# the targets whose code under test may be missing here: a check that imports no engine -> (ok, where or why)
AVAILABILITY = {"vllm_lora": "fuzzrunner.targets.vllm_lora:vllm_available",
                "vllm_engine": "fuzzrunner.targets.vllm_engine:vllm_available",
                "sglang_lora": "fuzzrunner.targets.sglang_lora:sglang_available",
                "sglang_engine": "fuzzrunner.targets.sglang_engine:engine_available"}
OURS = ("reference_runner", "lora_kernels")  # the code they test is fuzzrunner's own: always there


@dataclass(frozen=True)
class About:
    """What ``fuzzrunner targets`` says of a built-in target."""
    description: str               # the first sentence of its package's docstring
    unavailable: str | None = None  # why it cannot run here (its engine is not set up), or None
    engine: str = ""               # where its engine comes from, for an engine target that can run


def about(name: str) -> About:
    """Built-in target ``name`` described, without importing it or its engine."""
    description = _docstring_line(BUILTIN[name], name)
    drives = declared_drives(BUILTIN[name])
    if drives:
        description += f"; drives {'; '.join(drives)}"
    if name not in AVAILABILITY:
        return About(description)
    module, _, function = AVAILABILITY[name].partition(":")
    ok, said = getattr(importlib.import_module(module), function)()
    return About(description, engine=said) if ok else About(description, unavailable=said)


def _module_tree(spec: str) -> ast.Module | None:
    """The parsed source of the module ``spec`` names (never imported), or None."""
    parsed = TargetSpec.parse(spec)
    path = parsed.file or _source_of(parsed.module)
    try:
        with open(path or "", encoding="utf-8") as f:
            return ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None


def declared_drives(spec: str) -> tuple[str, ...]:
    """The module's ``DRIVES = ("part", ...)``: what of the code under test the target drives, in a few words each;
    () where it declares none, or anything but a tuple or list of strings (a listing never fails on it)."""
    tree = _module_tree(spec)
    for node in tree.body if tree is not None else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DRIVES" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return ()
            ok = isinstance(value, (tuple, list)) and all(isinstance(v, str) and v.strip() for v in value)
            return tuple(" ".join(v.split()) for v in value) if ok else ()
    return ()


def _docstring_line(spec: str, name: str) -> str:
    """The first sentence of the docstring of the module ``spec`` names, without its ``Target ``name``:``."""
    tree = _module_tree(spec)
    doc = ast.get_docstring(tree) if tree is not None else None
    if not doc:
        return "(no description: its module has no docstring)"
    first = " ".join(doc.split("\n\n")[0].split())
    first = re.sub(rf"^Target ``{re.escape(name)}``:\s*", "", first).rstrip(".")
    return re.sub(r"``([^`]+)``", r"\1", first)  # reST literals read as plain words on a terminal


def _source_of(module: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module)  # imports the parent packages only (fuzzrunner.targets: light)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.origin and os.path.isfile(spec.origin) else None
