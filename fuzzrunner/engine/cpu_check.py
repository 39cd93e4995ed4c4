"""What a CPU run of a GPU campaign's case proves, and when it proves nothing.

The CPU pre-check (search.py) and the CPU triage (triage.py) replay a GPU case on the CPU under
the shadow oracle. That run can fail for reasons outside the case: the target cannot be built
on the CPU (most engines create their tensors on ``cuda`` themselves instead of on
``ctx.device``), an import or a device call fails, the target dies before its first op, or the
tool cannot run a kernel there (a ``tool-limitation``). Such a run says nothing about the case:
it must neither skip a case on the GPU nor be shown as the finding's triage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import names
from ..finding import group, limitations
from ..violation import Violation

HINT = "the CPU pre-check and triage run each case on the CPU: build the runner's tensors on ctx.device"

# A device or installation error, not the case's bug (lower-cased substrings of the message).
_DEVICE_WORDS = ("no cuda gpus are available", "torch not compiled with cuda", "found no nvidia driver",
                 "cuda driver", "cuda error", "cuda is not available", "cuda unavailable", "libcuda",
                 "expected all tensors to be on the same device", "cannot access accelerator", "nvml",
                 "0 active drivers", "cannot be accessed from triton (cpu tensor?)", "no kernel image",
                 "cudagetdevicecount", "cuinit", "invalid device ordinal", "cuda_visible_devices")
_OUTSIDE_TYPES = ("ModuleNotFoundError", "ImportError", "AcceleratorError")


# The device a runner asks for is not there at all (not a runner mixing devices, which is its bug).
_NO_DEVICE_WORDS = ("no cuda gpus are available", "torch not compiled with cuda", "found no nvidia driver",
                    "cuda is not available", "cuda unavailable", "libcuda")


def missing_device(violations: list[Violation]) -> str | None:
    """The first crash of a CPU run that asked for a GPU this machine does not have: the target cannot
    run here at all (it builds on ``cuda`` itself), which is no finding of the code under test."""
    for v in violations:
        if names.tool(v.tool).raised and v.kind == "crash" and any(w in v.message.lower() for w in _NO_DEVICE_WORDS):
            return _what(v)
    return None


def _what(v: Violation) -> str:
    """A Python crash in one phrase: its exception, where, and its text ("op N: Type: text" stripped)."""
    return f"{v.kernel} at {v.location}: {v.message.split(': ', 2)[-1]}"


@dataclass(frozen=True)
class CpuRun:
    """The root causes a CPU run showed (id -> head), or why it shows nothing about the case."""
    heads: dict = field(default_factory=dict)
    outside: str | None = None


def device_error(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in _DEVICE_WORDS)


def outside_reason(v: Violation) -> str | None:
    """Why ``v`` is a failure of the CPU run itself, not of the case; None if it may be the case's."""
    if not names.kind(v.kind).finding:
        return f"a tool limitation: {v.message.split('. This is a limit', 1)[0]}"
    if not names.tool(v.tool).raised or v.kind != "crash":
        return None
    what = _what(v)
    if v.kernel in _OUTSIDE_TYPES:
        return f"the target's imports fail on the CPU ({what})"
    if device_error(v.message):
        return f"a device error ({what}); {HINT}"
    if v.details.get("op_index") is None:
        return f"the target failed before its first op ({what}); {HINT}"
    return None


def classify(violations: list[Violation]) -> CpuRun:
    """A CPU run's root causes; a memory error is proof even if the run failed later for an outside reason."""
    groups = group(violations)
    heads = {head.signature.id: head for head, _ in groups}
    if any(names.kind(h.kind).memory for h in heads.values()):
        return CpuRun(heads)
    for v in [*limitations(violations), *violations]:
        why = outside_reason(v)
        if why:
            return CpuRun({}, why)
    return CpuRun(heads)


def harness_reason(error: str) -> str:
    """A CPU worker that could not even set the target up: why, with the hint when the device is why."""
    first = error.strip().splitlines()[0][:300] if error.strip() else "unknown"
    return f"the target cannot be set up on the CPU ({first})" + (f"; {HINT}" if device_error(error) else "")
