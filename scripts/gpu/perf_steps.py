"""The GPU acceptance run's part 3: where a real-engine campaign's time goes, and what scales it (issue 46).

* ``stage-profile``: the reference runner, ``vllm_lora`` and ``sglang_lora`` compiled, 1 worker and 8, default
  oracles and case mix, each with ``--stage-times``: the per-stage tables (engine/stages.py) and, in one run on
  one machine, the rates' ratios: each engine target's 8 workers to the reference runner's 8 (goal >= 0.5) and
  to its own 1 (goal >= 5x). PASS: every campaign ran and kept its budget; the goals are said as met or not
  (the tables say where the rest of the time went).
* ``triton-cache``: ``vllm_lora`` twice, 8 workers, on a fresh shared Triton cache (fuzzrunner/triton_cache.py):
  the second campaign compiles less (its ``compile`` stage), and its workers found the first's files.
* ``shape-palette``: ``vllm_lora`` with ``--shape-palette 8``, 8 workers, beside stage-profile's run without:
  cases/s and the ``compile`` stage of each (fuzzrunner/palette.py).
"""

from __future__ import annotations

import os
import shutil
import sys

from acceptance_tools import (
    ROOT,
    SGLANG_ARCHIVE,
    VLLM_ARCHIVE,
    WORK,
    Run,
    Verdict,
    base_env,
    check,
    fuzz,
    say,
    sglang_site,
    unpack,
    vllm_site,
)

sys.path.insert(0, str(ROOT))
RATES: dict[str, float] = {}   # label -> cases/s of the command's wall, across this part's steps (one process each:
#                                a step re-runs what it compares against when it runs alone)


def _vllm_env(**extra: str) -> dict:
    try:
        site = vllm_site()
    except Verdict:
        unpack(VLLM_ARCHIVE, WORK / "vllm")
        site = vllm_site()
    return base_env(FUZZRUNNER_VLLM_SITE=str(site), FUZZRUNNER_VLLM_CACHE=str(WORK / "vllm-cache"), **extra)


def _sglang_env() -> dict:
    try:
        site = sglang_site()
    except Verdict:
        unpack(SGLANG_ARCHIVE, WORK / "sglang")
        site = sglang_site()
    return base_env(FUZZRUNNER_SGLANG_SITE=str(site))


def _profiled(label: str, target: str, workers: int, budget: float, env: dict, *extra: str) -> Run:
    one = ["--precheck-workers", "1"] if workers == 1 else []  # one shard (a GPU's one worker: else CPUs/4 shards)
    r = fuzz(label, target, "--workers", str(workers), *one, "--seed", "4", "--max-examples", "100000",
             "--stage-times", *extra, budget=budget, env=env)
    cases = r.examples + len(r.report.get("replayed", []))
    say(_table(r, cases))
    RATES[label] = cases / max(r.wall, 1e-9)
    return r


def _table(r: Run, cases: int) -> str:
    from fuzzrunner.engine.stages import table
    stages = r.report.get("stage_s") or {}
    shards = int((r.report.get("settings") or {}).get("workers") or 1)
    return f"== {r.label}: stages\n" + table(stages, float(r.report.get("duration_s", 0.0)), cases, shards)


def _ran(r: Run) -> str:
    return "" if r.exit in (0, 1) and r.report.get("stage_s") else f"no stage times: {r.line()}"


def step_stage_profile() -> tuple[str, str]:
    """1 and 8 workers of the reference runner, vllm_lora and sglang_lora, compiled, default oracles."""
    plan = [("reference_runner", 30.0, base_env()), ("vllm_lora", 45.0, _vllm_env()),
            ("sglang_lora", 30.0, _sglang_env())]
    runs = [_profiled(f"profile-{t}-w{w}", t, w, budget, env) for t, budget, env in plan for w in (1, 8)]
    verdict, why = check(runs, _ran)
    ref = RATES.get("profile-reference_runner-w8", 0.0)
    lines = []
    for t in ("vllm_lora", "sglang_lora"):
        one, eight = RATES.get(f"profile-{t}-w1", 0.0), RATES.get(f"profile-{t}-w8", 0.0)
        of_ref, scale = eight / max(ref, 1e-9), eight / max(one, 1e-9)
        met = "met" if of_ref >= 0.5 and scale >= 5 else "NOT met"
        lines.append(f"{t} w8 {eight:.1f}/s = {of_ref:.2f} of reference w8 {ref:.1f}/s, {scale:.1f}x its w1 "
                     f"{one:.1f}/s (goals >= 0.5, >= 5x: {met})")
    say("\n".join(lines))
    return verdict, "; ".join(lines) + f"; {why}"


def step_triton_cache() -> tuple[str, str]:
    """vllm_lora twice on a fresh shared cache: the second compiles less (its workers found the first's kernels)."""
    root = WORK / "triton-shared"
    shutil.rmtree(root, ignore_errors=True)
    env = _vllm_env(FUZZRUNNER_TRITON_CACHE=str(root))
    env.pop("TRITON_CACHE_DIR", None)  # the shared cache, not the acceptance run's own
    runs = [_profiled(f"triton-cache-{n}", "vllm_lora", 8, 30.0, env) for n in ("cold", "warm")]
    verdict, why = check(runs, _ran)
    cold, warm = ((r.report.get("stage_s") or {}).get("compile", 0.0) for r in runs)
    files = sum(len(f) for _, _, f in os.walk(root))
    ok = verdict == "PASS" and files > 0 and warm < cold
    say(f"compile stage: cold {cold:.1f} s, warm {warm:.1f} s; {files} files under {root}")
    return ("PASS" if ok else "FAIL"), (f"compile s cold {cold:.1f} -> warm {warm:.1f} (summed over 8 workers), "
                                        f"{files} cache files, cases/s {RATES['triton-cache-cold']:.1f} -> "
                                        f"{RATES['triton-cache-warm']:.1f}; {why}")


def step_shape_palette() -> tuple[str, str]:
    """vllm_lora with an 8-shape palette against the full case space, 8 workers each, back to back."""
    env = _vllm_env()
    runs = [_profiled(f"palette-{p}", "vllm_lora", 8, 45.0, env, "--shape-palette", p) for p in ("0", "8")]
    verdict, why = check(runs, _ran)
    off, on = RATES["palette-0"], RATES["palette-8"]
    comp = [(r.report.get("stage_s") or {}).get("compile", 0.0) for r in runs]
    return verdict, (f"cases/s {off:.1f} (no palette) -> {on:.1f} (8 shapes), x{on / max(off, 1e-9):.2f}; compile s "
                     f"{comp[0]:.1f} -> {comp[1]:.1f}; {why}")


PERF_STEPS = {"stage-profile": step_stage_profile, "triton-cache": step_triton_cache,
              "shape-palette": step_shape_palette}
