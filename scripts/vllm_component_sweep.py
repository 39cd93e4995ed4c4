#!/usr/bin/env python3
"""The ``vllm_engine`` components that do not run on every release, release by release: the V2 runner's CUDA graphs
(targets/vllm_engine/v2_graphs.py), ``FusedMoEWithLoRA`` (moe.py), and V1 through ``vllm_lora``'s own case.

    nice -n 10 .venv/bin/python scripts/vllm_component_sweep.py all OUT VERSION...  # a child per release, the table
    .venv/bin/python scripts/vllm_component_sweep.py run OUT VERSION                # one release, in this process
    .venv/bin/python scripts/vllm_component_sweep.py table OUT VERSION...           # the markdown table from OUT
    nice -n 10 .venv/bin/python scripts/vllm_component_sweep.py moe OUT VERSION...  # the MoE columns only (merged)

``all`` runs each release in its own niced child process (``run``: FUZZRUNNER_VLLM_VERSION=VERSION, a set-up tree in
.cache/vllm), one after another, and skips a release whose OUT/VERSION.json exists (a stopped sweep goes on where it
stopped: delete the file to run a release again). Per release, each check is one case of the integration tests run on
that release (tests/integration/test_vllm_engine_v2_graphs.py, test_vllm_engine_moe.py) or vLLM's V1 case
(docs/findings/cases/v1_specialize_active_lora.json through ``vllm_lora``), with its verdict:

* V2 graphs: the shape ``v2_graphs.find`` drives (or why none); the mixed batch under ``specialize_active_lora``
  (FULL graphs): **W1** before 0.24 (the graphs froze the start-up's grid), **V1** from 0.24 (the capture hook's
  grid misses the base-model id), reproduced when only the replay is wrong; the same batch without
  ``specialize_active_lora``: silent; the planted ``graph_dispatch_ignores_lora``: caught, and silent without it
  (or why it is not offered);
* MoE: the MoE block's fault-free case (R1 where an rsLoRA adapter's expert rows are wrong), the M1 case (a
  base-model step after an adapter step), plain adapters silent, the planted ``fused_moe_swaps_gate_up`` caught (or
  why no block); each verdict against what the release's code says (source_facts R1, moe.known_flags M1);
* V1 (``vllm_lora``): its minimal case on vLLM's kernels, metadata and capture mapping.

Whether a release ships the component at all is read from its tree (``vllm/v1/worker/gpu/cudagraph_utils.py``,
``class FusedMoEWithLoRA``): "not in release" where it does not, "not driven: WHY" where it does and the target does
not run it there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("V2 graphs: shape", "W1 / V1 (V2 graphs)", "V2 graphs, fault-free", "graph_dispatch_ignores_lora",
           "MoE (FusedMoEWithLoRA)", "fused_moe_swaps_gate_up", "V1 (vllm_lora's case)")


def _tests(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "integration" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    spec.loader.exec_module(mod)
    return mod


def _tree(version: str) -> Path:
    return Path(os.environ.get("FUZZRUNNER_VLLM_CACHE", ROOT / ".cache" / "vllm")) / version / "site" / "vllm"


def shipped(version: str) -> dict[str, bool]:
    """What the release's tree holds (read, not imported)."""
    tree = _tree(version)
    moe = tree / "lora" / "layers" / "fused_moe.py"
    return {"v2_graphs": (tree / "v1" / "worker" / "gpu" / "cudagraph_utils.py").exists(),
            "moe": moe.exists() and "class FusedMoEWithLoRA" in moe.read_text(errors="replace")}


def _kinds(violations) -> set:
    return {(v.kind, v.tensor) for v in violations}


def _graphs(found: dict) -> dict[str, str]:
    g = found.get("v2_graphs")
    if g is None:
        from targets.vllm_engine.v2_graphs import MISSING
        why = f"not driven: {MISSING[0] if MISSING else 'no graph manager'}"
        return {c: why for c in COLUMNS[:4]}
    t = _tests("test_vllm_engine_v2_graphs")
    full = dict(t.GRAPHS, cudagraph_mode="FULL")
    bug = "V1" if g.shape == "lora_cases" else "W1"
    mixed = _kinds(t._run(t.MIXED, specialize_active_lora=True, **full))
    verdict = ({("numeric-mismatch", "replay.qkv_proj.adapter_rows")}, set())
    out = {COLUMNS[0]: g.shape + ("" if g.piecewise_keyed_on_lora else " (PIECEWISE keyed without the LoRA)"),
           COLUMNS[1]: f"**{bug} reproduced**" if mixed == verdict[0] else f"{bug} not reproduced: {sorted(mixed)}"}
    clean = _kinds(t._run(t.MIXED, specialize_active_lora=False, **full))
    out[COLUMNS[2]] = "silent" if clean == verdict[1] else f"FINDINGS: {sorted(clean)}"
    why = found["faults_unavailable"].get("graph_dispatch_ignores_lora")
    if why:
        out[COLUMNS[3]] = f"not offered: {why}"
    else:
        ops = [t.step(t.req("a", 1, 3), seed=1)]
        caught = ("numeric-mismatch", "replay.qkv_proj.adapter_rows") in _kinds(
            t._run(ops, ("graph_dispatch_ignores_lora",), **t.GRAPHS))
        silent = t._run(ops, **t.GRAPHS) == []
        out[COLUMNS[3]] = ("caught (minimal case), silent without" if caught and silent
                           else f"caught={caught} silent-without={silent}")
    return out


def _builder() -> str:
    from targets.vllm_engine import moe
    return moe.builder().__name__


def _moe(found: dict) -> dict[str, str]:
    if found.get("moe_unavailable"):
        why = f"not driven: {found['moe_unavailable']}"
        return {COLUMNS[4]: why, COLUMNS[5]: why}
    t = _tests("test_vllm_engine_moe")
    from targets.vllm_engine.source_facts import facts
    r1 = facts(found["api"].version)["R1"]
    clean = _kinds(t._run(t.FAULT_FREE))  # adapter 2 is rsLoRA: R1's case
    plain = _kinds(t._run(t.FAULT_FREE, adapters=t.NO_RSLORA))
    ops, config, tensor = t.MOE_FAULT_CASES["fused_moe_swaps_gate_up"]
    planted = _kinds(t._run(ops, ("fused_moe_swaps_gate_up",), **config))
    r1_seen = clean == {("numeric-mismatch", "step.experts.adapter_rows")}
    m1 = found["known_flags"]["moe_ignores_no_lora"]
    m1_seen = _kinds(t._run(t.M1_OPS, adapters=t.NO_RSLORA)) == {("numeric-mismatch", "step.experts.base_rows")}
    verdict = ("driven (" + _builder() + "); "
               + ("**R1 reproduced** (rsLoRA expert adapter)" if r1_seen else "rsLoRA case silent")
               + ("" if r1_seen == r1 else f" (source says R1={r1}: CHECK)")
               + ("; **M1 reproduced** (base-model step after an adapter step)" if m1_seen else "; M1 case silent")
               + ("" if m1_seen == m1 else f" (code says M1={m1}: CHECK)")
               + ("; plain adapters silent" if not plain else f"; FINDINGS with plain adapters: {sorted(plain)}"))
    return {COLUMNS[4]: verdict,
            COLUMNS[5]: ("caught (minimal case)" if ("numeric-mismatch", tensor) in planted
                         else f"not caught: {sorted(planted)}")}


def _v1_lora() -> str:
    from fuzzrunner.case import Case
    from fuzzrunner.execute import run_case
    from fuzzrunner.target import load_target
    case = Case.from_json((ROOT / "docs" / "findings" / "cases" / "v1_specialize_active_lora.json").read_text())
    try:
        found = run_case(case, load_target("vllm_lora"))
    except Exception as e:  # noqa: BLE001 - a release whose kernels cannot take the case: its one-line reason
        return f"not run: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    kinds = sorted(_kinds(found))
    return "**reproduced**" if any(k == "numeric-mismatch" and t.startswith("replay") for k, t in kinds) else (
        f"not reproduced{': ' + str(kinds) if kinds else ' (silent)'}")


def run(out: Path, version: str, only_moe: bool = False) -> dict:
    """Every check on ``version`` (this process imports that release); ``only_moe``: the MoE columns alone, merged into
    OUT/VERSION.json (the other columns as an earlier run left them)."""
    assert os.environ.get("FUZZRUNNER_VLLM_VERSION") == version, "run it through 'all' (or set FUZZRUNNER_VLLM_VERSION)"
    has = shipped(version)
    path = out / f"{version}.json"
    row: dict[str, str] = {"version": version}
    if only_moe and path.exists():
        row.update(json.loads(path.read_text()))
    try:
        from fuzzrunner.target import load_target
        from targets.vllm_engine import known_flags, load_engine
        found = dict(load_engine())
        found["faults_unavailable"] = load_target("vllm_engine").faults_unavailable
        found["known_flags"] = known_flags(found)
    except Exception as e:  # noqa: BLE001 - the target refuses the release (0.12 - 0.14: no V2 LoraState)
        why = f"not driven: {str(e).splitlines()[0][:200]}"
        row.update({c: why for c in (COLUMNS[4:6] if only_moe else COLUMNS[:6])})
    else:
        if not only_moe:
            row.update(_graphs(found))
        row.update(_moe(found))
    for c, key in ((COLUMNS[:4], "v2_graphs"), (COLUMNS[4:6], "moe")):
        if not has[key] and not (only_moe and key != "moe"):
            row.update({k: "not in release" for k in c})
    if not only_moe:
        row[COLUMNS[6]] = _v1_lora()
    path.write_text(json.dumps(row, indent=1))
    return row


SHORT = ((r"^not driven: vLLM \S+ has no V2 model runner LoraState.*", "not driven (target refused: no `LoraState`)"),
         (r"^not driven: no MoE block on this vLLM on this platform: its unquantized MoE method binds TritonExperts.*",
          "not driven on the CPU (Triton experts only on a CUDA-like platform: no LoRA branch in the backend oracle)"),
         (r"^not driven: no MoE block on this vLLM \(No module named '\S+gate_linear'\).*",
          "not driven (no `GateLinear`, `fused_moe/router/gate_linear.py`: before 0.17)"),
         (r"^not offered: .*keys its graphs on the batch's shape alone.*", "not offered (the release's own dispatch)"),
         (r"^not driven: no V2 runner graph manager of a known shape.*",
          "not driven (0.15 - 0.16's size-keyed `CudaGraphManager`: `get_cudagraph_size` / `run`, not adapted)"))


def _short(cell: str) -> str:
    """A table cell: the long refusals abbreviated (OUT/VERSION.json keeps them whole)."""
    import re
    for pattern, short in SHORT:
        if re.match(pattern, cell):
            return short
    return cell


def table(out: Path, versions: list[str]) -> str:
    lines = ["| vLLM | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for v in versions:
        p = out / f"{v}.json"
        row = json.loads(p.read_text()) if p.exists() else {c: f"not run (see {out}/{v}.log)" for c in COLUMNS}
        lines.append(f"| {v} | " + " | ".join(_short(row.get(c, "–")).replace("|", "/") for c in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("all", "run", "table", "moe", "run-moe"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    mode, out, versions = argv[0], Path(argv[1]), argv[2:]
    out.mkdir(parents=True, exist_ok=True)
    if mode in ("run", "run-moe"):
        print(json.dumps(run(out, versions[0], only_moe=mode == "run-moe"), indent=1))
        return 0
    if mode in ("all", "moe"):
        for v in versions:
            if mode == "all" and (out / f"{v}.json").exists():
                continue
            print(f"== vLLM {v}", file=sys.stderr, flush=True)
            env = {**os.environ, "FUZZRUNNER_VLLM_VERSION": v, "PYTHONPATH": str(ROOT)}
            child = "run" if mode == "all" else "run-moe"
            with open(out / f"{v}{'' if mode == 'all' else '.moe'}.log", "w") as log:
                subprocess.run(["nice", "-n", "10", sys.executable, __file__, child, str(out), v], env=env,
                               stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, timeout=3600, check=False)
    text = table(out, versions)
    if mode in ("all", "moe"):
        (out / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
