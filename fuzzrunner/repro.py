"""Minimized-repro export: one short standalone script per finding.

The script rebuilds the finding's case with plain calls to the public API (no Hypothesis,
no corpus, no reliance on the working directory), replays it under the oracle that found
the bug, prints what comes back, and exits 1 while the bug is there, 0 once it is gone.
Its header says what was found, how, and the compute-sanitizer line for a GPU.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from .corpus import Finding, atomic_write
from .errors import InvalidArgument

SANITIZER_TOOLS = ("initcheck", "memcheck", "racecheck", "synccheck")
_BY_SANITIZER = SANITIZER_TOOLS + ("compute-sanitizer",)  # the tool of a violation parsed from its report
CRASH_KINDS = ("crash", "timeout")

# The oracles a script replays under, by the tool that found the finding. The poison oracle
# needs the shadow guard on the CPU only: there an out-of-range poison read would segfault.
_ORACLES = {"shadow": '["shadow"]', "numeric": '["numeric"]', "invariants": '["invariants"]',
            "poison": '["poison", "shadow"] if os.environ.get("FUZZRUNNER_DEVICE") == "cpu" else ["poison"]'}


def export_repro(finding: Finding | str | os.PathLike, path: str | os.PathLike, *,
                 oracle: str | list[str] | None = None, target: str | None = None) -> Path:
    """Write ``finding``'s repro script to ``path`` (a file, or a folder for ``repro_<id>.py``).

    ``oracle`` overrides the oracles the script replays under; ``target`` is the target spec
    (``file.py:OBJ``) when the case's target name is not a built-in one. The finding is not changed.
    """
    if not isinstance(finding, Finding):
        finding = Finding.load(finding)
    path = Path(path)
    if path.is_dir():
        path = path / f"repro_{finding.signature.id}.py"
    text = repro_script(finding, oracle=oracle, target=target, name=path.name)
    try:
        atomic_write(path, text)
        path.chmod(0o755)
    except OSError as e:
        raise InvalidArgument(f"cannot write repro script {str(path)!r}: {e.strerror or e}. "
                              f"Choose a path in a writable directory.") from None
    return path


def repro_script(finding: Finding, *, oracle=None, target: str | None = None, name: str = "repro.py") -> str:
    """The script's text: a header that explains, then a body of plain API calls."""
    sig, case = finding.signature, finding.case
    oracles = _oracles_expr(sig.tool, oracle)
    lines = _header(finding, name) + ["import sys"]
    if "os.environ" in oracles:
        lines.append("import os")
    if sig.kind in CRASH_KINDS:
        lines += ["import faulthandler", "", "faulthandler.enable()  # a segfault still prints where it was"]
    lines += ["", "from fuzzrunner import Case, replay", "", "case = Case(", f"    target={_lit(case.target)},",
              *_keyword("config", case.config), f"    faults={_lit(list(case.faults))},", "    ops=["]
    lines += [f"        {_lit(op)}," for op in case.ops]
    lines += ["    ],", ")"]
    on = f", target={_lit(target)}" if target and target != case.target else ""
    lines.append(f"violations = replay(case{on}, oracles={oracles})")
    # The same bug: the signature id (an uninitialized and a stale read of one tensor at one line share it).
    match = f"v.kind in {CRASH_KINDS!r}" if sig.kind in CRASH_KINDS else f"v.signature.id == {_lit(sig.id)}"
    lines += [f"found = [v for v in violations if {match}]", "for v in found:",
              '    print(f"{v.signature.short()}\\n    {v.message}")', "if found:", "    sys.exit(1)",
              'print("not reproduced: fixed?")']
    return "\n".join(lines) + "\n"


def _header(f: Finding, name: str) -> list[str]:
    sig, tool = f.signature, _sanitizer_tool(f.signature)
    how = "minimized" if f.minimized else "not minimized"
    lines = ["#!/usr/bin/env python3",
             f"# fuzzrunner repro: {sig.short()}",
             f"# signature {sig.id}: tool={sig.tool} kind={sig.kind} kernel={sig.kernel or '-'}",
             f"#   location={sig.location or '-'} tensor={sig.tensor or '-'}",
             f"# message: {_first_line(f.violation.message)}",
             f"# found by fuzzing target {f.case.target} after {f.first_found_after_examples} "
             f"example{'' if f.first_found_after_examples == 1 else 's'} "
             f"({f.found_after_s:.1f} s); case {how}",
             f"# run: python {name}   (from a checkout: PYTHONPATH=<checkout> python {name})",
             f"# GPU: PYTORCH_NO_CUDA_MEMORY_CACHING=1 FUZZRUNNER_DEVICE=cuda compute-sanitizer "
             f"--tool {tool} --error-exitcode 1 python {name}"]
    if sig.kind == "stale-read":
        lines.append("#   (initcheck cannot see a stale read: those bytes were written, in an earlier step)")
    if sig.tool in _BY_SANITIZER or sig.kind == "sanitizer-error":
        lines.append("#   (only compute-sanitizer sees this bug: run the GPU line; its exit code 1 is the verdict)")
    if sig.kind in CRASH_KINDS:
        lines.append(f"# This script may itself crash or hang (bound it: timeout 300 python {name}):")
        lines.append("# any exit code but 0 means reproduced.")
    else:
        lines.append("# Exit 1: reproduced. Exit 0: not reproduced.")
    return [_ascii(line) for line in lines]


def _oracles_expr(tool: str, oracle) -> str:
    if oracle is not None:
        from .execute import validate_oracles  # imports torch: only when asked to check names
        return _lit(list(validate_oracles([oracle] if isinstance(oracle, str) else oracle)))
    if tool in _BY_SANITIZER:
        return "[]"  # compute-sanitizer is the oracle; poison would count as initialization to initcheck
    return _ORACLES.get(tool, "None")  # python/worker crashes: the device's default oracles


def _keyword(name: str, d: dict, width: int = 100) -> list[str]:
    """``name={...},`` on one line, or its items packed into lines of at most ``width`` when long."""
    one = f"    {name}={_lit(d)},"
    if len(one) <= width:
        return [one]
    lines, line = [f"    {name}={{"], " " * 7
    for item in (f"{_lit(k)}: {_lit(v)}," for k, v in d.items()):
        if len(line) + 1 + len(item) > width and line.strip():
            lines.append(line)
            line = " " * 7
        line += " " + item
    return lines + [line, "    },"]


def _sanitizer_tool(sig) -> str:
    if sig.tool in SANITIZER_TOOLS:
        return sig.tool
    return "initcheck" if sig.kind == "uninitialized-read" else "memcheck"


def _first_line(text: str) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= 200 else line[:197] + "..."


def _ascii(text: str) -> str:
    """A comment line that no encoding or terminal escape can break."""
    return "".join(c if " " <= c <= "~" else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text)


def _lit(x) -> str:
    """A Python literal of JSON-like data, with double-quoted strings as in the case file."""
    if isinstance(x, dict):
        return "{" + ", ".join(f"{_lit(k)}: {_lit(v)}" for k, v in x.items()) + "}"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_lit(v) for v in x) + "]"
    if isinstance(x, str) and all(" " <= c <= "~" and c not in '"\\' for c in x):
        return f'"{x}"'
    if isinstance(x, float) and not math.isfinite(x):
        return f'float("{x}")'
    return ascii(x)
