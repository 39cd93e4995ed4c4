"""``python -m fuzzrunner`` and the ``fuzzrunner`` command: the command line, then the process ends with its
exit code, whatever the target left behind.

A target imported by the command (``fuzz`` loads it to check its faults) may leave a non-daemon thread
or an exit handler that never returns: Python's own exit would wait for them for ever, after the
report was written, and CI would lose the exit code (issue 47). So once ``cli.main`` has returned, the
output is flushed, the exit handlers run (temporary folders, logging) for at most ``EXIT_GRACE_S``, and
the process ends with ``os._exit``: non-daemon threads are not waited for. ``cli.main(argv)`` itself
returns its code, for tests and library callers.
"""

import atexit
import os
import sys
import threading
import time

EXIT_GRACE_S = 5.0  # how long the exit handlers may take before the process ends without them


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a reader gone, a closed stream
            pass


def exit_now(code: int) -> None:
    """Flush, run the exit handlers (for at most ``EXIT_GRACE_S``), and end the process with ``code``."""
    _flush()

    def too_long() -> None:
        time.sleep(EXIT_GRACE_S)
        os.write(2, f"fuzzrunner: warning: exit handlers (the target's?) still running after {EXIT_GRACE_S:g} s: "
                    f"exiting with code {code} without them\n".encode())
        os._exit(code)

    threading.Thread(target=too_long, name="fuzzrunner-exit", daemon=True).start()
    try:
        atexit._run_exitfuncs()
    finally:
        _flush()
        os._exit(code)


def console() -> None:
    """The ``fuzzrunner`` command. A stop signal before the command starts ends it (130); once it is done,
    one is only noted, and the exit code is 130 (its reports are written)."""
    from .engine.lifeline import StopSignals
    stops = StopSignals().install()  # (the command installs its own while it runs)
    try:
        from .cli import main
        code = main()
        stops.hold()  # inside the try: a signal before this line is caught below
    except KeyboardInterrupt:  # only the first signal raises: none can come after this line
        code = 130
        stops.hold()
    except SystemExit as e:  # --help, --version
        stops.hold()
        if e.code is not None and not isinstance(e.code, int):
            raise
        code = e.code or 0
    exit_now(130 if stops.stopped else code)


if __name__ == "__main__":
    console()
