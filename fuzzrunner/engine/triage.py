"""Cross-device triage: replay each GPU finding on the CPU under the shadow oracle.

A GPU finding names what the GPU could tell: a device-side assert, an illegal address, an
initcheck report on a torch kernel with no source line, a numeric difference. The same case
replayed on the CPU, through Triton's interpreter and torch dispatch, names the tensor, the
element, the kernel or torch op and the ``file:line`` of the first bad read. The finding keeps
that as ``triage``; findings whose CPU replays name the same bug are one finding.

Triage runs inside the campaign's budget: ``CpuTriage.start`` (at the campaign's first finding) starts the
CPU worker's zygote in the background, so its imports (seconds) are done by the search's end, and each
replay stops at the triage's end (``engine/deadline.py``); a finding it could not reach says so.
"""

from __future__ import annotations

import math
import time

from .. import names
from ..context import Context
from ..errors import FuzzrunnerError
from ..finding import Finding, group
from ..settings import Settings
from ..sighting import merged_found_by
from .cpu_check import classify, harness_reason
from .deadline import monotonic
from .plan import worker_spec
from .prestart import drop_prestarted, prestart_zygote
from .replay import OutOfTime, Replayer

OUT_OF_TIME = "the campaign's budget ran out before its CPU replay ended"


class CpuTriage:
    """The CPU triage of one campaign's findings, until ``end`` (``time.time()``; None: no limit)."""

    def __init__(self, target_spec: str, settings: Settings, end: float | None = None):
        self.target_spec, self.end = target_spec, end
        self.settings = settings.override(device="cpu", sanitizer="none", oracles=names.triage_oracles(), workers=1)
        self.context = Context.cpu_check(settings)  # the CPU's, whatever the campaign's device
        self.started = False
        self.unreached = 0  # findings whose replay the end cut short or left out

    def start(self) -> None:
        """Start the CPU worker's zygote now, without waiting for it (call from the main thread: its
        process dies with the thread that started it); the replays' hub takes it."""
        if not self.started:
            self.started = True
            prestart_zygote(worker_spec(self.target_spec, self.settings, 0, self.context))

    def triage(self, findings: list[Finding]) -> None:
        """Attach ``finding.triage`` to each finding (in a crash-isolated CPU worker)."""
        cut_at = monotonic(self.end) if self.end is not None else math.inf
        try:
            with Replayer(self.settings, context=self.context) as replayer:
                for f in findings:
                    f.triage = _triage_one(replayer, f, self.target_spec, cut_at)
                    self.unreached += f.triage.get("reason") == OUT_OF_TIME
        finally:
            drop_prestarted()  # a zygote no replay took (none to triage, or a spec of its own)


def triage_on_cpu(findings: list[Finding], target_spec: str, settings: Settings, end: float | None = None) -> int:
    """Attach ``finding.triage`` to each finding (in a crash-isolated CPU worker), until ``end``
    (``time.time()``); how many it could not reach in time."""
    triage = CpuTriage(target_spec, settings, end)
    triage.triage(findings)
    return triage.unreached


def _triage_one(replayer: Replayer, f: Finding, target_spec: str, cut_at: float = math.inf) -> dict:
    """``reproduced`` (with what the CPU named), ``not-reproduced``, or ``could-not-run`` (with the reason:
    a CPU run that failed for reasons outside the case, cpu_check.py, is never shown as the triage; the
    deadline coming first, ``OUT_OF_TIME``)."""
    if time.monotonic() >= cut_at:  # no time left: no worker started for it
        return {"device": "cpu", "status": "could-not-run", "reason": OUT_OF_TIME}
    try:
        violations = replayer.run(f.case, f.target_spec or target_spec, cut_at=cut_at)
    except OutOfTime:
        return {"device": "cpu", "status": "could-not-run", "reason": OUT_OF_TIME}
    except FuzzrunnerError as e:
        return {"device": "cpu", "status": "could-not-run", "reason": harness_reason(str(e))}
    run = classify(violations)
    if run.outside:
        return {"device": "cpu", "status": "could-not-run", "reason": run.outside}
    groups = group(violations)
    if not groups:
        return {"device": "cpu", "status": "not-reproduced"}
    head, _ = groups[0]
    element = head.details.get("element") or head.details.get("index") or ""
    return {"device": "cpu", "status": "reproduced", "id": head.signature.id, "short": head.signature.short(),
            "signature": head.signature.to_dict(), "message": head.message, "element": str(element or ""),
            "op_index": head.details.get("op_index"), "root_causes": len(groups)}


def merge_by_triage(findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(kept, absorbed): findings whose CPU replays name the same bug become the first of them,
    every other site kept in its ``others``."""
    kept: dict[str, Finding] = {}
    out, absorbed = [], []
    for f in findings:
        key = f.triage.get("id") if f.triage and f.triage.get("status") == "reproduced" else None
        if key is None or key not in kept:
            out.append(f)
            if key is not None:
                kept[key] = f
            continue
        into = kept[key]
        into.others += [f.violation, *f.others]
        into.found_by = merged_found_by(into.found_by, f.found_by)  # how each showed: the seed and the search alike
        absorbed.append(f)
    return out, absorbed
