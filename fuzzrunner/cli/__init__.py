"""The ``fuzzrunner`` command line: parse, pick a profile, print, exit codes. Nothing else.

Exit codes (``fuzz``, ``nightly``): 0 no finding, 1 findings, 2 usage or harness error (one
line on stderr; ``--debug`` shows the traceback), 130 interrupted: SIGINT, SIGTERM or SIGHUP at any
point (the reports are written: partial, with ``stop_reason`` interrupted, if the campaign was cut
short; a second signal does not cut the clean-up short). ``replay``: 1 reproduced, 0 not
reproduced, 2 could not run.

``parser`` builds every command's arguments and the settings they select, ``commands`` runs each command
on the library, ``render`` prints and maps results to exit codes; this module dispatches and turns errors
into the one-line message.
"""

from __future__ import annotations

import sys
import time
import traceback

from ..text import describe, safe_str
from .commands import (
    cmd_check_target,
    cmd_doctor,
    cmd_export,
    cmd_faults,
    cmd_fuzz,
    cmd_nightly,
    cmd_replay,
    cmd_targets,
)
from .parser import _parser, _UsageError
from .render import EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, _error, _SafeStream, clip

__all__ = ["EXIT_ERROR", "EXIT_FINDINGS", "EXIT_INTERRUPTED", "EXIT_OK", "clip", "main"]


NO_DEVICE = {"targets"}  # commands that run no kernel and load no target: no device set-up, no torch import


COMMANDS = {"check-target": cmd_check_target, "fuzz": cmd_fuzz, "replay": cmd_replay, "export": cmd_export,
            "nightly": cmd_nightly, "targets": cmd_targets, "faults": cmd_faults, "doctor": cmd_doctor}


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
    from ..engine.lifeline import StopSignals
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
        from .. import env_defaults
        # the campaign's device is this process's default too, for the command: a target loaded here is the one
        # its workers load (vllm_lora imports vLLM for that device); the device (TRITON_INTERPRET) is decided
        # before any command imports Triton, and the caller's is back after it
        with env_defaults.device_of_call(getattr(args, "device", None)):
            env_defaults.shadow()  # a bad shadow mode: one line from every command, never a worker's traceback
            return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("fuzzrunner: interrupted; findings so far are in the corpus", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _UsageError as e:
        _error(str(e))
        return EXIT_ERROR
    except Exception as e:
        from ..errors import FuzzrunnerError
        if debug:
            traceback.print_exc()
        if isinstance(e, FuzzrunnerError):
            _error(safe_str(e))  # a target's own HarnessError (TargetUnavailable) may be anything
        else:
            print(f"fuzzrunner: internal error: {clip(describe(e, 2000))} (rerun with --debug for the "
                  f"traceback)", file=sys.stderr)
        return EXIT_ERROR
