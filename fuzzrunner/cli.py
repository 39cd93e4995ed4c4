"""The ``fuzzrunner`` command line: parse, pick a profile, print, exit codes. Nothing else.

Exit codes: 0 no finding, 1 findings (or a replayed violation), 2 usage or harness error
(one line on stderr; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, as for every other error
        raise _UsageError(f"{message} (see `fuzzrunner {self.prog.split()[-1]} --help`)"
                          if " " in self.prog else message)


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fuzzrunner", description="Fuzz GPU model runners for reads of uninitialized or "
                                               "stale LoRA metadata.")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    f = sub.add_parser("fuzz", help="fuzz one target")
    f.add_argument("--target", default="reference_runner", help="a built-in name, FILE.py:OBJ or module:OBJ")
    f.add_argument("--fault", action="append", default=[], help="turn on a planted bug (repeatable)")
    f.add_argument("--profile", default="dev", help="dev | ci | nightly")
    f.add_argument("--max-examples", type=int)
    f.add_argument("--budget", type=float, help="seconds")
    f.add_argument("--seed", type=int)
    f.add_argument("--corpus", default="corpus")
    f.add_argument("--workers", type=int)
    f.add_argument("--device", choices=["cpu", "cuda"])
    f.add_argument("--sanitizer", choices=["none", "initcheck", "memcheck", "racecheck", "synccheck"])
    f.add_argument("--oracle", action="append", help="shadow | invariants | numeric | poison (repeatable)")
    f.add_argument("--no-shrink", action="store_true")
    f.add_argument("--report", help="write a JSON report")
    f.add_argument("--junit", help="write JUnit XML")
    f.add_argument("--html", help="write an HTML report")
    f.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    r = sub.add_parser("replay", help="replay case or finding files; exit 1 if a violation reproduces")
    r.add_argument("files", nargs="+")
    r.add_argument("--target", help="the target spec (FILE.py:OBJ, module:OBJ) for cases of your own targets")
    r.add_argument("--oracle", action="append")
    r.add_argument("--device", choices=["cpu", "cuda"])
    r.add_argument("--sanitizer", choices=["none", "initcheck", "memcheck", "racecheck", "synccheck"],
                   default="none")
    r.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    e = sub.add_parser("export", help="write a standalone repro script for a finding")
    e.add_argument("finding")
    e.add_argument("-o", "--output", default="repro.py")
    e.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    n = sub.add_parser("nightly", help="replay the corpus, fuzz every built-in target, write all reports")
    n.add_argument("--budget", type=float, help="seconds for the whole run")
    n.add_argument("--report-dir", default="reports")
    n.add_argument("--corpus", default="corpus")
    n.add_argument("--profile", default="nightly")
    n.add_argument("--max-examples", type=int, help="per target")
    n.add_argument("--seed", type=int)
    n.add_argument("--workers", type=int)
    n.add_argument("--device", choices=["cpu", "cuda"])
    n.add_argument("--sanitizer", choices=["none", "initcheck", "memcheck", "racecheck", "synccheck"])
    n.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    sub.add_parser("targets", help="list the built-in targets")
    sub.add_parser("faults", help="list the planted-bug switches of the reference runner")
    d = sub.add_parser("doctor", help="versions, device, interpreter mode, compute-sanitizer")
    d.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return p


# -- progress --------------------------------------------------------------------------------

class Progress:
    """A live line on a terminal; plain lines (findings, and a heartbeat) otherwise."""

    def __init__(self, stream, budget: float | None, label: str = ""):
        self.stream, self.budget, self.label = stream, budget, label
        self.tty = stream.isatty()
        self.start = time.monotonic()
        self._last_plain = 0.0
        self.examples = self.findings = 0

    def __call__(self, event: dict) -> None:
        kind = event["type"]
        if kind == "progress":
            self.examples, self.findings = event["examples"], event["findings"]
            self._line()
        elif kind == "finding":
            f = event["finding"]
            self._clear()
            self.stream.write(f"  found: {f.signature.short()} after {f.first_found_after_examples} "
                              f"examples ({f.found_after_s:.1f} s)\n")
        elif kind == "regression":
            self._clear()
            self.stream.write(f"  still failing from the corpus: {event['finding'].signature.short()}\n")
        elif kind == "warning":
            self._clear()
            self.stream.write(f"  warning: {event['message']}\n")
        self.stream.flush()

    def _text(self) -> str:
        el = time.monotonic() - self.start
        rate = self.examples / el if el > 0 else 0.0
        of = f"/{self.budget:.0f}" if self.budget else ""
        return (f"{self.label}{self.examples} cases, {self.findings} finding{'s' * (self.findings != 1)}, "
                f"{rate:.1f} cases/s, {el:.0f}{of} s")

    def _line(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self._text())
        elif time.monotonic() - self._last_plain >= 10:
            self._last_plain = time.monotonic()
            self.stream.write(self._text() + "\n")

    def _clear(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")

    def done(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.flush()


# -- commands --------------------------------------------------------------------------------

def _settings(args, profile_name: str):
    from .settings import profile
    s = profile(profile_name)
    changes = dict(max_examples=getattr(args, "max_examples", None), budget_s=getattr(args, "budget", None),
                   seed=getattr(args, "seed", None), workers=getattr(args, "workers", None),
                   device=getattr(args, "device", None), sanitizer=getattr(args, "sanitizer", None))
    if getattr(args, "oracle", None):
        changes["oracles"] = tuple(args.oracle)
    if getattr(args, "no_shrink", False):
        changes["shrink"] = False
    return _check_device(s.override(**changes))


def _check_device(s):
    """A sanitizer needs a GPU and the executable; say so before any worker starts."""
    from .errors import InvalidArgument
    from . import _env
    if s.device == "cuda" or s.sanitizer != "none":
        import torch
        if not torch.cuda.is_available():
            need = f"--sanitizer {s.sanitizer}" if s.sanitizer != "none" else "--device cuda"
            raise InvalidArgument(f"{need} needs a CUDA GPU and none is visible here. On the CPU, drop it: the "
                                  f"shadow oracle checks the same reads in Triton's interpreter.")
        if s.sanitizer != "none":
            from .sanitizer.locate import find_sanitizer
            find_sanitizer()
        if s.device is None:
            s = s.override(device="cuda")
    elif s.device is None:
        s = s.override(device=_env.device_type())
    return s


def _export_all(result, corpus: str, target_spec: str) -> None:
    """A repro script beside the corpus for every finding; a failed export loses only the script."""
    from .errors import FuzzrunnerError
    from .repro import export_repro
    user_target = target_spec if ":" in target_spec else None
    for f in result.findings:
        path = Path(corpus) / "repro" / result.target / f"{f.signature.id}.py"
        try:
            f.repro = str(export_repro(f, path, target=user_target))
        except (OSError, FuzzrunnerError) as e:
            print(f"fuzzrunner: warning: no repro for {f.signature.id}: {e}", file=sys.stderr)
            f.repro = None


def _write_reports(results, json_path=None, junit_path=None, html_path=None) -> list:
    from .report import write_reports
    return write_reports(results if len(results) > 1 else results[0], json_path=json_path,
                         junit_path=junit_path, html_path=html_path)


def _check_writable(*paths) -> None:
    from .errors import InvalidArgument
    for p in paths:
        if not p:
            continue
        parent = Path(p).resolve().parent
        if not parent.is_dir():
            raise InvalidArgument(f"cannot write report {p!r}: directory {str(parent)!r} does not exist.")
        if not os.access(parent, os.W_OK) or (Path(p).exists() and not os.access(p, os.W_OK)):
            raise InvalidArgument(f"cannot write report {p!r}: permission denied.")


def _summary(result, out) -> None:
    n = len(result.findings)
    out.write(f"{result.target}: {result.examples} cases in {result.duration_s:.1f} s "
              f"(seed {result.seed}), {n} finding{'s' * (n != 1)}\n")
    for f in result.findings:
        v = f.violation
        out.write(f"\n  {f.signature.short()}\n    {v.message}\n"
                  f"    found after {f.first_found_after_examples} examples ({f.found_after_s:.1f} s); "
                  f"minimal case: {len(f.case.ops)} op{'s' * (len(f.case.ops) != 1)}\n")
        if f.repro:
            out.write(f"    repro: python {f.repro}\n")


def cmd_fuzz(args) -> int:
    from .api import fuzz
    from .target import load_target
    _check_writable(args.report, args.junit, args.html)
    settings = _settings(args, args.profile)
    target = load_target(args.target)
    target.check_faults(args.fault)
    progress = Progress(sys.stderr, settings.budget_s)
    result = fuzz(args.target, faults=args.fault, profile=args.profile, corpus=args.corpus, on_event=progress,
                  **{k: v for k, v in settings.to_dict().items() if k != "oracles" or v is not None})
    progress.done()
    _export_all(result, args.corpus, args.target)
    _summary(result, sys.stdout)
    for p in _write_reports([result], args.report, args.junit, args.html):
        print(f"wrote {p}")
    return EXIT_FINDINGS if result.findings else EXIT_OK


def cmd_replay(args) -> int:
    from .corpus import load_any
    from .engine.campaign import worker_spec
    from .engine.hub import Hub
    from .execute import effective_oracles
    from .settings import Settings
    from .target import load_target
    loaded = [(f, *load_any(f)) for f in args.files]  # every file is checked before anything runs
    settings = _check_device(Settings(device=args.device, sanitizer=args.sanitizer,
                                      oracles=tuple(args.oracle) if args.oracle else None))
    failed = 0
    for path, case, finding in loaded:
        spec = args.target or case.target
        load_target(spec).check_faults(case.faults)
        oracles = effective_oracles(settings.oracles, settings.device, settings.sanitizer)
        with Hub(worker_spec(spec, settings, 0, settings.device), oracles=oracles,
                 timeout_s=settings.case_timeout_s) as hub:
            violations = hub.run(case).violations
        if finding is not None:
            same = [v for v in violations if v.signature.id == finding.signature.id]
            if same:
                failed += 1
                print(f"{path}: REPRODUCED {finding.signature.short()}\n    {same[0].message}")
            elif violations:
                failed += 1
                print(f"{path}: the original violation is gone, but others appear:")
            else:
                print(f"{path}: not reproduced ({finding.signature.short()}): fixed?")
        elif violations:
            failed += 1
            print(f"{path}: {len(violations)} violation{'s' * (len(violations) != 1)}")
        else:
            print(f"{path}: ok")
        if violations and not (finding and any(v.signature.id == finding.signature.id for v in violations)):
            for v in violations:
                print(f"    {v.signature.short()}: {v.message}")
    return EXIT_FINDINGS if failed else EXIT_OK


def cmd_export(args) -> int:
    from .corpus import Finding
    from .repro import export_repro
    finding = Finding.load(args.finding)
    _check_writable(args.output)
    path = export_repro(finding, args.output)
    print(f"wrote {path}: run it with `python {path}` (exit 1 while the bug is there)")
    return EXIT_OK


def cmd_nightly(args) -> int:
    from .api import fuzz
    from .target import BUILTIN
    report_dir = Path(args.report_dir)
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        from .errors import InvalidArgument
        raise InvalidArgument(f"cannot create report directory {str(report_dir)!r}: {e.strerror}.") from None
    _check_writable(report_dir / "report.json")
    settings = _settings(args, args.profile)
    budget = settings.budget_s
    results = []
    names = list(BUILTIN)
    for i, name in enumerate(names):
        per = (budget / len(names)) if budget else None
        progress = Progress(sys.stderr, per, label=f"{name}: ")
        overrides = {k: v for k, v in settings.to_dict().items() if k != "oracles" or v is not None}
        overrides["budget_s"] = per
        r = fuzz(name, profile=args.profile, corpus=args.corpus, on_event=progress, **overrides)
        progress.done()
        _export_all(r, args.corpus, name)
        _summary(r, sys.stdout)
        results.append(r)
    for p in _write_reports(results, str(report_dir / "report.json"), str(report_dir / "junit.xml"),
                            str(report_dir / "report.html")):
        print(f"wrote {p}")
    return EXIT_FINDINGS if any(r.findings for r in results) else EXIT_OK


def cmd_targets(args) -> int:
    from .target import BUILTIN, load_target
    for name in BUILTIN:
        print(f"{name:18} {load_target(name).description}")
    print("\nYour own: --target path/to/file.py:OBJ or --target package.module:OBJ (OBJ a fuzzrunner.Target)")
    return EXIT_OK


def cmd_faults(args) -> int:
    from .runner.faults import Faults
    for name, doc in Faults.describe().items():
        print(f"{name:28} {doc.split('. ')[0].rstrip('.')}.")
    return EXIT_OK


def cmd_doctor(args) -> int:
    import platform
    import hypothesis
    import numpy
    import torch
    import triton
    from . import _env
    print(f"python       {platform.python_version()}")
    print(f"torch        {torch.__version__}")
    print(f"triton       {triton.__version__}")
    print(f"hypothesis   {hypothesis.__version__}")
    print(f"numpy        {numpy.__version__}")
    gpu = torch.cuda.is_available()
    print(f"device       {'cuda: ' + torch.cuda.get_device_name(0) if gpu else 'cpu (no CUDA device)'}")
    print(f"triton mode  {'interpreter (TRITON_INTERPRET=1)' if _env.interpreted() else 'compiled'}")
    from .target import _import_object  # the vllm_lora target's own report (never raises)
    for line in _import_object("targets.vllm_lora:describe_vllm")():
        print(line)
    if not gpu:
        print("sanitizer    not checked: compute-sanitizer needs a GPU (the shadow oracle covers the CPU)")
        return EXIT_OK
    from .errors import SanitizerNotFound
    from .sanitizer.locate import find_sanitizer
    try:
        s = find_sanitizer()
    except SanitizerNotFound as e:
        print(f"sanitizer    missing: {e}")
        return EXIT_ERROR
    print(f"sanitizer    {s.path} ({s.version})")
    from .sanitizer.session import self_test
    ok, detail = self_test()
    print(f"self-test    {'ok' if ok else 'FAILED'}: {detail}")
    return EXIT_OK if ok else EXIT_ERROR


COMMANDS = {"fuzz": cmd_fuzz, "replay": cmd_replay, "export": cmd_export, "nightly": cmd_nightly,
            "targets": cmd_targets, "faults": cmd_faults, "doctor": cmd_doctor}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = _parser().parse_args(argv)
        if not args.command:
            _parser().print_help()
            return EXIT_ERROR
        from . import _env
        _env.configure()  # decide the device (TRITON_INTERPRET) before any command imports Triton
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("fuzzrunner: interrupted; findings so far are in the corpus", file=sys.stderr)
        return 130
    except _UsageError as e:
        print(f"fuzzrunner: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:
        from .errors import FuzzrunnerError
        if debug:
            traceback.print_exc()
        if isinstance(e, FuzzrunnerError):
            print(f"fuzzrunner: error: {e}", file=sys.stderr)
        else:
            print(f"fuzzrunner: internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)",
                  file=sys.stderr)
        return EXIT_ERROR
