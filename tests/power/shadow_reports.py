"""The shadow oracle's reports, whole, in both modes: what ``test_shadow_reports.py`` pins.

Every buggy program of the pair suite (the CPU mode; the device mode on the pairs it runs on the CPU),
and the reference runner's planted memory faults (eager and replayed from a captured graph) in both
modes, each violation as the report shows it: tool, kind, kernel, location, tensor, message and
details, in their order. Only what differs between two runs of one case is masked: addresses (``0x…``),
the numbers in threads' default names (``ThreadPoolExecutor-3_0``: how many the process made before) and
``seq`` (the order of first sight across every oracle of the process).

Write the pinned file again (after a change that means to change a report, and only then):
    PYTHONPATH=.:tests/power .venv/bin/python -m shadow_reports
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from shadow_pairs import PAIRS, harness
from shadow_pairs import device_mode as dm

from fuzzrunner import Case, replay
from fuzzrunner.violation import Violation

PINNED = Path(__file__).with_name("shadow_reports.json")
_ADDRESS = re.compile(r"0x[0-9a-f]+")
_THREAD = re.compile(r"\b(ThreadPoolExecutor-|Thread-)\d+(_\d+)?")
# how far from its own storage a lane that left it landed (another storage): the allocator's layout, as addresses are
_ESCAPE = re.compile(r"\d+ byte\(s\) (?:before the start|past the end) (of the storage of )")
CFG = {"max_loras": 2, "capture_sizes": [1, 2, 4, 8]}
ADD = {"op": "add_adapter", "adapter_id": 1, "rank": 4}


def _step(adapter: int, n: int, op: str = "step") -> dict:
    return {"op": op, "requests": [{"adapter_id": adapter, "tokens": list(range(1, n + 1))}]}


FAULTS = {  # fault: ops (eager, then through a captured graph's replays)
    "dummy_run_skips_mapping": [{"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}, ADD, _step(1, 2)],
    "padding_not_mapped": [_step(0, 3)],
    "stale_after_all_no_lora": [ADD, _step(1, 3), _step(0, 3)],
    "padding_not_mapped@graph": [{"op": "capture", "size": 4}, _step(0, 3, "replay")],
    "stale_after_all_no_lora@graph": [ADD, {"op": "capture", "size": 4}, _step(1, 3, "replay"),
                                      _step(0, 3, "replay")],
}
DEVICE_PAIRS = [p for p in PAIRS if p.cause in dm.CPU_CAUSES and p.name not in dm.NOT_ON_DEVICE]


def _masked(value):
    if isinstance(value, str):
        return _ESCAPE.sub(r"? byte(s) ? \1", _THREAD.sub(r"\1?", _ADDRESS.sub("0x?", value)))
    if isinstance(value, list | tuple):
        return [_masked(v) for v in value]
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items() if k != "seq"}
    return value


def report(v: Violation) -> dict:
    """One violation as its report shows it, addresses masked (and the distance of a lane that left its argument's
    storage into another one: where the allocator put the two)."""
    details = dict(v.details)
    if _ESCAPE.search(v.message or ""):
        details["distance_bytes"] = "?"
    return _masked({"tool": v.tool, "kind": v.kind, "kernel": v.kernel, "location": v.location,
                    "tensor": v.tensor, "message": v.message, "details": details})


def fault_reports(fault: str, shadow: str) -> list[dict]:
    """The reports of a planted fault's case under the mode ``shadow`` (``cpu`` or ``device``), on the CPU."""
    import os
    name = fault.split("@")[0]
    old = os.environ.get("FUZZRUNNER_SHADOW")
    os.environ["FUZZRUNNER_SHADOW"] = shadow
    try:
        vs = replay(Case("reference_runner", CFG, FAULTS[fault], [name]), oracles=["shadow"], device="cpu")
    finally:
        if old is None:
            del os.environ["FUZZRUNNER_SHADOW"]
        else:
            os.environ["FUZZRUNNER_SHADOW"] = old
    return [report(v) for v in vs]


def cpu_pair(p: harness.Pair) -> list[dict]:
    return [report(v) for v in harness.run(p.program, True)[0]]


def device_pair(p: harness.Pair) -> list[dict]:
    return [report(v) for v in dm.run(p.program, True, "cpu")[0]]


def collect() -> dict:
    """Every pinned report, by mode and program."""
    return {
        "cpu": {p.name: cpu_pair(p) for p in PAIRS},
        "device": {p.name: device_pair(p) for p in DEVICE_PAIRS},
        "cpu-faults": {f: fault_reports(f, "cpu") for f in FAULTS},
        "device-faults": {f: fault_reports(f, "device") for f in FAULTS},
    }


if __name__ == "__main__":
    PINNED.write_text(json.dumps(collect(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {PINNED}")
