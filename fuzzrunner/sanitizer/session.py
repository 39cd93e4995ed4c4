"""Run a worker under compute-sanitizer, and give each case the reports it caused.

One sanitized worker runs many cases (docs/background.md: 35 ms a case, against
5.4 s for a sanitizer process per case). The worker prints
``@@fuzzrunner-case-begin N@@`` and ``@@fuzzrunner-case-end N@@`` around case N, after a
device synchronize, so a report printed between them is case N's; one printed after
an end marker (at process exit, after a crash) is the last begun case's. The print
limit counts reports of the whole process, so it is lifted: the first bad case would
otherwise take every report and later cases would look clean.
"""

from __future__ import annotations

import re

from ..errors import InvalidArgument
from ..names import SANITIZER_TOOLS
from .locate import Sanitizer, find_sanitizer
from .parse import from_reports, reports

LAUNCH_TIMEOUT_S = 300  # the target must initialize CUDA within this; the worker imports torch first
PADDING_BYTES = 65536   # memcheck: a read just past one tensor must not land silently in the next
MARKER = re.compile(r"@@fuzzrunner-case-(begin|end) (\d+)@@")
# A tracked tensor's address range, for naming the tensor of a reported address (printed by a
# worker that knows its allocations; without such lines violations name no tensor).
TENSOR_LINE = re.compile(r"@@fuzzrunner-tensor (\S+) (0x[0-9a-fA-F]+) (\d+)@@")


def sanitizer_wrapper(tool: str, *, sanitizer: Sanitizer | str | None = None,
                      extra_args=()) -> tuple[list[str], dict]:
    """``(argv prefix, environment)`` that run a worker under ``compute-sanitizer --tool tool``."""
    if tool not in SANITIZER_TOOLS:
        raise InvalidArgument(f"sanitizer tool {tool!r} must be one of {', '.join(SANITIZER_TOOLS)}.")
    s = sanitizer if isinstance(sanitizer, Sanitizer) else find_sanitizer(sanitizer)
    argv = [s.path, "--tool", tool,
            "--print-limit", "0",                      # 0 = no limit (the default, 100, is per process)
            "--show-backtrace", "no",                  # short reports; the kernel and line are enough
            "--launch-timeout", str(LAUNCH_TIMEOUT_S),
            "--target-processes", "application-only",  # not ptxas and the compilers Triton starts
            "--error-exitcode", "0"]                   # a report is not a failure of the worker
    if s.supports("strip-paths"):
        argv += ["--strip-paths", "no"]                # full paths: locations relative to the checkout
    if tool in ("memcheck", "synccheck") and s.supports("destroy-on-device-error"):
        argv += ["--destroy-on-device-error", "kernel"]  # end the bad kernel, keep the worker's context
    if tool == "memcheck" and s.supports("padding"):
        argv += ["--padding", str(PADDING_BYTES)]
    env = {"CUDA_LAUNCH_BLOCKING": "1", "FUZZRUNNER_SANITIZER": tool}
    if tool in ("initcheck", "memcheck"):
        # Without it a tensor carved from a freed, once-written block reads as initialized
        # (a measured false negative), and a read past a tensor stays inside the cached block.
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    return argv + list(extra_args), env


def split_cases(text: str) -> dict[int | None, list[str]]:
    """Lines of a worker log by the case that owns them: the last one begun (None: before any)."""
    owner: int | None = None
    out: dict[int | None, list[str]] = {}
    for line in text.splitlines():
        m = MARKER.search(line)
        if m and m.group(1) == "begin":
            owner = int(m.group(2))
        out.setdefault(owner, []).append(line)
    return out


def _case_violations(lines: list, tool: str | None) -> list:
    allocations = [(m.group(1), int(m.group(2), 16), int(m.group(3)))
                   for line in lines for m in [TENSOR_LINE.search(line)] if m]
    return from_reports(reports(lines), tool, allocations)


def violations_in_log(text: str, case_no: int, *, tool: str | None = None) -> list:
    """The sanitizer's reports for case ``case_no`` in (a span of) a worker log, deduplicated."""
    return _case_violations(split_cases(text).get(case_no, []), tool)


def attribute(text: str, *, tool: str | None = None) -> dict:
    """Every case's violations in a whole worker log; key None holds reports before any case."""
    return {case: _case_violations(lines, tool) for case, lines in split_cases(text).items()}
