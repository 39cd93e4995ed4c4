"""Cross-device triage: replay each GPU finding on the CPU under the shadow oracle.

A GPU finding names what the GPU could tell: a device-side assert, an illegal address, an
initcheck report on a torch kernel with no source line, a numeric difference. The same case
replayed on the CPU, through Triton's interpreter and torch dispatch, names the tensor, the
element, the kernel or torch op and the ``file:line`` of the first bad read. The finding keeps
that as ``triage``; findings whose CPU replays name the same bug are one finding.
"""

from __future__ import annotations

from .. import names
from ..context import Context
from ..errors import FuzzrunnerError
from ..finding import Finding, group
from ..settings import Settings
from .cpu_check import classify, harness_reason
from .replay import Replayer


def triage_on_cpu(findings: list[Finding], target_spec: str, settings: Settings) -> None:
    """Attach ``finding.triage`` to each finding (in a crash-isolated CPU worker)."""
    cpu = settings.override(device="cpu", sanitizer="none", oracles=names.triage_oracles(), workers=1)
    with Replayer(cpu, context=Context.cpu_check(settings)) as replayer:
        for f in findings:
            f.triage = _triage_one(replayer, f, target_spec)


def _triage_one(replayer: Replayer, f: Finding, target_spec: str) -> dict:
    """``reproduced`` (with what the CPU named), ``not-reproduced``, or ``could-not-run`` (with the reason:
    a CPU run that failed for reasons outside the case, cpu_check.py, is never shown as the triage)."""
    try:
        violations = replayer.run(f.case, f.target_spec or target_spec)
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
        absorbed.append(f)
    return out, absorbed
