"""``scripts/vllm_sweep.sh``'s table: one row per (version, finding) from the campaigns' JSON reports.

    python -m targets.vllm_lora.sweep OUT_DIR VERSION...   (reads OUT_DIR/VERSION.json, prints markdown)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _where(location: str) -> str:
    m = re.search(r"(?:^|/)(vllm/(?:lora|v1|model_executor|utils)/.*)$", location)
    return m.group(1) if m else location


def _ops(case: dict) -> str:
    c = case["config"]
    head = (f"L={c['max_loras']} T={c['max_num_tokens']} {c['entry']}"
            f"{' specialize' if c.get('specialize_active_lora') else ''}")
    ops = []
    for op in case["ops"]:
        kind = op["op"]
        if kind in ("step", "replay"):
            ops.append(f"{kind}{op['slots']}" + (f"+{op['pad']}pad" if op.get("pad") else ""))
        elif kind == "dummy_run":
            ops.append(f"dummy_run({op['num_tokens']}{'+' + str(op['pad']) if op.get('pad') else ''},{op['kind']})")
        elif kind == "capture":
            ops.append(f"capture(size={op['size']},key={op['key']})")
        else:
            ops.append(f"set_adapter({op['slot']})")
    return f"{head}: " + " → ".join(ops)


def category(f: dict) -> str:
    """Which known bug a finding shows, from where its violations happened (docs/findings/):
    ``target`` (the target's own code raised: a target error, not vLLM's), ``V1`` (a graph replay whose
    frozen grid misses an adapter), ``V0`` (a dummy run launching on unprogrammed metadata), ``M1`` (a step's
    fused-MoE LoRA launch on a stale or unwritten mapping), else ``other``."""
    vs = [f.get("violation") or {"tool": f["signature"]["tool"], "kind": f["signature"]["kind"],
                                 "tensor": f["signature"]["tensor"], "message": f.get("message", ""), "details": {}}]
    vs += f.get("others", [])
    if f["signature"]["tool"] == "target":
        return "target"
    ops = f["case"]["ops"]

    def op_of(v: dict) -> str:
        i = (v.get("details") or {}).get("op_index")
        return ops[i]["op"] if isinstance(i, int) and 0 <= i < len(ops) else ""
    if any(op_of(v) == "replay" and ("too narrow" in v.get("message", "") or v.get("tensor", "").startswith("replay."))
           for v in vs):
        return "V1"
    if any(op_of(v) == "dummy_run" for v in vs):
        return "V0"
    if any(op_of(v) == "step" and (v.get("kernel", "").startswith("_fused_moe") or v.get("tensor", "").endswith(".moe"))
           for v in vs):
        return "M1"
    return "other"


def verdicts(out: Path, version: str) -> str:
    """One row of the verdict table: cases; the known bugs' minimal cases replayed first (``--seed-cases``:
    "reproduced" or "no"); what the search itself found (V0, V1: first found after); target errors; others."""
    path = out / f"{version}.json"
    if not path.exists():
        return f"| {version} | no report | | | | | | | |"
    r = json.loads(path.read_text())
    r = r["runs"][0] if "runs" in r else r
    seeds = {Path(e["path"]).stem: e for e in r.get("replayed", [])}
    seed_ops = []
    for p in (out / f"{version}.corpus" / "cases" / "vllm_lora").glob("*.json"):
        seed_ops.append(json.loads(p.read_text()).get("ops"))
    cells: dict[str, list[str]] = {"V0": [], "V1": [], "M1": [], "target": [], "other": []}
    for f in r["findings"]:
        if f["case"].get("ops") in seed_ops:
            continue  # the replayed seed itself: its column says it
        cells[category(f)].append(f"{f['first_found_after_examples']} ex / {f['found_after_s']:.0f} s")

    def cell(k: str) -> str:
        return "found (" + ", ".join(cells[k]) + ")" if cells[k] else "–"

    def seed(stem: str) -> str:
        e = next((e for name, e in seeds.items() if name.startswith(stem)), None)
        return "–" if e is None else ("**reproduced**" if e["still_failing"] else "no")
    return (f"| {version} | {r['examples']} in {r['duration_s']:.0f} s | {seed('v0_')} | {seed('v1_')} "
            f"| {seed('m1_')} | "
            f"{cell('V0')} | {cell('V1')} | {len(cells['target']) or '–'} | {len(cells['other']) or '–'} |")


def rows(out: Path, version: str) -> list[str]:
    path = out / f"{version}.json"
    if not path.exists():
        return [f"| {version} | – | no report: not reached, or its set-up or campaign failed (see {out}/{version}.log) "
                f"| | |"]
    r = json.loads(path.read_text())
    r = r["runs"][0] if "runs" in r else r  # schema 2: one run per target; schema 1: flat
    head = f"{version} | {r['examples']} in {r['duration_s']:.0f} s"
    if not r["findings"]:
        return [f"| {head} | none | | |"]
    out_rows = []
    for f in r["findings"]:
        s = f["signature"]
        sig = f"{s['kind']} of `{s['tensor']}` in {s['kernel']} at {_where(s['location'])} [{s['tool']}]"
        sig = f"**{category(f)}**: " + ("TARGET ERROR (our code raised): " if s["tool"] == "target" else "") + sig
        found = f"{f['first_found_after_examples']} ex / {f['found_after_s']:.0f} s"
        out_rows.append(f"| {head} | {sig} | {found} | {_ops(f['case'])} |")
    return out_rows


def main(argv: list[str]) -> int:
    out, versions = Path(argv[0]), argv[1:]
    print("| vLLM | cases | finding (signature) | first found after | minimal case |")
    print("|---|---|---|---|---|")
    for v in versions:
        print("\n".join(rows(out, v)))
    print()
    print("| vLLM | cases | V0 case replayed | V1 case replayed | M1 case replayed | V0 found by the search "
          "| V1 found by the search | target errors | other findings |")
    print("|---|---|---|---|---|---|---|---|---|")
    for v in versions:
        print(verdicts(out, v))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
