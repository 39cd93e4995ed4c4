"""The command line's arguments: every command's parser, and the settings its flags select (over a profile)."""

from __future__ import annotations

import argparse
import os
import re

from .. import names
from ..errors import InvalidArgument


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a value such as -inf or -1e3 is a (bad) number to validate, not an unknown option
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf|infinity|nan)$",
                                                   re.IGNORECASE)

    def error(self, message):  # one line and exit 2, as for every other error, and where to read more
        raise _UsageError(f"{message} (see `{self.prog} --help`)")

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """As argparse's, but an unknown option is refused by the command it was given to, with that command's
        ``--help`` (argparse's top level refused it, naming neither: a new user's trial), and before a missing
        required one (``fuzz --bogus`` said only "the following arguments are required: --target")."""
        try:
            ns, extras = self.parse_known_args(args, namespace)
        except _UsageError:
            command, unknown = self._unknown_options(args)
            if unknown:
                _Parser(prog=f"{self.prog} {command}").error(f"unrecognized arguments: {' '.join(unknown)}")
            raise
        if extras:
            command = getattr(ns, "command", None)
            whose = _Parser(prog=f"{self.prog} {command}") if command else self
            whose.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns


    def _unknown_options(self, args) -> tuple[str, list[str]]:
        """(the command, the options given to it that it does not know)."""
        import sys
        tokens = list(sys.argv[1:] if args is None else args)
        commands = next((a.choices for a in self._actions if isinstance(a, argparse._SubParsersAction)), {})
        at = next((i for i, t in enumerate(tokens) if t in commands), None)
        if at is None:
            return "", []
        sub = commands[tokens[at]]
        known = sub._option_string_actions
        unknown = [t for t in tokens[at + 1:] if t.startswith("-") and t != "-" and t != "--"
                   and not self._negative_number_matcher.match(t)
                   and not any(o == t.split("=")[0] or (sub.allow_abbrev and t.startswith("--") and
                                                        o.startswith(t.split("=")[0])) for o in known)]
        return tokens[at], unknown


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
    from ..settings import PROFILES
    values = ", ".join(f"{name} {getattr(s, field) if getattr(s, field) is not None else 'none'}"
                       for name, s in PROFILES.items())
    return f" (default by profile: {values})"


def _default(field: str) -> str:
    from ..settings import Settings
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


def _speed_options(p: argparse.ArgumentParser, whose: str) -> None:
    p.add_argument("--shape-palette", type=int, metavar="N",
                   help="draw each case's shape from N shapes (rotated by the seed) so that compiled kernel variants "
                        "repeat; targets with shapes of their own (vllm_lora, sglang_lora) (default: 0, off)")
    p.add_argument("--stage-times", action="store_true",
                   help=f"at the end of {whose} campaign, print where its time went, per stage (docs/ci.md)")


DEBUG_HELP = "on an internal error, print the traceback as well as the one-line message"


def _parser() -> argparse.ArgumentParser:
    from .._version import __version__
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
    _speed_options(f, "the campaign's")
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
    r.add_argument("--preceding", action="store_true",
                   help="for a finding that kept them: first run the cases its worker ran before it, in one fresh "
                        "worker, then its case there (a finding that depended on what they left)")
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
    _speed_options(n, "each target's")
    _verbosity(n)

    sub.add_parser("targets", help="list the built-in targets")
    fl = sub.add_parser("faults", help="list the planted-bug switches of a target", formatter_class=_Help)
    fl.add_argument("--target", default="reference_runner", help="the target whose faults to list")
    d = sub.add_parser("doctor", help="versions, device, interpreter mode, compute-sanitizer")
    d.add_argument("--engines", action="store_true",
                   help="also import the engine targets (vLLM, SGLang: about a minute on 2 cores) and list what "
                        "each drives; without it each is said set up or not, without importing it")
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


def _profile_name(args) -> str:
    if args.profile:
        return args.profile
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        return "ci"
    return "nightly" if args.command == "nightly" else "dev"


def _settings(args):
    """The settings the flags select: the profile's, each flag given over it (the context is not resolved here:
    ``commands.resolved``)."""
    from ..settings import profile
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
    if getattr(args, "shape_palette", None) is not None:
        changes["shape_palette"] = args.shape_palette
    try:
        return s.override(**changes)
    except InvalidArgument as e:
        raise InvalidArgument(_as_flag(str(e), changes)) from None


# the setting each flag sets: an error names the flag a user typed, not the field (`--shape-palette -1 must be ...`)
FLAGS = {"max_examples": "--max-examples", "budget_s": "--budget", "seed": "--seed", "workers": "--workers",
         "device": "--device", "sanitizer": "--sanitizer", "case_timeout_s": "--case-timeout", "max_ops": "--max-ops",
         "steer": "--steer", "max_worker_rss_mb": "--max-worker-rss", "precheck_workers": "--precheck-workers",
         "shape_palette": "--shape-palette", "oracles": "--oracle"}


def _as_flag(message: str, changes: dict) -> str:
    """A settings error (``field=VALUE (--flag) must ...``) said as the command line's: ``--flag VALUE must ...``."""
    for field_name, flag in FLAGS.items():
        value = changes.get(field_name)
        head = f"{field_name}={value!r}"
        if value is not None and message.startswith(head):
            rest = message[len(head):].removeprefix(f" ({flag})").replace(f"{field_name}=None", f"no {flag}")
            for api, cli in ((", or None to", ", or leave it out to"), (", or None for", ", or leave it out for")):
                rest = rest.replace(api, cli)
            shown = f"{value:g}" if isinstance(value, float) else " ".join(map(str, value)) \
                if isinstance(value, tuple) else str(value)
            return f"{flag} {shown}{rest}"
    return message
