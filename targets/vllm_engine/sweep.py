"""``scripts/vllm_sweep.sh --target vllm_engine``'s table: one row per release from the campaigns' JSON reports.

    python -m targets.vllm_engine.sweep OUT_DIR VERSION...   (reads OUT_DIR/VERSION.json and .log, prints markdown)

Per release: cases and seconds; each known bug's minimal case replayed first (``--seed-cases docs/findings/cases``:
"reproduced" or "no"); what the search itself found, each finding told apart by ``known.known_bug`` (E1, E2, P1,
S1), as a target error (our code raised), or as other (to triage by hand); a release whose engine pieces do not
load says why (the campaign's one-line refusal).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from ..vllm_lora.source_facts import _find, _Tree
from .known import BUGS, known_id
from .source_facts import facts

KNOWN = ("E1", "E2", "P1", "S1")
SEEDS = {"E1": "e1_", "E2": "e2_", "P1": "p1_", "S1": "s1_"}


def _refusal(out: Path, version: str) -> str:
    """The campaign's one-line reason where it wrote no report (a release the target does not load), or ''."""
    log = out / f"{version}.log"
    if not log.exists():
        return ""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "vllm_engine" in ln or "V2 model runner" in ln or "does not import" in ln:
            return ln[:300]
    return lines[-1][:300] if lines else ""


def category(finding: dict, logits_mapped_per_row: bool, dummy_maps_nothing: bool = False,
             drops_last_chunk: bool = False, graphs_capture_per_lora: bool = True) -> str:
    """E1, E2, P1, S1 (``known.known_bug``); V0 (a memory finding in a dummy run of a release whose V2 runner
    programs nothing for it: docs/findings/v0-v2-runner-dummy-run-no-mapping.md, fixed by #43139); ``target`` (our
    code raised); else ``other``."""
    if finding["signature"]["tool"] == "target":
        return "target"
    return known_id(finding, logits_mapped_per_row=logits_mapped_per_row, dummy_maps_nothing=dummy_maps_nothing,
                    drops_last_chunk=drops_last_chunk, graphs_capture_per_lora=graphs_capture_per_lora) or "other"


def row(out: Path, version: str) -> str:
    path = out / f"{version}.json"
    if not path.exists():
        why = _refusal(out, version) or f"no report (see {out}/{version}.log)"
        return f"| {version} | – | " + " | ".join("–" for _ in KNOWN) + f" | unsupported or not run: {why} | |"
    r = json.loads(path.read_text())
    r = r["runs"][0] if "runs" in r else r
    seeds = {p.stem: json.loads(p.read_text()).get("ops")
             for p in (out / f"{version}.corpus" / "cases" / "vllm_engine").glob("*.json")}
    replayed = {Path(e["path"]).stem: e for e in r.get("replayed", [])}
    tree = _Tree(version)
    per_row = facts(version)["per_logits_row"] if tree else True  # no tree: never call a logits finding S1
    per_lora = not (tree and facts(version).get("W1"))  # no tree: a graph replay's finding under specialize is V1
    no_mapping = bool(tree and _find(tree, "vllm/v1/worker/gpu/model_runner.py", r"Fix warmup for LoRA"))
    drops = bool(tree and _find(tree, "vllm/v1/worker/gpu/sample/prompt_logprob.py", r"prompt_lens - 1"))
    found: dict[str, list[str]] = defaultdict(list)  # a category -> when the search found each of its findings
    as_seeds: dict[str, set] = {}  # a replayed seed's stem -> the categories of its findings
    for f in r["findings"]:
        stems = [stem for stem, ops in seeds.items() if f["case"].get("ops") == ops]
        for stem in stems:  # a replayed seed: its column says it
            as_seeds.setdefault(stem, set()).add(category(f, per_row, no_mapping, drops, per_lora))
        if not stems:
            found[category(f, per_row, no_mapping, drops, per_lora)].append(f"{f['first_found_after_examples']} ex")

    def cell(bug: str) -> str:
        """"reproduced" where a seed of the bug failed as that bug (not merely failed: on 0.15 - 0.21 E1's case
        fails as V0, its dummy run reading never-written metadata)."""
        stems = [name for name in replayed if name.startswith(SEEDS[bug])]
        other = sorted({c for name in stems for c in as_seeds.get(name, ()) if c != bug})
        seed = ("–" if not stems else "**reproduced**" if any(bug in as_seeds.get(n, ()) for n in stems)
                else "not reproduced" + (f" (fails as {', '.join(other)})" if other else ""))
        search = f"; search: found ({', '.join(found[bug])})" if found[bug] else ""
        return seed + search
    others = [f"V0 (known, fixed by #43139 in 0.22; {', '.join(found['V0'])})"] if found["V0"] else []
    others += [f"{bug} (known: {BUGS[bug]['upstream']}; {', '.join(found[bug])})" for bug in sorted(found)
               if bug in BUGS and bug not in (*KNOWN, "V0") and found[bug]]
    others += [f"{len(found['other'])} to triage ({', '.join(found['other'])})"] if found["other"] else []
    errors = len(found["target"]) or "–"
    return (f"| {version} | {r.get('generated', r['examples'])} generated + {len(replayed)} replayed "
            f"in {r['duration_s']:.0f} s | "
            + " | ".join(cell(b) for b in KNOWN) + f" | {'; '.join(others) or 'none'} | {errors} |")


def main(argv: list[str]) -> int:
    out, versions = Path(argv[0]), argv[1:]
    print("| vLLM | cases / time | E1 | E2 | P1 | S1 | other findings | target errors |")
    print("|---|---|---|---|---|---|---|---|")
    for v in versions:
        print(row(out, v))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
