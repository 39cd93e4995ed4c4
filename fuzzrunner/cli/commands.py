"""The commands: each parses nothing and decides nothing of its own; it calls the library, prints with
``render`` and returns its exit code."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from ..progress import Progress
from ..safe_write import check_distinct_files, check_outputs
from ..target_spec import TargetSpec
from ..text import aligned, safe_str
from .parser import _settings
from .render import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    _error,
    _exit_code,
    _nightly_line,
    _print_trend,
    _replay_exits,
    _said_written,
    _say_replay,
    _summary,
)


def _resolved(args, settings=None):
    """The settings the flags select (or ``settings``) and the run's context, resolved once, here
    (``env_defaults.resolved``): a device or sanitizer that cannot be had is refused before anything starts;
    the library gets the context and does not resolve it again."""
    from ..env_defaults import resolved
    s = _settings(args) if settings is None else settings
    flag = f"--sanitizer {s.sanitizer}" if s.sanitizer != "none" else "--device cuda"
    return resolved(s, on_cluster=bool(getattr(args, "ray", None)), asked_as=flag)


def _check_cluster(args) -> None:
    from ..engine.ray_shards import check_cluster
    check_cluster(args.ray, args.db)


def _check_corpus(corpus: str) -> None:
    """The corpus must take findings before the first case runs, not after the first finding."""
    _make_folder(corpus, "--corpus", "corpus")


def _make_folder(folder, flag: str, what: str) -> None:
    from ..safe_write import check_folder
    check_folder(folder, f"{what} {str(folder)!r}", f"Choose another with {flag} DIR.")


def _export_all(result, corpus: str) -> None:
    """A repro script in the corpus for every finding (``repro.save_repros``); a failed one is a warning."""
    from ..repro import save_repros
    for warning in save_repros(result, corpus):
        print(f"fuzzrunner: warning: {warning}", file=sys.stderr)


def _report(results, previous: dict | None, previous_path: str | None, skipped: dict | None = None) -> dict:
    from ..report import build_report
    return build_report(results, previous=previous, previous_source=previous_path or "", skipped=skipped)


def _write_reports(report: dict, json_path=None, junit_path=None, html_path=None) -> list:
    from ..report import write_reports
    return write_reports(report, json_path=json_path, junit_path=junit_path, html_path=html_path)


def cmd_fuzz(args) -> int:
    from ..api import fuzz
    from ..report import load_previous
    from ..report.json_report import note_report_time
    from ..target import load_target
    outputs = {"--report": args.report, "--junit": args.junit, "--html": args.html}
    check_distinct_files(outputs)
    settings, context = _resolved(args)  # bad flags and targets first: a refused command leaves no folder behind
    given = TargetSpec.parse(args.target)
    spec = given.absolute() if not given.is_name else args.target
    name = spec
    try:
        target = load_target(spec)
        name = target.name
        target.check_faults(args.fault)
        check_outputs(outputs, {"the target file": TargetSpec.parse(spec).file})
        previous = load_previous(args.previous, [target.name])  # before the corpus: a refused command leaves no folder
        _check_corpus(args.corpus)
        _check_cluster(args)
        progress = Progress(sys.stderr, settings, quiet=args.quiet, verbose=args.verbose)
        # the budget counts from the command's start
        result = fuzz(spec, settings=settings, faults=args.fault, corpus=args.corpus, on_event=progress,
                      context=context, ray=args.ray, db=args.db, started=args.started)
    except KeyboardInterrupt:  # stopped before the campaign had a result: an empty interrupted report
        return _interrupted_early(args, name, settings)
    with args.stops.held():  # from here on a stop signal is noted: the reports are written, then 130
        progress.done(result)
        _export_all(result, args.corpus)
        _summary(result, sys.stdout)
        t0 = time.perf_counter()
        report = note_report_time(_report([result], previous, args.previous), time.perf_counter() - t0)
        _print_trend(report)
        for p in _write_reports(report, args.report, args.junit, args.html):
            print(f"wrote {p}")
        if args.stage_times:
            from ..engine.stages import result_table
            print(result_table(result, {"report": time.perf_counter() - t0}))
    return EXIT_INTERRUPTED if args.stops.stopped else _exit_code([result])


def _interrupted_early(args, target: str, settings) -> int:
    """A stop signal before the campaign had a result (the target loading, the workers starting): the reports
    say so (no case ran), if their paths can be written; exit 130. ``target``: its name (its spec if it was
    not loaded yet)."""
    from ..engine.result import CampaignResult
    from ..errors import FuzzrunnerError
    with args.stops.held():
        _error("interrupted before the campaign ran a case; findings of earlier runs are in the corpus")
        result = CampaignResult.interrupted_at_start(target, settings, args.fault)
        try:
            check_outputs({"--report": args.report, "--junit": args.junit, "--html": args.html})
            for p in _write_reports(_report([result], None, None), args.report, args.junit, args.html):
                print(f"wrote {p}")
        except (FuzzrunnerError, OSError) as e:
            _error(f"no report: {e}")
    return EXIT_INTERRUPTED


def _replay_one(replayer, path, args) -> int:
    """1 a violation shows, 0 none, 2 could not run or check; prints one verdict line (and what it saw)."""
    from ..case import Case
    from ..corpus import load_any
    from ..engine.replay import replay_target, replay_timeout
    from ..errors import FuzzrunnerError
    try:
        case, finding = load_any(path)
        spec = replay_target(case, finding, args.target)
        before = finding.preceding if finding is not None else None
        if before and getattr(args, "preceding", False):
            ran, showed, refused = replayer.run_preceding(before, spec, str(path))
            print(f"fuzzrunner: {path}: ran the {ran} case(s) its worker ran before it first, in one fresh worker"
                  f" ({showed} showed violations of their own; {refused} refused here; {before['dropped']} were "
                  f"not kept)", file=sys.stderr)
            case = Case.from_dict(before["of"], source=f"{path}: preceding.of")
        replay = replayer.verdict(case, spec, finding, replay_timeout(args.case_timeout, finding))
    except FuzzrunnerError as e:
        message = str(e) if str(e).startswith(str(path)) else f"{path}: {e}"
        _error(f"could not run {message}")
        return EXIT_ERROR
    if replay.release:
        print(f"fuzzrunner: warning: {path}: {replay.release}", file=sys.stderr)
    for v in replay.limits:
        print(f"fuzzrunner: warning: {path}: tool limitation: {v.message}", file=sys.stderr)
    _say_replay(path, replay, finding)
    if before and not getattr(args, "preceding", False) and not replay.verdict.shows:
        print(f"    alone; it was found after {len(before['cases']) + before['dropped']} earlier case(s) of its "
              f"worker, which it may depend on: `fuzzrunner replay --preceding {path}` runs them first")
    return _replay_exits()[replay.verdict]


def cmd_replay(args) -> int:
    from ..engine.replay import Replayer
    from ..settings import Settings
    extra = {"case_timeout_s": args.case_timeout} if args.case_timeout is not None else {}
    settings, context = _resolved(args, Settings(device=args.device, sanitizer=args.sanitizer,
                                                 oracles=tuple(args.oracle) if args.oracle else None, **extra))
    with Replayer(settings, context=context) as replayer:
        codes = [_replay_one(replayer, path, args) for path in args.files]
    # a file that could not run is never hidden behind one that reproduced
    return EXIT_ERROR if EXIT_ERROR in codes else EXIT_FINDINGS if EXIT_FINDINGS in codes else EXIT_OK


def cmd_export(args) -> int:
    """One finding: the script ``-o`` names (or ``repro_<id>.py`` in that folder). Several (a glob):
    ``-o`` is a folder (made if missing), one ``repro_<id>.py`` each; a file that cannot be read is
    said and skipped, the others are written, and the exit is 2. No script replaces a finding file
    being exported (``-o F.json`` of ``F.json``, through a link or another spelling too)."""
    from ..errors import FuzzrunnerError
    from ..finding import Finding
    from ..repro import export_output, export_path, export_repro
    out = export_output(args.output, args.finding)
    target = TargetSpec.parse(args.target).absolute() if args.target else None
    code, written = EXIT_OK, set[Path]()
    for file in args.finding:
        try:
            finding = Finding.load(file)
            dest = export_path(out, finding, written, args.finding)
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
            if self.args.stage_times:
                from ..engine.stages import result_table
                print(result_table(result))

    def reported(self, name: str, report: dict) -> None:
        _print_trend(report)

    def skipped(self, name: str, reason: str) -> None:
        print(f"fuzzrunner: skipping target {name}: {reason}", file=sys.stderr)

    def written(self, paths: list) -> None:
        for p in paths:
            print(f"wrote {p}")


def cmd_nightly(args) -> int:
    from ..nightly import NightlyHooks, report_files, run_nightly
    from ..report import load_previous
    from ..target import BUILTIN
    settings, context = _resolved(args)  # bad flags first: a refused command leaves no folder behind
    _make_folder(args.report_dir, "--report-dir", "report folder")
    report_dir = Path(args.report_dir)
    check_outputs({f"--report-dir's {path.name}": str(path) for path in report_files(report_dir)})
    previous = load_previous(args.previous, list(BUILTIN))  # before the corpus: a refused command leaves no folder
    _check_corpus(args.corpus)
    _check_cluster(args)
    shown = _NightlyHooks(args)
    hooks = NightlyHooks(start=shown.start, done=shown.done, reported=shown.reported, skipped=shown.skipped,
                         written=shown.written)
    run = run_nightly(settings, report_dir, corpus=args.corpus, previous=previous, previous_path=args.previous or "",
                      context=context, ray=args.ray, db=args.db, hooks=hooks)
    with args.stops.held():
        for message in run.errors:
            _error(message)
        code = EXIT_INTERRUPTED if args.stops.stopped else _exit_code(run.results)
        code = code if code in (EXIT_INTERRUPTED, EXIT_ERROR) or not run.errors else EXIT_ERROR
        print(_nightly_line(run.results, run.skipped, run.errors, code))
    return code


def cmd_targets(args) -> int:
    from ..catalog import about
    from ..target import BUILTIN
    rows = []
    for name in BUILTIN:  # without importing any of them (vLLM alone took 12-25 s): catalog.py
        known = about(name)
        said = f"(unavailable: {known.unavailable})" if known.unavailable else \
            known.description + (f" (engine: {known.engine})" if known.engine else "")
        rows.append((name, said))
    for line in aligned(rows, gap=3):
        print(line)
    print("\nYour own: --target path/to/file.py:OBJ or --target package.module:OBJ (OBJ a fuzzrunner.Target)")
    return EXIT_OK


def cmd_faults(args) -> int:
    from ..target import load_target
    target = load_target(args.target)
    if not target.faults:
        print(f"target {target.name} has no planted faults")
    else:
        print(f"planted faults of target {target.name}{_judged_on(target.code_under_test)} (turn one on with "
              f"`fuzz --target {args.target} --fault NAME`):")
    for line in aligned((name, _fault_line(target, name)) for name in target.faults):
        print(line)
    return EXIT_OK


def _judged_on(code: dict) -> str:
    """`` on ENGINE RELEASE at TREE``: the code under test each fault's availability was judged on (an engine target's
    faults come and go with its release; the header did not say which release it had looked at: new-user trial);
    "" for a target that names none (fuzzrunner's own code)."""
    if not code:
        return ""
    patched = f", patched with {code['patch']}" if code.get("patch") else ""
    return f" on {code.get('engine', '?')} {code.get('release', '?')} at {code.get('tree', '?')}{patched}"


def _fault_line(target, name: str) -> str:
    """A fault's first sentence, after why it cannot run here where it cannot (``--fault`` refuses it: before,
    the listing showed such a fault like any other)."""
    said = _first_sentence(target.fault_descriptions.get(name, ""))
    why = target.faults_unavailable.get(name)
    return said if why is None else f"[unavailable here: {safe_str(why, 300)}] {said}".rstrip()


# a sentence ends at a full stop before a capital letter or the end, never at an abbreviation's ("i.e. one the
# batch needs" was cut to "... of them, i.e.": `fuzzrunner faults`, a new user's trial)
_SENTENCE_END = re.compile(r"(?<!\bi\.e)(?<!\be\.g)(?<!\betc)(?<!\bvs)\.(?=\s+[A-Z`(]|\s*$)")


def _first_sentence(doc: str) -> str:
    if not doc:
        return ""
    end = _SENTENCE_END.search(doc)
    return f"{(doc[:end.start()] if end else doc).rstrip('.')}."


def cmd_doctor(args) -> int:
    from ..doctor import report
    lines, ok = report(engines=args.engines)
    for line in lines:
        print(line)
    return EXIT_OK if ok else EXIT_ERROR


def cmd_check_target(args) -> int:
    from ..check_target import check_target, check_timeout
    timeout = check_timeout(args.timeout)

    def say(line: str) -> None:  # progress, as it happens; the verdict's lines go to stdout at the end
        print(f"check-target: {line}", file=sys.stderr, flush=True)
    lines, code = check_target(args.target, timeout, say)
    for line in lines:
        print(line)
    return code
