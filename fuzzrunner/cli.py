"""The ``fuzzrunner`` command line: parse, pick a profile, print, exit codes. Nothing else.

Exit codes (``fuzz``, ``nightly``): 0 no finding, 1 findings, 2 usage or harness error (one
line on stderr; ``--debug`` shows the traceback), 130 interrupted (a partial report is
written). ``replay``: 1 reproduced, 0 not reproduced, 2 could not run.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from . import names
from .progress import Progress

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, as for every other error
        raise _UsageError(f"{message} (see `fuzzrunner {self.prog.split()[-1]} --help`)"
                          if " " in self.prog else message)


class _UsageError(Exception):
    pass


class _Help(argparse.RawDescriptionHelpFormatter):
    """Defaults shown once: only where the help does not already say it, and only real values."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def _by_profile(field: str) -> str:
    from .settings import PROFILES
    values = ", ".join(f"{name} {getattr(s, field) if getattr(s, field) is not None else 'none'}"
                       for name, s in PROFILES.items())
    return f" (default by profile: {values})"


def _campaign_options(p: argparse.ArgumentParser, profile: str) -> None:
    p.add_argument("--profile", choices=names.PROFILES, default=None,
                   help=f"settings profile (default: {profile}, or ci when the CI environment variable is set)")
    p.add_argument("--max-examples", type=int, metavar="N",
                   help="cases to generate (per target)" + _by_profile("max_examples"))
    p.add_argument("--budget", type=float, metavar="SECONDS", help="time limit" + _by_profile("budget_s"))
    p.add_argument("--seed", type=int, help="seed of the search (default: random and printed; the ci profile: 0)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="shards, each with its own worker (and GPU)" + _by_profile("workers"))
    p.add_argument("--device", choices=names.DEVICES, help="where workers run kernels (default: a GPU if present)")
    p.add_argument("--sanitizer", choices=names.SANITIZERS,
                   help="run workers under compute-sanitizer (GPU) (default: none)")
    p.add_argument("--case-timeout", type=float, metavar="SECONDS",
                   help="a case running longer is a timeout finding" + _by_profile("case_timeout_s"))
    p.add_argument("--max-worker-rss", type=float, metavar="MB",
                   help="recycle a worker whose memory grew past this (default: 3x its size after its first case, "
                        "and at least 1 GiB more); a recycle is counted, not a finding")
    p.add_argument("--max-ops", type=int, metavar="N",
                   help="most ops in one generated case" + _by_profile("max_ops"))
    p.add_argument("--corpus", default="corpus", help="corpus directory (findings, seed cases, example database)")
    p.add_argument("--previous", metavar="REPORT.json",
                   help="an earlier JSON report: mark each finding new / still open / fixed against it "
                        "(docs/report.md)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run the --workers shards as Ray actors: auto (the running cluster, RAY_ADDRESS), local "
                        "(start Ray here) or ray://HOST:PORT; needs pip install 'fuzzrunner[ray]' (docs/cluster.md)")
    p.add_argument("--db", metavar="redis://HOST:PORT/N",
                   help="with --ray: the Hypothesis example database all shards share (default: the corpus' "
                        "database, served by this process)")
    p.add_argument("--steer", action=argparse.BooleanOptionalAction, default=None,
                   help="steer the search towards rarely reached features of the cases (Hypothesis target())")


DEBUG_HELP = "on an internal error, print the traceback as well as the one-line message"


def _parser() -> argparse.ArgumentParser:
    from ._version import __version__
    p = _Parser(prog="fuzzrunner", description="Fuzz GPU model runners for reads of uninitialized or stale "
                                               "LoRA metadata.", formatter_class=_Help)
    p.add_argument("--version", action="version", version=f"fuzzrunner {__version__}")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    f = sub.add_parser("fuzz", help="fuzz one target", formatter_class=_Help,
                       epilog="example:\n  fuzzrunner fuzz --target reference_runner --fault dummy_run_skips_mapping "
                              "--max-examples 300 --seed 1 --report r.json")
    f.add_argument("--target", required=True,
                   help="a built-in name (see `fuzzrunner targets`), FILE.py:OBJ or package.module:OBJ")
    f.add_argument("--fault", action="append", default=[], metavar="NAME",
                   help="turn on a planted bug (repeatable; see `fuzzrunner faults --target T`)")
    _campaign_options(f, "dev")
    f.add_argument("--oracle", action="append", choices=names.oracle_names(), metavar="NAME",
                   help=f"run only these oracles (repeatable: {', '.join(names.oracle_names())}); "
                        f"default: the device's")
    f.add_argument("--no-shrink", action="store_true", help="report findings as first found, without shrinking")
    f.add_argument("--no-cpu-triage", action="store_true",
                   help="on a GPU: do not replay each finding on the CPU under the shadow oracle")
    f.add_argument("--report", metavar="FILE.json", help="write the JSON report")
    f.add_argument("--junit", metavar="FILE.xml", help="write JUnit XML")
    f.add_argument("--html", metavar="FILE.html", help="write the HTML report")
    _verbosity(f)

    r = sub.add_parser("replay", help="replay case or finding files in a worker", formatter_class=_Help,
                       epilog="exit: 1 reproduced, 0 not reproduced, 2 could not run\nexample:\n"
                              "  fuzzrunner replay corpus/findings/reference_runner/*.json\n"
                              "  fuzzrunner replay corpus/expected/reference_runner/*.json   # planted-fault findings")
    r.add_argument("files", nargs="+", metavar="FILE")
    r.add_argument("--target", help="the target spec (FILE.py:OBJ, module:OBJ); default: what the file recorded")
    r.add_argument("--oracle", action="append", choices=names.oracle_names(), metavar="NAME",
                   help="run only these oracles (repeatable)")
    r.add_argument("--device", choices=names.DEVICES, help="where the worker runs kernels")
    r.add_argument("--sanitizer", choices=names.SANITIZERS, default="none", help="run under compute-sanitizer")
    r.add_argument("--debug", action="store_true", help=DEBUG_HELP)

    e = sub.add_parser("export", help="write a standalone repro script for a finding", formatter_class=_Help,
                       epilog="example:\n  fuzzrunner export corpus/findings/reference_runner/3c46bb51a214.json "
                              "-o repro.py && python repro.py")
    e.add_argument("finding", nargs="+", metavar="FINDING.json", help="one finding file (the corpus' findings/ or "
                   "expected/)")
    e.add_argument("-o", "--output", default="repro.py", help="the script to write (or a folder)")
    e.add_argument("--target", help="the target spec the script loads (default: what the finding recorded)")
    e.add_argument("--debug", action="store_true", help=DEBUG_HELP)

    n = sub.add_parser("nightly", help="replay the corpus, fuzz every built-in target, write all reports",
                       formatter_class=_Help,
                       epilog="example:\n  fuzzrunner nightly --budget 3600 --report-dir reports")
    _campaign_options(n, "nightly")
    n.add_argument("--report-dir", default="reports", help="where report.json, junit.xml, report.html go")
    _verbosity(n)

    sub.add_parser("targets", help="list the built-in targets")
    fl = sub.add_parser("faults", help="list the planted-bug switches of a target", formatter_class=_Help)
    fl.add_argument("--target", default="reference_runner", help="the target whose faults to list")
    d = sub.add_parser("doctor", help="versions, device, interpreter mode, compute-sanitizer")
    d.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return p


def _verbosity(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress, no finding as found: warnings and the summary only")
    p.add_argument("-v", "--verbose", action="store_true", help="also print each finding's case as found")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)


# -- settings and checks ----------------------------------------------------------------------

def _profile_name(args) -> str:
    if args.profile:
        return args.profile
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        return "ci"
    return "nightly" if args.command == "nightly" else "dev"


def _settings(args):
    from .settings import profile
    s = profile(_profile_name(args))
    changes = dict(max_examples=args.max_examples, budget_s=args.budget, seed=args.seed, workers=args.workers,
                   device=args.device, sanitizer=args.sanitizer, case_timeout_s=args.case_timeout,
                   max_ops=args.max_ops, steer=args.steer, max_worker_rss_mb=args.max_worker_rss)
    if getattr(args, "oracle", None):
        changes["oracles"] = tuple(args.oracle)
    if getattr(args, "no_shrink", False):
        changes["shrink"] = False
    if getattr(args, "no_cpu_triage", False):
        changes["cpu_triage"] = False
    return _check_device(s.override(**changes), on_cluster=bool(getattr(args, "ray", None)))


def _check_device(s, on_cluster: bool = False):
    """A sanitizer needs a GPU and the executable; say so before any worker starts. On a Ray
    cluster the GPUs (and compute-sanitizer) are the nodes' business, not this process's."""
    from . import _env
    from .errors import InvalidArgument
    if on_cluster and (s.device is not None or s.sanitizer != "none"):
        return s if s.device is not None else s.override(device="cuda")
    if s.device == "cuda" or s.sanitizer != "none":
        if not _env.cuda_present():
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


def _check_writable_file(p) -> None:
    from .errors import InvalidArgument
    if not p:
        return
    path = Path(p)
    if path.is_dir():
        raise InvalidArgument(f"cannot write {p!r}: it is a directory; name a file.")
    parent = path.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)  # like the corpus: a new report folder is made
    except OSError as e:
        raise InvalidArgument(f"cannot write {p!r}: cannot create directory {str(parent)!r} ({e.strerror}).") from None
    if not parent.is_dir():
        raise InvalidArgument(f"cannot write {p!r}: {str(parent)!r} is not a directory.")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InvalidArgument(f"cannot write {p!r}: permission denied.")
    import tempfile
    try:  # a real write: root passes every access check, and some file systems refuse new files
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".fuzzrunner-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InvalidArgument(f"cannot write {p!r}: {e.strerror or e}.") from None


def _check_cluster(args) -> None:
    """``--ray`` needs Ray here (the one install line if not); ``--db`` needs ``--ray`` and a Redis URL."""
    from .errors import InvalidArgument
    if args.db and not args.ray:
        raise InvalidArgument(f"--db {args.db} is the example database of Ray shards: add --ray ADDRESS (a local "
                              f"campaign keeps its database in the corpus).")
    if args.db:
        from .engine.shared_db import check_url
        check_url(args.db)
    if args.ray:
        from .engine.ray_shards import import_ray
        import_ray()


def _check_corpus(corpus: str) -> None:
    """The corpus must take findings before the first case runs, not after the first finding."""
    from .errors import InvalidArgument
    path = Path(corpus)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgument(f"cannot use corpus {corpus!r}: {e.strerror or e}.") from None
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        raise InvalidArgument(f"cannot use corpus {corpus!r}: not a writable directory. Choose another with "
                              f"--corpus DIR.")


# -- output -----------------------------------------------------------------------------------

def _export_all(result, corpus: str) -> None:
    """A repro script beside the corpus for every finding; a failed export loses only the script."""
    from .corpus import safe_name
    from .errors import FuzzrunnerError
    from .repro import export_repro
    faults = "+".join(sorted(result.faults))
    prefix = safe_name(faults) + "." if faults else ""  # as corpus.Corpus names expected findings
    for f in result.findings:
        path = Path(corpus) / "repro" / safe_name(result.target) / f"{prefix}{f.id}.py"
        try:
            f.repro = str(export_repro(f, path))
        except (OSError, FuzzrunnerError) as e:
            print(f"fuzzrunner: warning: no repro for {f.id}: {e}", file=sys.stderr)
            f.repro = None


def _summary(result, out) -> None:
    from .finding import render
    from .report.json_report import cluster_text
    n = len(result.findings)
    out.write(f"{result.target}: {result.examples} cases ({result.generated} generated, {result.invalid} invalid) "
              f"in {result.duration_s:.1f} s (seed {result.seed}), stopped: {result.stop_reason or 'unknown'}; "
              f"{n} finding{'s' * (n != 1)}\n")
    if getattr(result, "cluster", None):
        out.write(f"  {cluster_text(result.cluster)}\n")
    if result.known_crash_skips:
        out.write(f"  {result.known_crash_skips} case(s) not run on the GPU: a CPU pre-check showed they re-hit a "
                  f"known crash\n")
    if getattr(result, "worker_recycles", 0):
        out.write(f"  {result.worker_recycles} worker recycle(s): a worker's memory grew past the limit "
                  f"(--max-worker-rss); not crashes, not findings\n")
    for f in result.findings:
        out.write("\n  " + render(f, indent="    ") + "\n")
    for f in result.flaky:
        out.write(f"\n  flaky (kept apart): {f.signature.short()}\n")
    _coverage_line(result, out)
    for w in result.warnings:
        out.write(f"  warning: {w}\n")
    for e in result.errors:
        out.write(f"  ERROR: {e}\n")


def _coverage_line(result, out) -> None:
    """'N declared features never reached': a clean pass says nothing about states never reached."""
    from .coverage import summary_line
    coverage = getattr(result, "coverage", None)
    if coverage is not None and (coverage.declared or coverage.features):
        out.write(f"  {summary_line(coverage.to_dict())}\n")


def _exit_code(results) -> int:
    if any(r.stop_reason == "interrupted" for r in results):
        return EXIT_INTERRUPTED
    if any(r.errors for r in results):
        return EXIT_ERROR
    return EXIT_FINDINGS if any(r.findings for r in results) else EXIT_OK


def _load_previous(path: str | None) -> dict | None:
    """The --previous report, read before any case runs: a bad one costs nothing."""
    from .errors import InvalidArgument, InvalidCase
    from .report import load_report
    if not path:
        return None
    try:
        return load_report(path)
    except InvalidCase as e:
        raise InvalidArgument(f"--previous: {e} Pass the JSON report of an earlier run, or drop --previous.") from None


def _report(results, previous: dict | None, previous_path: str | None, skipped: dict | None = None) -> dict:
    from .report import build_report
    return build_report(results, previous=previous, previous_source=previous_path or "", skipped=skipped)


def _print_trend(report: dict) -> None:
    from .report.trend import trend_text
    for run in report["runs"]:
        sys.stdout.write(trend_text(run, report.get("previous")))


def _write_reports(report: dict, json_path=None, junit_path=None, html_path=None) -> list:
    from .report import write_reports
    return write_reports(report, json_path=json_path, junit_path=junit_path, html_path=html_path)


# -- commands ---------------------------------------------------------------------------------

def cmd_fuzz(args) -> int:
    from .api import fuzz
    from .target import load_target, resolve_spec
    for p in (args.report, args.junit, args.html):
        _check_writable_file(p)
    _check_corpus(args.corpus)
    _check_cluster(args)
    settings = _settings(args)
    spec = _absolute_spec(resolve_spec(args.target)) if ":" in args.target else args.target
    load_target(spec).check_faults(args.fault)
    previous = _load_previous(args.previous)
    progress = Progress(sys.stderr, settings, quiet=args.quiet, verbose=args.verbose)
    overrides = {k: v for k, v in settings.to_dict().items() if k != "oracles" or v is not None}
    result = fuzz(spec, faults=args.fault, profile=_profile_name(args), corpus=args.corpus, on_event=progress,
                  ray=args.ray, db=args.db, **overrides)
    progress.done(result)
    _export_all(result, args.corpus)
    _summary(result, sys.stdout)
    report = _report([result], previous, args.previous)
    _print_trend(report)
    for p in _write_reports(report, args.report, args.junit, args.html):
        print(f"wrote {p}")
    return _exit_code([result])


def _absolute_spec(spec: str) -> str:
    """A ``file.py:OBJ`` spec with an absolute path: findings and repro scripts work from anywhere."""
    module, _, obj = spec.rpartition(":")
    if module.endswith(".py") or os.sep in module:
        return f"{os.path.abspath(module)}:{obj}"
    return spec


def _replay_one(replayer, path, args) -> int:
    """1 reproduced, 0 not, 2 could not run; prints one verdict line (and what it saw)."""
    from .corpus import load_any
    from .errors import FuzzrunnerError
    from .target import BUILTIN
    try:
        case, finding = load_any(path)
        spec = _absolute_spec(args.target) if args.target else (finding.target_spec if finding and
                                                                 finding.target_spec else case.target)
        if not args.target and ":" not in spec and spec not in BUILTIN:
            print(f"fuzzrunner: error: could not run {path}: it is a case of target {spec!r}, which is not "
                  f"built in: name yours with --target path/to/file.py:OBJ", file=sys.stderr)
            return EXIT_ERROR
        violations = replayer.run(case, spec)
    except FuzzrunnerError as e:
        message = str(e) if str(e).startswith(str(path)) else f"{path}: {e}"
        print(f"fuzzrunner: error: could not run {message}", file=sys.stderr)
        return EXIT_ERROR
    if finding is not None:
        same = finding.reproduced_by(violations)
        if same:
            moved = finding.moved(violations)
            note = f" (its access is now in {moved[0].site or moved[0].location}: a renamed or moved function)" \
                if moved else ""
            print(f"{path}: REPRODUCED {finding.signature.short()}{note}\n    {same[0].message}")
            return EXIT_FINDINGS
        if not violations:
            print(f"{path}: NOT REPRODUCED ({finding.signature.short()})")
            return EXIT_OK
        print(f"{path}: the original violation is gone, but others appear:")
    elif violations:
        print(f"{path}: {len(violations)} violation{'s' * (len(violations) != 1)}")
    else:
        print(f"{path}: ok")
        return EXIT_OK
    for v in violations:
        print(f"    {v.signature.short()}: {v.message}")
    return EXIT_FINDINGS


def cmd_replay(args) -> int:
    from .engine.replay import Replayer
    from .settings import Settings
    settings = _check_device(Settings(device=args.device, sanitizer=args.sanitizer,
                                      oracles=tuple(args.oracle) if args.oracle else None))
    with Replayer(settings) as replayer:
        codes = [_replay_one(replayer, path, args) for path in args.files]
    # a file that could not run is never hidden behind one that reproduced
    return EXIT_ERROR if EXIT_ERROR in codes else EXIT_FINDINGS if EXIT_FINDINGS in codes else EXIT_OK


def cmd_export(args) -> int:
    from .errors import InvalidArgument
    from .finding import Finding
    from .repro import export_repro
    if len(args.finding) > 1:
        shown = ", ".join(args.finding[:3]) + (", ..." if len(args.finding) > 3 else "")
        raise InvalidArgument(f"export takes one finding file; {len(args.finding)} were given ({shown}): "
                              f"export each, or pick one.")
    finding = Finding.load(args.finding[0])
    if not Path(args.output).is_dir():
        _check_writable_file(args.output)
    path = export_repro(finding, args.output, target=_absolute_spec(args.target) if args.target else None)
    print(f"wrote {path}: run it with `python {path}` (exit 1 reproduced, 0 not, 2 could not run)")
    return EXIT_OK


def _nightly_target(name, args, settings, per_budget, report_dir: Path, previous: dict | None):
    """One target of the nightly: fuzz it, write its own reports at once; (result or None, error)."""
    from .api import fuzz
    from .errors import FuzzrunnerError
    overrides = {k: v for k, v in settings.to_dict().items() if k != "oracles" or v is not None}
    overrides["budget_s"] = per_budget
    progress = Progress(sys.stderr, settings.override(budget_s=per_budget), label=f"{name}: ", quiet=args.quiet,
                        verbose=args.verbose)  # this target's share of the budget, for its ETA
    try:
        r = fuzz(name, profile=_profile_name(args), corpus=args.corpus, on_event=progress, ray=args.ray, db=args.db,
                 **overrides)
    except FuzzrunnerError as e:
        progress.done(None)
        return None, f"{name}: {e}"
    progress.done(r)
    _export_all(r, args.corpus)
    _summary(r, sys.stdout)
    report = _report([r], previous, args.previous)
    _print_trend(report)
    _write_reports(report, str(report_dir / f"{name}.json"), str(report_dir / f"{name}.xml"))
    return r, None


def cmd_nightly(args) -> int:
    from .errors import InvalidArgument
    from .target import BUILTIN, unavailable
    report_dir = Path(args.report_dir)
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgument(f"cannot create report directory {str(report_dir)!r}: {e.strerror}.") from None
    for name in ("report.json", "junit.xml", "report.html"):
        _check_writable_file(report_dir / name)
    _check_corpus(args.corpus)
    _check_cluster(args)
    settings = _settings(args)
    previous = _load_previous(args.previous)
    skipped = {n: reason for n in BUILTIN if (reason := unavailable(n))}
    names_ = [n for n in BUILTIN if not _skipped(n, skipped.get(n))]
    per = (settings.budget_s / len(names_)) if settings.budget_s else None
    results: list = []
    errors: list = []
    with _cluster(args):
        try:
            _nightly_targets(names_, args, settings, per, report_dir, previous, results, errors)
        finally:  # the combined report, also after a failure or an interruption
            _write_combined(results, previous, args, skipped, report_dir)
    for message in errors:
        print(f"fuzzrunner: error: {message}", file=sys.stderr)
    code = _exit_code(results)
    code = code if code in (EXIT_INTERRUPTED, EXIT_ERROR) or not errors else EXIT_ERROR
    print(_nightly_line(results, skipped, errors, code))
    return code


def _nightly_line(results: list, skipped: dict, errors: list, code: int) -> str:
    """The nightly's last line: every target at once, and what the exit code says."""
    ran = ", ".join(f"{r.target} {r.examples} cases {len(r.findings)} finding{'s' * (len(r.findings) != 1)}"
                    for r in results) or "no target ran"
    notes = [f"{len(skipped)} skipped" if skipped else "", f"{len(errors)} failed" if errors else ""]
    meaning = {0: "no finding", 1: "findings", EXIT_INTERRUPTED: "interrupted"}.get(code, "error")
    return f"nightly: {ran}{''.join(f'; {n}' for n in notes if n)}: exit {code} ({meaning})"


def _cluster(args):
    """One Ray session for all the nightly's targets (started once), or nothing without --ray."""
    if not args.ray:
        from contextlib import nullcontext
        return nullcontext()
    from .engine.ray_shards import ray_session
    return ray_session(args.ray)


def _nightly_targets(names_, args, settings, per, report_dir: Path, previous, results: list, errors: list) -> None:
    for name in names_:
        r, error = _nightly_target(name, args, settings, per, report_dir, previous)
        results += [r] if r is not None else []
        errors += [error] if error else []
        if r is not None and r.stop_reason == "interrupted":
            break


def _write_combined(results: list, previous, args, skipped: dict, report_dir: Path) -> None:
    if results:
        for p in _write_reports(_report(results, previous, args.previous, skipped), str(report_dir / "report.json"),
                                str(report_dir / "junit.xml"), str(report_dir / "report.html")):
            print(f"wrote {p}")


def _skipped(name: str, reason: str | None) -> bool:
    if reason:
        print(f"fuzzrunner: skipping target {name}: {reason}", file=sys.stderr)
    return bool(reason)


def cmd_targets(args) -> int:
    from .target import BUILTIN, load_target, unavailable
    for name in BUILTIN:
        reason = unavailable(name)
        print(f"{name:18} {reason and f'(unavailable: {reason})' or load_target(name).description}")
    print("\nYour own: --target path/to/file.py:OBJ or --target package.module:OBJ (OBJ a fuzzrunner.Target)")
    return EXIT_OK


def cmd_faults(args) -> int:
    from .target import load_target
    target = load_target(args.target)
    if not target.faults:
        print(f"target {target.name} has no planted faults")
    else:
        print(f"planted faults of target {target.name} (turn one on with `fuzz --target {args.target} --fault NAME`):")
    for name in target.faults:
        doc = target.fault_descriptions.get(name, "")
        print(f"{name:28} {doc.split('. ')[0].rstrip('.')}." if doc else name)
    return EXIT_OK


def cmd_doctor(args) -> int:
    from .doctor import report
    lines, ok = report()
    for line in lines:
        print(line)
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
        from .engine.lifeline import sigterm_as_interrupt
        sigterm_as_interrupt()
        _env.configure()  # decide the device (TRITON_INTERPRET) before any command imports Triton
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("fuzzrunner: interrupted; findings so far are in the corpus", file=sys.stderr)
        return EXIT_INTERRUPTED
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
