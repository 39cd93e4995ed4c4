"""Minimized-repro export: one short standalone script per finding.

The script rebuilds the finding's case with plain calls to the public API (no Hypothesis,
no corpus, no reliance on the working directory), replays it under the oracle that found
the bug and prints what comes back. Its exit code is the verdict, usable with ``git bisect run``:

    1  reproduced: the same bug (matched by its site, the function holding the bad access,
       not by its line: an edit above it does not make it "fixed")
    0  not reproduced
    2  could not run (fuzzrunner not importable, unknown target, invalid case, no GPU...):
       the reason is printed; this says nothing about the bug

Crashes and hangs replay in a crash-isolated worker, and compute-sanitizer findings under
compute-sanitizer, so the script itself survives and gives its verdict.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from . import names
from .corpus import Corpus
from .errors import FuzzrunnerError, InvalidArgument
from .finding import Finding
from .safe_write import write_error, write_file
from .sighting import found_text
from .target import BUILTIN, describe_code
from .violation import cause_lines, window_lines


def export_repro(finding: Finding | str | os.PathLike, path: str | os.PathLike, *,
                 oracle: str | list[str] | None = None, target: str | None = None) -> Path:
    """Write ``finding``'s repro script to ``path`` (a file, or a folder for ``repro_<id>.py``), where
    the user said: a device or a FIFO is written in place, a symlink's target (``safe_write``).

    ``oracle`` overrides the oracles the script replays under; ``target`` overrides the target
    spec the finding recorded. The finding is not changed.
    """
    return _write(finding, path, oracle=oracle, target=target, follow=True)


def export_output(output: str, findings: list) -> Path:
    """Where ``fuzzrunner export`` writes the scripts of ``findings`` (their files), checked before any is read:
    ``output`` is one script, or a folder for one ``repro_<id>.py`` each; several findings need a folder (made
    if missing). No script replaces a finding file being exported (through a link or another spelling too)."""
    from .safe_write import check_folder, check_outputs
    if not output:
        raise InvalidArgument("-o: an empty path names no file; give a script (-o repro.py) or a folder (-o repros/).")
    out = Path(output)
    if len(findings) > 1:
        if out.suffix == ".py" and not out.is_dir():
            raise InvalidArgument(f"{len(findings)} finding files were given and -o {output!r} names one "
                                  f"script: give a folder (-o DIR) for one repro_<id>.py each, or one file.")
        check_folder(out, f"the repro scripts' folder {str(out)!r}", "Choose another with -o DIR.")
    elif not out.is_dir():
        check_outputs({"-o": output}, {"the finding file being exported": findings[0]})
    return out


def export_path(out: Path, finding, written: set, inputs: list) -> Path:
    """Where one finding's script goes; never over the first of one bug saved twice (findings/ and
    expected/), never over a finding file being exported."""
    from .safe_write import same_file
    dest = out / f"repro_{finding.id}.py" if out.is_dir() else out
    if dest in written:
        dest = dest.with_name(f"{dest.stem}_{len(written)}.py")
    clash = next((f for f in inputs if same_file(dest, f)), None)
    if clash is not None:
        raise InvalidArgument(f"cannot write the repro script {str(dest)!r}: it is the finding file {clash!r} being "
                              f"exported; name another path with -o.")
    return dest


def save_repro(finding: Finding, path: str | os.PathLike, *, target: str | None = None) -> Path:
    """``export_repro`` into a folder fuzzrunner keeps (the corpus' ``repro/``, the pytest plugin's): a
    symlink there is replaced, never followed out of it."""
    return _write(finding, path, oracle=None, target=target, follow=False)


def save_repros(result, corpus: str | os.PathLike) -> list[str]:
    """A repro script in the corpus for every finding of campaign ``result`` (``Corpus.repro_path``), each
    finding's ``repro`` set to it; a failed export loses only its script: one warning each, returned."""
    store = Corpus(corpus, faults=result.faults)
    warnings = []
    for f in result.findings:
        try:
            f.repro = str(save_repro(f, store.repro_path(result.target, f.id)))
        except (OSError, FuzzrunnerError) as e:
            warnings.append(f"no repro for {f.id}: {e}")
            f.repro = None
    return warnings


def _write(finding, path, *, oracle, target, follow: bool) -> Path:
    if not isinstance(finding, Finding):
        finding = Finding.load(finding)
    path = Path(path)
    if path.is_dir():
        path = path / f"repro_{finding.id}.py"
    text = repro_script(finding, oracle=oracle, target=target, name=path.name)
    try:
        return write_file(path, text, mode=0o755, follow=follow)
    except OSError as e:
        raise write_error("repro script", path, e) from None


def _replay_call(finding: Finding, oracle, target: str | None) -> str:
    sig, spec = finding.signature, _spec(finding, target)
    args = ["case"]
    if spec != finding.case.target and spec not in BUILTIN:
        args.append(f"target={_lit(spec)}")
    args.append(f"oracles={_oracles_expr(sig.tool, oracle)}")
    if names.tool(sig.tool).sanitizer:
        args += [f"sanitizer={_lit(_sanitizer_tool(sig))}", 'device="cuda"']
    elif names.kind(sig.kind).process_death and not names.tool(sig.tool).raised:
        args.append("isolated=True")
    if finding.case_timeout_s and any(a.startswith(("isolated=", "sanitizer=")) for a in args):
        args.append(f"case_timeout={_lit(finding.case_timeout_s)}")  # a timeout of a 5 s campaign waits 5 s, not 120
    return f"violations = replay({', '.join(args)})"


def _spec(finding: Finding, target: str | None) -> str:
    return target or finding.target_spec or finding.case.target


def _release_check(finding: Finding, target: str | None) -> list[str]:
    """The lines that say, before the verdict, when the release loaded is not the one the finding was found on (its
    header's "found on"; ``release_change``, as ``fuzzrunner replay`` warns): one line on stderr, the replay and its
    exit code unchanged. Before, a repro of an SGLang 0.5.23 finding run on 0.5.12 said nothing of it. A fuzzrunner
    without ``release_change``, or a target that does not load again, leaves the line out (the verdict stands)."""
    if not finding.code_under_test:
        return []  # our own code, or a finding from before releases were recorded
    return [f"found_on = {_lit(dict(finding.code_under_test))}",
            "try:  # the release it was found on, and the one this replay loaded",
            "    from fuzzrunner.target import load_target, release_change",
            "",
            f"    changed = release_change(found_on, load_target({_lit(_spec(finding, target))}).code_under_test)",
            "except Exception:  # noqa: BLE001 - an older fuzzrunner, a target that no longer loads: nothing to say",
            '    changed = ""',
            "if changed:",
            '    print(f"warning: {changed}", file=sys.stderr)']


def repro_script(finding: Finding, *, oracle=None, target: str | None = None, name: str = "repro.py") -> str:
    """The script's text: a header that explains, then a body of plain API calls."""
    sig, case = finding.signature, finding.case
    body = ["case = Case(", f"    target={_lit(case.target)},", *_keyword("config", case.config),
            f"    faults={_lit(list(case.faults))},", "    ops=[", *(f"        {_lit(op)}," for op in case.ops),
            "    ],", ")", _replay_call(finding, oracle, target)]
    if names.kind(sig.kind).process_death:
        match = f"v.kind in {names.crash_kinds()!r}"
    else:  # the same bug: matched by id (site, not line); uninitialized and stale reads share it
        match = f"v.signature.matches({_lit(finding.id)})"
    moved = [] if not sig.access_id else [  # else by the bad access alone: a renamed function is not a fix
        f"found = found or [v for v in violations if getattr(v.signature, 'access_id', 0) == {_lit(sig.access_id)}]"]
    device_mode = finding.shadow_mode == "device"
    imports = ["import os", "import sys"] if "os.environ" in body[-1] or device_mode else ["import sys"]
    lines = _header(finding, name) + imports + ["", *_STDOUT, ""]
    if device_mode:  # found by the shadow oracle's device mode: replay in it (on a CPU, through the interpreter)
        lines += ['if not os.environ.get("FUZZRUNNER_SHADOW", "").strip():  # the mode that found it, unless set',
                  '    os.environ["FUZZRUNNER_SHADOW"] = "device"', ""]
    lines += ["try:", "    from fuzzrunner import Case, replay", "", *("    " + b for b in body),
              "except Exception as e:  # noqa: BLE001 - anything that stops the replay is 'could not run'",
              '    print(f"could not run: {type(e).__name__}: {e}", file=sys.stderr)', "    sys.exit(2)",
              *_release_check(finding, target),
              f"found = [v for v in violations if {match}]", *moved, "for v in found:",
              '    print(f"{v.signature.short()}\\n    {v.message}")', *([] if moved else _WINDOW),
              "if found:", "    sys.exit(1)",
              *_LIMITS, 'print("not reproduced")', "sys.exit(0)"]
    return "\n".join(lines) + "\n"


# What the script prints may hold a path with undecodable bytes (a non-UTF-8 folder or target file):
# a UTF-8 terminal's strict stdout raised UnicodeEncodeError, and the traceback's exit 1 read as
# "reproduced". Escaped instead, as the command line does.
_STDOUT = ['getattr(sys.stdout, "reconfigure", lambda **kw: None)(errors="backslashreplace")  # undecodable path bytes']


# A case the tool could not run here (a tool-limitation: Triton's interpreter, an oracle) proves
# nothing: "could not run", never "not reproduced".
_LIMITS = ['for v in [v for v in violations if v.kind == "tool-limitation"][:1]:  # the tool could not run it',
           '    print(f"could not run: {v.message}", file=sys.stderr) or sys.exit(2)']


# A numeric finding's expected and actual values around the worst element, printed by the script
# from the details the replay gives back (plain code: the script must run with any fuzzrunner);
# a memory error's script (matched by its access too) has no window to print.
_WINDOW = ['    w = v.details.get("window") or {}',
           '    if w.get("expected"):',
           '        where = w.get("at", []) + [w.get("worst")]',
           '        cols = f"{w.get(\'start\')}..{w.get(\'stop\', 1) - 1}"',
           '        print(f"    around the worst element {where}, columns {cols}:")',
           '        for name in ("expected", "actual"):',
           '            values = (f"{x:.6g}" if isinstance(x, float) else str(x) for x in w[name])',
           '            print(f"      {name + \':\':10}", " ".join(values))']


def _header(f: Finding, name: str) -> list[str]:
    sig = f.signature
    how = "minimized" if f.minimized else "not minimized"
    lines = ["#!/usr/bin/env python3",
             f"# fuzzrunner repro: {sig.short()}",
             f"# finding {f.id}: tool={sig.tool} kind={sig.kind} kernel={sig.kernel or '-'}",
             f"#   location={sig.location or '-'} site={sig.site or '-'} tensor={sig.tensor or '-'}",
             f"# message: {_first_line(f.violation.message)}",
             *(f"#   {line}" for line in cause_lines(f.violation.details, f.violation.message)),
             *(f"#   {line}" for line in window_lines(f.violation.details)),
             f"# fuzzing target {f.case.target}: {found_text(f.found_by, f.first_found_after_examples)} "
             f"({f.found_after_s:.1f} s); case {how}",
             *([f"# found on: {describe_code(f.code_under_test)}"] if f.code_under_test else []),
             f"# run: python {name}   (from a checkout: PYTHONPATH=<checkout> python {name})",
             "# exit 1: reproduced; 0: not reproduced; 2: could not run (the reason is printed)"]
    if names.tool(sig.tool).sanitizer:
        lines.append("#   (replays under compute-sanitizer: needs a CUDA GPU, else exit 2)")
    elif sig.kind == "stale-read":
        lines.append("#   (compute-sanitizer's initcheck cannot see a stale read: those bytes were written earlier)")
    return [_ascii(line) for line in lines]


def _oracles_expr(tool: str, oracle) -> str:
    if oracle is not None:
        return _lit(list(names.validate_oracles([oracle] if isinstance(oracle, str) else oracle)))
    if names.tool(tool).sanitizer:
        return "[]"  # compute-sanitizer is the oracle; poison would count as initialization to initcheck
    if tool in names.ORACLES:
        guard = [g for g in names.ORACLES[tool].guard]
        if guard:  # the second run's guard matters on the CPU only (an out-of-range poison read segfaults)
            return f'{_lit([tool] + guard)} if os.environ.get("FUZZRUNNER_DEVICE") == "cpu" else {_lit([tool])}'
        return _lit([tool])
    return "None"  # python/worker crashes: the device's default oracles


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
    if sig.tool in names.SANITIZER_TOOLS:
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
