"""The ``fuzzrunner`` command line: parse, pick a profile, print, exit codes. Nothing else.

Exit codes (``fuzz``, ``nightly``): 0 no finding, 1 findings, 2 usage or harness error (one
line on stderr; ``--debug`` shows the traceback), 130 interrupted: SIGINT, SIGTERM or SIGHUP at any
point (the reports are written: partial, with ``stop_reason`` interrupted, if the campaign was cut
short; a second signal does not cut the clean-up short). ``replay``: 1 reproduced, 0 not
reproduced, 2 could not run.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import traceback
from pathlib import Path

from . import names
from .progress import Progress
from .safe_write import check_distinct_files, check_outputs
from .target_spec import TargetSpec
from .text import describe, plural, safe_str

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a value such as -inf or -1e3 is a (bad) number to validate, not an unknown option
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf|infinity|nan)$",
                                                   re.IGNORECASE)

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


def _default(field: str) -> str:
    from .settings import Settings
    return f"{getattr(Settings, field):g}"


def _campaign_options(p: argparse.ArgumentParser, profile: str) -> None:
    p.add_argument("--profile", choices=names.PROFILES, default=None,
                   help=f"settings profile (default: {profile}, or ci when the CI environment variable is set)")
    p.add_argument("--max-examples", type=int, metavar="N",
                   help="cases to generate (per target)" + _by_profile("max_examples"))
    p.add_argument("--budget", type=float, metavar="SECONDS",
                   help="time limit of the whole command: start-up, search, CPU triage, reports"
                        + _by_profile("budget_s"))
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
                              "--max-examples 20 --seed 1 --report r.json")
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
    f.add_argument("--precheck-workers", type=int, metavar="N",
                   help="on a GPU with --workers 1: search in N shards so that N CPU pre-checks run at once "
                        "(default: a quarter of the CPUs, at most 8)")
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
    r.add_argument("--case-timeout", type=float, metavar="SECONDS",
                   help="a case running longer is a timeout (default: the one each finding was found under, "
                        f"else {_default('case_timeout_s')} s)")
    r.add_argument("--debug", action="store_true", help=DEBUG_HELP)

    e = sub.add_parser("export", help="write a standalone repro script for a finding", formatter_class=_Help,
                       epilog="example:\n  fuzzrunner export corpus/findings/reference_runner/3c46bb51a214.json "
                              "-o repro.py && python repro.py\n"
                              "  fuzzrunner export corpus/findings/reference_runner/*.json -o repros/")
    e.add_argument("finding", nargs="+", metavar="FINDING.json", help="finding files (the corpus' findings/ or "
                   "expected/)")
    e.add_argument("-o", "--output", default="repro.py",
                   help="the script to write, or a folder for one repro_<id>.py per finding (several files: a "
                        "folder, made if missing)")
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
    d.add_argument("--engines", action="store_true",
                   help="also import the engine targets (vLLM, SGLang: 12-25 s) and list what each drives; "
                        "without it each is said set up or not, without importing it")
    d.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    ct = sub.add_parser("check-target", help="can fuzzrunner test this target, and where (CPU, GPU)?",
                        formatter_class=_Help,
                        epilog="example:\n  fuzzrunner check-target examples/toy_runner_target.py:TARGET")
    ct.add_argument("target", metavar="SPEC", help="a built-in name, FILE.py:OBJ or package.module:OBJ")
    ct.add_argument("--timeout", type=float, metavar="SECONDS", default=None,
                    help="stop the case's run on a device after this long: a hang (default: 120)")
    ct.add_argument("--debug", action="store_true", help=DEBUG_HELP)
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
    if getattr(args, "precheck_workers", None) is not None:
        changes["precheck_workers"] = args.precheck_workers
    return _check_device(s.override(**changes), on_cluster=bool(getattr(args, "ray", None)))


def _check_device(s, on_cluster: bool = False):
    """The settings, with the environment's defaults (``env_defaults``), their device resolved
    (``Context.resolve``): a sanitizer needs a GPU and the executable, said before any worker starts; on a
    Ray cluster those are the nodes' business."""
    from . import env_defaults
    from .context import Context
    flag = f"--sanitizer {s.sanitizer}" if s.sanitizer != "none" else "--device cuda"
    s = env_defaults.apply(s)
    return s.override(device=Context.resolve(s, on_cluster=on_cluster, asked_as=flag).device)


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
    _make_folder(corpus, "--corpus", "corpus")


def _make_folder(folder, flag: str, what: str) -> None:
    from .safe_write import check_folder
    check_folder(folder, f"{what} {str(folder)!r}", f"Choose another with {flag} DIR.")


# -- output -----------------------------------------------------------------------------------

def _export_all(result, corpus: str) -> None:
    """A repro script in the corpus for every finding (``repro.save_repros``); a failed one is a warning."""
    from .repro import save_repros
    for warning in save_repros(result, corpus):
        print(f"fuzzrunner: warning: {warning}", file=sys.stderr)


def _summary(result, out) -> None:
    from .engine.result import stop_text
    from .finding import render
    from .report.json_report import cluster_text, skip_lines
    n = len(result.findings)
    out.write(f"{result.target}: {_cases_text(result)} in {result.duration_s:.1f} s (seed {result.seed}), "
              f"stopped: {stop_text(result.stop_reason)}; {n} finding{'s' * (n != 1)}\n")
    if getattr(result, "cluster", None):
        out.write(f"  {cluster_text(result.cluster)}\n")
    if getattr(result, "code_under_test", None):
        from .target import describe_code
        out.write(f"  code under test: {describe_code(result.code_under_test)}\n")
    causes = [{"id": i, **c} for i, c in result.known_crash_causes.items()]
    for line in skip_lines(result.known_crash_skips, causes, result.generated):
        out.write(f"  {line}\n")
    for c in result.tool_limitations.values():
        out.write(f"  tool limitation ({c['count']} case(s)): {c['message']}\n")
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


def _cases_text(result) -> str:
    """'105 cases: 5 replayed, 100 generated (0 invalid), 0 shrinking': every number the run prints
    (coverage's valid cases = replayed + generated - invalid; "found after N examples" counts them all)."""
    replayed, shrinking = len(result.replayed), max(0, result.examples - result.generated)
    return (f"{plural(replayed + result.examples, 'case')}: {replayed} replayed (corpus and seeds), {result.generated} "
            f"generated ({result.invalid} invalid), {shrinking} shrinking")


def _coverage_line(result, out) -> None:
    """'N declared features never reached': a clean pass says nothing about states never reached."""
    from .coverage import summary_line
    coverage = getattr(result, "coverage", None)
    if coverage is not None and (coverage.declared or coverage.features):
        out.write(f"  {summary_line(coverage.to_dict())}\n")


def _exit_code(results) -> int:
    from .engine.result import StopReason
    if any(r.stop_reason is StopReason.INTERRUPTED for r in results):
        return EXIT_INTERRUPTED
    if any(r.errors for r in results):
        return EXIT_ERROR
    return EXIT_FINDINGS if any(r.findings for r in results) else EXIT_OK


def _load_previous(path: str | None, targets=()) -> dict | None:
    """The --previous report, read before any case runs: a bad one costs nothing. A report that ran none of
    ``targets`` (the campaign's) is refused: it would compare nothing, every finding "new", nothing "fixed"."""
    from .errors import InvalidArgument, InvalidCase
    from .report import load_report
    if path is None:
        return None
    if not path:
        raise InvalidArgument("--previous: an empty path names no report; give the JSON report of an earlier run, "
                              "or drop --previous.")
    try:
        previous = load_report(path)
    except InvalidCase as e:
        raise InvalidArgument(f"--previous: {e} Pass the JSON report of an earlier run, or drop --previous.") from None
    ran = sorted({r.get("target") for r in previous.get("runs", []) if isinstance(r.get("target"), str)})
    if targets and not set(ran) & set(targets):
        raise InvalidArgument(f"--previous {path!r} has no run of {' or '.join(map(repr, targets))} (it ran: "
                              f"{', '.join(ran) or 'nothing'}): there would be nothing to compare. Pass a report of "
                              f"this target's earlier run, or drop --previous.")
    return previous


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
    from .target import load_target
    outputs = {"--report": args.report, "--junit": args.junit, "--html": args.html}
    check_distinct_files(outputs)
    settings = _settings(args)  # bad flags and targets first: a refused command leaves no folder behind
    given = TargetSpec.parse(args.target)
    spec = given.absolute() if not given.is_name else args.target
    name = spec
    try:
        target = load_target(spec)
        name = target.name
        target.check_faults(args.fault)
        check_outputs(outputs, {"the target file": TargetSpec.parse(spec).file})
        previous = _load_previous(args.previous, [target.name])  # before the corpus: a refused command leaves no folder
        _check_corpus(args.corpus)
        _check_cluster(args)
        progress = Progress(sys.stderr, settings, quiet=args.quiet, verbose=args.verbose)
        result = fuzz(spec, settings=settings, faults=args.fault, corpus=args.corpus, on_event=progress,
                      ray=args.ray, db=args.db, started=args.started)  # the budget counts from the command's start
    except KeyboardInterrupt:  # stopped before the campaign had a result: an empty interrupted report
        return _interrupted_early(args, name, settings)
    with args.stops.held():  # from here on a stop signal is noted: the reports are written, then 130
        progress.done(result)
        _export_all(result, args.corpus)
        _summary(result, sys.stdout)
        report = _report([result], previous, args.previous)
        _print_trend(report)
        for p in _write_reports(report, args.report, args.junit, args.html):
            print(f"wrote {p}")
    return EXIT_INTERRUPTED if args.stops.stopped else _exit_code([result])


def _interrupted_early(args, target: str, settings) -> int:
    """A stop signal before the campaign had a result (the target loading, the workers starting): the reports
    say so (no case ran), if their paths can be written; exit 130. ``target``: its name (its spec if it was
    not loaded yet)."""
    from .engine.result import CampaignResult, StopReason
    from .errors import FuzzrunnerError
    with args.stops.held():
        _error("interrupted before the campaign ran a case; findings of earlier runs are in the corpus")
        result = CampaignResult(target, settings, settings.seed, tuple(args.fault), stop_reason=StopReason.INTERRUPTED)
        try:
            check_outputs({"--report": args.report, "--junit": args.junit, "--html": args.html})
            for p in _write_reports(_report([result], None, None), args.report, args.junit, args.html):
                print(f"wrote {p}")
        except (FuzzrunnerError, OSError) as e:
            _error(f"no report: {e}")
    return EXIT_INTERRUPTED


def _replay_one(replayer, path, args) -> int:
    """1 a violation shows, 0 none, 2 could not run or check; prints one verdict line (and what it saw)."""
    from .corpus import load_any
    from .errors import FuzzrunnerError
    from .target import BUILTIN
    try:
        case, finding = load_any(path)
        spec = TargetSpec.parse(args.target).absolute() if args.target else \
            (finding.target_spec if finding and finding.target_spec else case.target)
        if not args.target and TargetSpec.parse(spec).is_name and spec not in BUILTIN:
            _error(f"could not run {path}: it is a case of target {spec!r}, which is not built in: name yours "
                   f"with --target path/to/file.py:OBJ")
            return EXIT_ERROR
        replay = replayer.verdict(case, spec, finding, _replay_timeout(args, finding))
    except FuzzrunnerError as e:
        message = str(e) if str(e).startswith(str(path)) else f"{path}: {e}"
        _error(f"could not run {message}")
        return EXIT_ERROR
    for v in replay.limits:
        print(f"fuzzrunner: warning: {path}: tool limitation: {v.message}", file=sys.stderr)
    _say_replay(path, replay, finding)
    return _replay_exits()[replay.verdict]


def _replay_exits() -> dict:
    from .engine.replay import Verdict
    return {Verdict.REPRODUCED: EXIT_FINDINGS, Verdict.MOVED: EXIT_FINDINGS, Verdict.OTHERS: EXIT_FINDINGS,
            Verdict.GONE: EXIT_OK, Verdict.CANNOT_CHECK: EXIT_ERROR, Verdict.LIMITED: EXIT_ERROR}


def _say_replay(path, replay, finding) -> None:
    """The verdict's line(s): on stdout what was seen, on stderr why nothing could be concluded."""
    from .engine.replay import Verdict
    verdict, violations = replay.verdict, replay.violations
    if verdict is Verdict.LIMITED:
        print(f"fuzzrunner: error: could not run {path}: a tool limitation (above)", file=sys.stderr)
    elif verdict is Verdict.CANNOT_CHECK:
        _error(f"could not check {path}: not reproduced, but {replay.unchecked}")
    elif verdict in (Verdict.REPRODUCED, Verdict.MOVED):
        where = replay.same[0].site or replay.same[0].location  # a moved bug's "same" is its access elsewhere
        note = f" (its access is now in {where}: a renamed or moved function or file)" \
            if verdict is Verdict.MOVED else ""
        print(f"{path}: REPRODUCED {finding.signature.short()}{note}\n    {replay.same[0].message}")
    elif verdict is Verdict.GONE:
        print(f"{path}: NOT REPRODUCED ({finding.signature.short()})" if finding is not None else f"{path}: ok")
    else:  # OTHERS
        print(f"{path}: the original violation is gone, but others appear:" if finding is not None
              else f"{path}: {len(violations)} violation{'s' * (len(violations) != 1)}")
        for v in violations:
            print(f"    {v.signature.short()}: {v.message}")


def _replay_timeout(args, finding) -> float | None:
    """--case-timeout, else the timeout the finding was found under (a timeout finding of a 5 s campaign
    must not wait 120 s), else the default."""
    return args.case_timeout or (finding.case_timeout_s if finding is not None else None)


def cmd_replay(args) -> int:
    from .engine.replay import Replayer
    from .settings import Settings
    extra = {"case_timeout_s": args.case_timeout} if args.case_timeout is not None else {}
    settings = _check_device(Settings(device=args.device, sanitizer=args.sanitizer,
                                      oracles=tuple(args.oracle) if args.oracle else None, **extra))
    with Replayer(settings) as replayer:
        codes = [_replay_one(replayer, path, args) for path in args.files]
    # a file that could not run is never hidden behind one that reproduced
    return EXIT_ERROR if EXIT_ERROR in codes else EXIT_FINDINGS if EXIT_FINDINGS in codes else EXIT_OK


def cmd_export(args) -> int:
    """One finding: the script ``-o`` names (or ``repro_<id>.py`` in that folder). Several (a glob):
    ``-o`` is a folder (made if missing), one ``repro_<id>.py`` each; a file that cannot be read is
    said and skipped, the others are written, and the exit is 2. No script replaces a finding file
    being exported (``-o F.json`` of ``F.json``, through a link or another spelling too)."""
    from .errors import FuzzrunnerError, InvalidArgument
    from .finding import Finding
    from .repro import export_repro
    if not args.output:
        raise InvalidArgument("-o: an empty path names no file; give a script (-o repro.py) or a folder (-o repros/).")
    out = Path(args.output)
    if len(args.finding) > 1:
        if out.suffix == ".py" and not out.is_dir():
            raise InvalidArgument(f"{len(args.finding)} finding files were given and -o {args.output!r} names one "
                                  f"script: give a folder (-o DIR) for one repro_<id>.py each, or one file.")
        _make_folder(out, "-o", "the repro scripts' folder")
    elif not out.is_dir():
        check_outputs({"-o": args.output}, {"the finding file being exported": args.finding[0]})
    target = TargetSpec.parse(args.target).absolute() if args.target else None
    code, written = EXIT_OK, set[Path]()
    for file in args.finding:
        try:
            finding = Finding.load(file)
            dest = _export_path(out, finding, written, args.finding)
            path = export_repro(finding, dest, target=target)
        except FuzzrunnerError as e:
            if len(args.finding) == 1:
                raise
            _error(str(e))
            code = EXIT_ERROR
            continue
        written.add(path)
        _said_written(path)
    return code


def _said_written(path: Path) -> None:
    """``wrote X: run it with ...``; for a script written to a stream (``-o /dev/stdout``, a FIFO), on
    stderr without the hint: the stream holds the script alone."""
    from .safe_write import streamed
    if streamed(path):
        print(f"wrote the repro script to {path}", file=sys.stderr)
    else:
        print(f"wrote {path}: run it with `python {path}` (exit 1 reproduced, 0 not, 2 could not run)")


def _export_path(out: Path, finding, written: set, inputs: list) -> Path:
    """Where one finding's script goes; never over the first of one bug saved twice (findings/ and
    expected/), never over a finding file being exported."""
    from .errors import InvalidArgument
    from .safe_write import same_file
    dest = out / f"repro_{finding.id}.py" if out.is_dir() else out
    if dest in written:
        dest = dest.with_name(f"{dest.stem}_{len(written)}.py")
    clash = next((f for f in inputs if same_file(dest, f)), None)
    if clash is not None:
        raise InvalidArgument(f"cannot write the repro script {str(dest)!r}: it is the finding file {clash!r} being "
                              f"exported; name another path with -o.")
    return dest


class _NightlyHooks:
    """What the nightly shows of each target: progress, repro export, the summary and the trend."""

    def __init__(self, args):
        self.args, self.progress = args, None

    def start(self, name: str, settings):
        self.progress = Progress(sys.stderr, settings, label=f"{name}: ", quiet=self.args.quiet,
                                 verbose=self.args.verbose)  # this target's share of the budget, for its ETA
        return self.progress

    def done(self, name: str, result) -> None:
        self.progress.done(result)
        if result is not None:
            _export_all(result, self.args.corpus)
            _summary(result, sys.stdout)

    def reported(self, name: str, report: dict) -> None:
        _print_trend(report)

    def skipped(self, name: str, reason: str) -> None:
        print(f"fuzzrunner: skipping target {name}: {reason}", file=sys.stderr)

    def written(self, paths: list) -> None:
        for p in paths:
            print(f"wrote {p}")


def cmd_nightly(args) -> int:
    from .nightly import NightlyHooks, run_nightly
    from .target import BUILTIN
    settings = _settings(args)  # bad flags first: a refused command leaves no folder behind
    _make_folder(args.report_dir, "--report-dir", "report folder")
    report_dir = Path(args.report_dir)
    names = ["report.json", "junit.xml", "report.html", *(f"{t}.{ext}" for t in BUILTIN for ext in ("json", "xml"))]
    check_outputs({f"--report-dir's {name}": str(report_dir / name) for name in names})
    previous = _load_previous(args.previous, list(BUILTIN))  # before the corpus: a refused command leaves no folder
    _check_corpus(args.corpus)
    _check_cluster(args)
    shown = _NightlyHooks(args)
    hooks = NightlyHooks(start=shown.start, done=shown.done, reported=shown.reported, skipped=shown.skipped,
                         written=shown.written)
    run = run_nightly(settings, report_dir, corpus=args.corpus, previous=previous, previous_path=args.previous or "",
                      ray=args.ray, db=args.db, hooks=hooks)
    with args.stops.held():
        for message in run.errors:
            _error(message)
        code = EXIT_INTERRUPTED if args.stops.stopped else _exit_code(run.results)
        code = code if code in (EXIT_INTERRUPTED, EXIT_ERROR) or not run.errors else EXIT_ERROR
        print(_nightly_line(run.results, run.skipped, run.errors, code))
    return code


def _nightly_line(results: list, skipped: dict, errors: list, code: int) -> str:
    """The nightly's last line: every target at once, and what the exit code says."""
    ran = ", ".join(f"{r.target} {plural(len(r.replayed) + r.examples, 'case')} {plural(len(r.findings), 'finding')}"
                    for r in results) or "no target ran"
    notes = [f"{len(skipped)} skipped" if skipped else "", f"{len(errors)} failed" if errors else ""]
    meaning = {0: "no finding", 1: "findings", EXIT_INTERRUPTED: "interrupted"}.get(code, "error")
    return f"nightly: {ran}{''.join(f'; {n}' for n in notes if n)}: exit {code} ({meaning})"


def cmd_targets(args) -> int:
    from .catalog import about
    from .target import BUILTIN
    for name in BUILTIN:  # without importing any of them (vLLM alone took 12-25 s): catalog.py
        known = about(name)
        said = f"(unavailable: {known.unavailable})" if known.unavailable else \
            known.description + (f" (engine: {known.engine})" if known.engine else "")
        print(f"{name:18} {said}")
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
    lines, ok = report(engines=args.engines)
    for line in lines:
        print(line)
    return EXIT_OK if ok else EXIT_ERROR


def cmd_check_target(args) -> int:
    import math

    from .check_target import CHILD_TIMEOUT_S, check_target
    from .errors import InvalidArgument
    timeout = CHILD_TIMEOUT_S if args.timeout is None else args.timeout
    if not (math.isfinite(timeout) and timeout > 0):
        raise InvalidArgument(f"--timeout {args.timeout!r} must be a positive number of seconds: the longest one "
                              f"case may run on a device (e.g. --timeout 300).")

    def say(line: str) -> None:  # progress, as it happens; the verdict's lines go to stdout at the end
        print(f"check-target: {line}", file=sys.stderr, flush=True)
    lines, code = check_target(args.target, timeout, say)
    for line in lines:
        print(line)
    return code


NO_DEVICE = {"targets"}  # commands that run no kernel and load no target: no device set-up, no torch import
COMMANDS = {"check-target": cmd_check_target, "fuzz": cmd_fuzz, "replay": cmd_replay, "export": cmd_export,
            "nightly": cmd_nightly, "targets": cmd_targets, "faults": cmd_faults, "doctor": cmd_doctor}


class _SafeStream:
    """stdout or stderr that never ends a command. Once its reader has gone (``fuzzrunner replay ... |
    head``) later writes are dropped and the command runs to its end (reports written, exit code
    kept) instead of dying with "internal error: BrokenPipeError"; the descriptor is pointed at
    /dev/null, so the interpreter's last flush does not raise either (Python's documented recipe).
    A path with undecodable bytes (a non-UTF-8 folder) that the stream cannot encode is written
    with backslash escapes instead of raising UnicodeEncodeError."""

    def __init__(self, stream):
        self.stream, self.gone = stream, False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                try:
                    return self.stream.write(text)
                except UnicodeEncodeError:
                    encoding = getattr(self.stream, "encoding", None) or "utf-8"
                    return self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self.gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no real descriptor (a test's capture): just drop
            pass

    def __getattr__(self, name):
        return getattr(self.stream, name)


MAX_ECHO = 200  # characters of one user value (a path, a fault name) quoted back in a message


def clip(message: str, limit: int = MAX_ECHO) -> str:
    """``message`` with each run of more than ``limit`` non-blank characters cut in its middle, and
    the whole kept under a few lines' length: a 100 KB ``--fault`` name is not echoed in full."""

    def cut(m) -> str:
        word = m.group(0)
        return f"{word[:limit // 2]}...[{len(word) - limit * 3 // 4} characters]...{word[-(limit // 4):]}"
    message = re.sub(rf"\S{{{limit + 1},}}", cut, message)
    if len(message) > 8 * limit:
        message = f"{message[:6 * limit]} ...[{len(message) - 7 * limit} characters]... {message[-limit:]}"
    return message


def _error(message: str) -> None:
    """The one-line error of every command, with long user values cut (``clip``)."""
    print(f"fuzzrunner: error: {clip(message)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    started = time.time()  # a campaign's budget is the command's: its imports and reports included
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _SafeStream(out), _SafeStream(err)
    try:
        return _main(argv, started)
    finally:
        sys.stdout.flush()  # here, where a gone reader is caught, not in the interpreter's exit
        sys.stderr.flush()
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str] | None, started: float) -> int:
    from .engine.lifeline import StopSignals
    stops = StopSignals().install()  # SIGINT, SIGTERM, SIGHUP: the first stops the work, the reports are written
    try:
        return _run(argv, stops, started)
    finally:
        stops.uninstall()


def _run(argv: list[str] | None, stops, started: float) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = _parser().parse_args(argv)
        args.started = started
        if not args.command:
            _parser().print_help()
            return EXIT_ERROR
        args.stops = stops
        if args.command in NO_DEVICE:  # no device, no torch: listing four targets took 12-25 s
            return COMMANDS[args.command](args)
        from . import _env, env_defaults
        # the campaign's device is this process's default too: a target loaded here is the one its workers
        # load (vllm_lora imports vLLM for that device)
        env_defaults.use_device(getattr(args, "device", None))
        _env.configure()  # decide the device (TRITON_INTERPRET) before any command imports Triton
        env_defaults.shadow()  # a bad shadow mode: one line from every command, never a worker's traceback
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("fuzzrunner: interrupted; findings so far are in the corpus", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _UsageError as e:
        _error(str(e))
        return EXIT_ERROR
    except Exception as e:
        from .errors import FuzzrunnerError
        if debug:
            traceback.print_exc()
        if isinstance(e, FuzzrunnerError):
            _error(safe_str(e))  # a target's own HarnessError (TargetUnavailable) may be anything
        else:
            print(f"fuzzrunner: internal error: {clip(describe(e, 2000))} (rerun with --debug for the "
                  f"traceback)", file=sys.stderr)
        return EXIT_ERROR
