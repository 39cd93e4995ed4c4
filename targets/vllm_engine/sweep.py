"""``scripts/vllm_sweep.sh --target vllm_engine``'s verdict table: one row per release, one column per known bug.

    python -m targets.vllm_engine.sweep OUT_DIR VERSION...   (reads OUT_DIR/VERSION.json and .log, prints markdown)

The columns are ``known.BUGS``' labels. Every finding of a campaign is triaged by ``known.known_id`` with the
release's flags read from its files (``source_facts.known_flags``: this process imports no vLLM), so an old report
is triaged by today's rules. Per release and bug:

* **yes**: a finding of the campaign (a replayed seed's, or the search's: "search: N ex" says after how many
  examples) is that bug;
* no: the bug's seed (``--seed-cases docs/findings/cases``: E1, E2, P1, S1) ran and nothing was that bug; for a
  bug without a seed, ``not found``: the campaign reached what shows it (``REACH``, its coverage features) and found
  nothing;
* n/a (why): the campaign cannot show it there: its seed refused (with the reason), or, for a bug without a seed,
  the features that show it never reached (e.g. no MoE case ran, no V2 graph case under ``specialize_active_lora``);
  a release the target refuses is n/a in every column;
* ``budget ran out`` / ``– (seed not run)``: the campaign ended before the seed ran: nothing is known.

Each verdict is checked against the release's own source (``source_facts.facts``): where they disagree the cell
says ``(source: present)`` or ``(source: absent)``, a wrong verdict of the target, of the triage, or a bug the
campaign did not reach. Findings that are no known bug are "to triage" (by hand), target errors counted apart.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from ..vllm_lora.source_facts import _Tree
from .known import BUGS, known_id
from .source_facts import facts, known_flags

# every id of known.BUGS
COLUMNS = ("V0", "V1", "W1", "E1", "E2", "P1", "L1", "S1", "C1", "R1", "M1", "Q1", "Q2", "Q3", "U1", "H1")
SEEDS = {"E1": "e1_", "E2": "e2_", "P1": "p1_", "S1": "s1_"}  # bug -> its seeds' file-name prefix
# bug without a seed -> the coverage features (features.py) a case needs to show it, any one set of them
REACH = {"V0": [("op=dummy_run",), ("step=padded",), ("runner=v2-graphs",)],
         "V1": [("specialize_active_lora=on", "runner=v2-graphs"), ("specialize_active_lora=on", "runner=v1-graphs")],
         "W1": [("specialize_active_lora=on", "runner=v2-graphs")],
         "L1": [("step=chunked-prompt",)], "C1": [("step=repeated", "state=re-added")],
         "R1": [("adapter=experts", "adapter=rslora")], "M1": [("layer=experts", "step=no-lora")],
         "Q1": [("layout=gdn-qkvz",)], "Q2": [("layout=gdn-qkvz", "adapter=packed-partial")],
         "Q3": [("layout=gdn-qkvz", "adapter=packed-partial")],
         "U1": [("op=serve_unload",)], "H1": [("serve=reload-same-name", "prefix_caching=on")]}


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


def category(finding: dict, logits_mapped_per_row: bool = True, dummy_maps_nothing: bool = False,
             drops_last_chunk: bool = False, graphs_capture_per_lora: bool = True, **flags) -> str:
    """The known bug ``finding`` is (``known.known_id`` under the release's flags); ``target`` (our code raised);
    else ``other``."""
    if finding["signature"]["tool"] == "target":
        return "target"
    return known_id(finding, logits_mapped_per_row=logits_mapped_per_row, dummy_maps_nothing=dummy_maps_nothing,
                    drops_last_chunk=drops_last_chunk, graphs_capture_per_lora=graphs_capture_per_lora,
                    **flags) or "other"


def _reached(run: dict, bug: str) -> str:
    """'' where the campaign reached a case that can show ``bug`` (or the bug has a seed, or the report predates
    coverage), else the features it never reached."""
    features = {k for k, n in ((run.get("coverage") or {}).get("features") or {}).items() if n}
    if bug not in REACH or not run.get("coverage"):
        return ""
    if any(set(need) <= features for need in REACH[bug]):
        return ""
    missing = sorted({f for need in REACH[bug] for f in need} - features)
    return "not reached: " + ", ".join(missing)


def _with_source(verdict: str, found: bool, has: bool | None) -> str:
    if has is not None and has != found:
        return f"{verdict} (source: {'present' if has else 'absent'})"
    return verdict


def row(out: Path, version: str) -> str:
    path = out / f"{version}.json"
    if not path.exists():
        why = (_refusal(out, version) or f"no report (see {out}/{version}.log)").replace("|", "/")
        return (f"| {version} | – | " + " | ".join("n/a" for _ in COLUMNS)
                + f" | unsupported or not run: {why} | |")
    r = json.loads(path.read_text())
    run = r["runs"][0] if "runs" in r else r
    seeds = {p.stem: json.loads(p.read_text()).get("ops")
             for p in (out / f"{version}.corpus" / "cases" / "vllm_engine").glob("*.json")}
    replayed = {Path(e["path"]).stem for e in run.get("replayed", [])}
    refused = {Path(q["path"]).stem: q.get("why", "") for q in run.get("quarantined", []) + run.get("unsupported", [])
               if q.get("path")}  # unsupported: the release's refusal (UnsupportedCase), kept in the corpus
    flags = known_flags(version)
    source = facts(version) if _Tree(version) else {}
    searched: dict[str, list[str]] = defaultdict(list)  # category -> when the search found each finding of it
    seeded: set[str] = set()  # categories of the replayed seeds' findings
    for f in run["findings"]:
        c = category(f, **flags)
        if any(f["case"].get("ops") == ops for ops in seeds.values()):
            seeded.add(c)
        else:
            searched[c].append(f"{f['first_found_after_examples']} ex")
    stop = run.get("stop_reason", "")

    def cell(bug: str) -> str:
        found = bug in seeded or bool(searched[bug])
        has = source.get(bug) if source else None
        if found:
            search = f" (search: {', '.join(searched[bug])})" if searched[bug] else ""
            return _with_source("**yes**" + search, True, has)
        stems = [s for s in seeds if s.startswith(SEEDS.get(bug, "\0"))]
        if bug in SEEDS:
            if any(s in replayed for s in stems):
                return _with_source("no", False, has)
            why = next((refused[s] for s in stems if s in refused), None)
            if why is not None:
                return "n/a (refused: " + why.split(": ")[-1].split(";")[0][:60].replace("|", "/") + ")"
            return "**budget ran out** (seed not run)" if stop == "budget" else "– (seed not run)"
        missing = _reached(run, bug)
        return _with_source(f"n/a ({missing})" if missing else "not found", False, has)
    others = [f"{len(searched['other'])} to triage ({', '.join(searched['other'])})"] if searched["other"] else []
    others += ["a seed's finding to triage"] if "other" in seeded else []
    errors = len(searched["target"]) + ("target" in seeded) or "–"
    return (f"| {version} | {run.get('generated', run['examples'])} generated + {len(replayed)} replayed "
            f"in {run['duration_s']:.0f} s | " + " | ".join(cell(b) for b in COLUMNS)
            + f" | {'; '.join(others) or 'none'} | {errors} |")


def table(out: Path, versions: list[str]) -> list[str]:
    return (["| vLLM | cases / time | " + " | ".join(COLUMNS) + " | other findings | target errors |",
             "|---|---|" + "---|" * len(COLUMNS) + "---|---|"] + [row(out, v) for v in versions])


def main(argv: list[str]) -> int:
    out, versions = Path(argv[0]), argv[1:]
    print("\n".join(table(out, versions)))
    print()
    print("Known bugs: " + "; ".join(f"{b}: {BUGS[b]['title']} ({BUGS[b]['status']})" for b in COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
