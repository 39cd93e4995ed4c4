"""What each step of the GPU acceptance run checks (``scripts/gpu_acceptance.py step NAME`` runs one).

Each step runs its commands (acceptance_tools.py), prints their output and what it checked, and ends with one
``VERDICT PASS|FAIL|SKIP: why`` line (``step_runner.py`` turns it into the step's RESULT line).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable

from acceptance_tools import (
    PY,
    RAY_ARCHIVE,
    REF_FAULTS,
    REF_SEEDS,
    REPORTS,
    ROOT,
    SGLANG_ARCHIVE,
    V1_PATCH,
    V1_REPRO,
    VLLM_ARCHIVE,
    WORK,
    Run,
    Verdict,
    at_once,
    base_env,
    check,
    clean,
    found,
    fuzz,
    pytest_counts,
    say,
    sglang_site,
    sh,
    unpack,
    vllm_site,
)
from perf_steps import PERF_STEPS

# -- the steps -------------------------------------------------------------------------------------
# Each returns (verdict, why); the campaign budgets are inside the step budgets of gpu_acceptance.py.

def step_doctor() -> tuple[str, str]:
    rc, out = sh([PY, "-m", "fuzzrunner", "doctor"], env=base_env())
    facts = {ln.split()[0]: ln.split(None, 1)[1] for ln in out.splitlines() if ln[:1].isalpha() and " " in ln}
    if rc != 0:
        return "FAIL", f"exit {rc}: {facts.get('sanitizer', '')[:200]}"
    if not facts.get("device", "").startswith("cuda"):
        return "FAIL", f"no GPU: device {facts.get('device')!r}"
    return "PASS", f"{facts['device']}; torch {facts.get('torch')}, triton {facts.get('triton')}; " \
                   f"sanitizer {facts.get('sanitizer', '?')[:80]}"


WARM_CODE = """
import os, sys, time
from hypothesis import Phase, given, settings, seed
from fuzzrunner import replay
from fuzzrunner.target import load_target
cache = os.environ["TRITON_CACHE_DIR"]
count = lambda: sum(1 for e in os.scandir(cache) if e.is_dir()) if os.path.isdir(cache) else 0
cases, before, t0 = [], count(), time.perf_counter()
strategy = load_target("reference_runner").cases((), max_ops=8)
def keep(case):
    cases.append(case)
settings(max_examples=int(sys.argv[1]), database=None, phases=[Phase.generate], deadline=None)(
    seed(7)(given(strategy)(keep)))()
loud = [(i, v.signature.short()) for i, c in enumerate(cases) for v in replay(c, device=sys.argv[2])
        if v.kind != "tool-limitation"]
print(f"WARM {len(cases)} cases, {count() - before} kernels compiled, {time.perf_counter() - t0:.0f} s, "
      f"violations {loud[:5]}")
"""


def step_warm_triton() -> tuple[str, str]:
    """Compile what the reference runner launches (Triton's cache, shared by every later step), and check
    the default oracles are silent on fault-free cases on this GPU."""
    rc, out = sh([PY, "-c", WARM_CODE, "40", "cuda"], env=base_env(FUZZRUNNER_DEVICE="cuda"))
    m = re.search(r"WARM (.*)", out)
    if rc != 0 or not m:
        return "FAIL", f"exit {rc}: {out.strip().splitlines()[-1][:300] if out.strip() else 'no output'}"
    return ("FAIL" if "violations []" not in m.group(1) else "PASS"), m.group(1)


def step_reference_faults() -> tuple[str, str]:
    """Each planted fault of the reference runner found on the GPU by a 200-example campaign with a 60 s
    budget, on three seeds (the five faults of one seed at once)."""
    runs: list[Run] = []
    for seed in REF_SEEDS:
        runs += at_once([lambda f=f, s=seed: fuzz(f"{f}-seed{s}", "reference_runner", "--fault", f, "--seed", str(s),
                                                  "--max-examples", "200", "--no-shrink", "--precheck-workers", "2",
                                                  budget=60) for f in REF_FAULTS])

    def expect(r: Run) -> str:
        why = found(r)
        if not why and r.examples < 200 and r.stop != "max-examples":
            why = f"found, but only {r.examples} of 200 examples ran within the budget (stop {r.stop})"
        return why
    verdict, why = check(runs, expect)
    rates = [r.examples / r.wall for r in runs if r.wall]
    replayed = _replay_a_crash()
    if replayed:
        verdict, why = "FAIL", f"{replayed}; {why}"
    return verdict, f"{why}; {sum(1 for r in runs if not found(r))}/{len(runs)} found, " \
                    f"{min(rates, default=0):.1f}-{max(rates, default=0):.1f} cases/s"


def _replay_a_crash() -> str:
    """A crash finding of the GPU campaign replayed in an isolated worker on cuda: reproduced (exit 1)."""
    corpus = WORK / "corpora" / f"{REF_FAULTS[0]}-seed{REF_SEEDS[0]}"
    files = [*sorted(corpus.glob("expected/reference_runner/*.json")),  # (a planted fault's findings)
             *sorted(corpus.glob("findings/reference_runner/*.json"))]
    if not files:
        return f"no finding file under {corpus} to replay"
    rc, _ = sh([PY, "-m", "fuzzrunner", "replay", files[0], "--device", "cuda"], env=base_env(), timeout=180)
    return "" if rc == 1 else f"replay of {files[0].name} on cuda: exit {rc}, expected 1 (reproduced)"


def step_reference_clean() -> tuple[str, str]:
    r = fuzz("clean-w8", "reference_runner", "--workers", "8", "--seed", "4", "--max-examples", "100000", budget=45)
    verdict, why = check([r], clean)
    return verdict, f"{why}; {r.examples} cases, {r.examples / max(r.wall, 1e-9):.1f} cases/s"


def step_sanitizers() -> tuple[str, str]:
    """compute-sanitizer campaigns: initcheck and memcheck silent on the fault-free runner; initcheck names
    the never-written mapping of the dummy-run fault (its reports land on the right case)."""
    runs = at_once([
        lambda: fuzz("initcheck-clean", "reference_runner", "--sanitizer", "initcheck", "--seed", "7",
                     "--max-examples", "100000", "--no-shrink", budget=60),
        lambda: fuzz("memcheck-clean", "reference_runner", "--sanitizer", "memcheck", "--seed", "7",
                     "--max-examples", "100000", "--no-shrink", budget=60),
        lambda: fuzz("initcheck-fault", "reference_runner", "--sanitizer", "initcheck", "--fault",
                     "dummy_run_skips_mapping", "--seed", "2", "--max-examples", "30", budget=60)])

    def expect(r: Run) -> str:
        if r.label.endswith("clean"):
            return clean(r)
        tools = {f["signature"]["tool"] for f in r.findings}
        return found(r) or ("" if "initcheck" in tools else f"no initcheck finding (tools {sorted(tools)})")
    return check(runs, expect)


def step_gpu_only_runner() -> tuple[str, str]:
    """A runner that builds its tensors on cuda itself: check-target says it is GPU-only, and a campaign
    finds its two planted bugs, their CPU triage 'could not run' (never a lost finding)."""
    spec = "tests/integration/gpu_only_target.py:TARGET"
    rc, out = sh([PY, "-m", "fuzzrunner", "check-target", spec], env=base_env(), timeout=300)
    verdict_line = next((ln for ln in out.splitlines() if ln.startswith("verdict")), "no verdict line")
    r = fuzz("gpu-only", spec, "--fault", "dummy_skips_slots", "--fault", "padding_overruns", "--max-examples", "150",
             "--seed", "3", budget=60)

    def expect(r: Run) -> str:
        triage = sorted({(f.get("triage") or {}).get("status", "none") for f in r.findings})
        if r.exit != 1 or len(r.findings) != 2:
            return f"expected exit 1 with two findings, got {r.line()}"
        return "" if triage == ["could-not-run"] else f"triage {triage}, expected could-not-run"
    verdict, why = check([r], expect)
    if rc != 1 or "GPU campaigns only" not in verdict_line:
        return "FAIL", f"check-target exit {rc} ({verdict_line.strip()}), expected 1 and 'GPU campaigns only'; {why}"
    return verdict, f"check-target: {verdict_line.split(None, 1)[1][:60]}; {why}"


def step_plugin_xdist() -> tuple[str, str]:
    """The pytest plugin under xdist on the GPU: each worker pinned to one device, a fault found, silence."""
    rc, out = sh([PY, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider", "-p", "fuzzrunner.pytest_plugin",
                  "scripts/gpu/test_xdist_pinning.py"], env=base_env(OUT=str(REPORTS)))
    c = pytest_counts(out)
    return ("PASS" if rc == 0 and c.get("passed") == 6 else "FAIL"), f"exit {rc}, {c}"


def step_shadow_cost() -> tuple[str, str]:
    """The GPU shadow's cost per case against plain compiled runs (goal: at most 3x), silent on fault-free cases."""
    rc, out = sh([PY, "benchmarks/gpu_shadow.py", "--rows", "none", "--cases", "60", "--cpu-cases", "0", "--seed", "7"],
                 env=base_env())
    ratio = re.search(r"ratio per case ([\d.]+) \(median\), of the totals ([\d.]+)", out)
    loud = re.search(r"fault-free cases: (\d+)", out)
    if rc != 0 or not ratio or not loud:
        return "FAIL", f"exit {rc}: no ratio in the output"
    median, totals, n = float(ratio.group(1)), float(ratio.group(2)), int(loud.group(1))
    ok = median <= 3.0 and n == 0
    return ("PASS" if ok else "FAIL"), f"shadow/plain {median:.2f}x per case (median), {totals:.2f}x of the totals " \
                                       f"(goal <= 3x); {n} violations on fault-free cases"


def step_cuda_tests() -> tuple[str, str]:
    """The unit tests and the device shadow's GPU tests, compiled, with real CUDA graphs."""
    rc, out = sh([PY, "-m", "pytest", "-q", "-n", "4", "-p", "no:cacheprovider", "-m", "not slow", "-rfE",
                  "tests/unit", "tests/power/test_gpu_shadow.py"], env=base_env(FUZZRUNNER_DEVICE="cuda"))
    c = pytest_counts(out)
    ok = rc == 0 and c.get("passed", 0) > 0
    return ("PASS" if ok else "FAIL"), f"exit {rc}, {c}"


def step_cpu_suite() -> tuple[str, str]:
    """The CPU test suite on the GPU machine's image, FUZZRUNNER_DEVICE=cpu (what it cannot have skips with
    the reason: Ray, fakeredis, playwright, jsonschema, an engine tree, the network)."""
    n = str(max(2, (os.cpu_count() or 4) - 4))
    env = {**base_env(FUZZRUNNER_DEVICE="cpu")}
    env.pop("TRITON_CACHE_DIR", None)
    rc, out = sh([PY, "-m", "pytest", "-q", "-n", n, "-p", "no:cacheprovider", "-m", "not slow and not gpu", "-rfEs",
                  "tests"], env=env)
    c = pytest_counts(out)
    reasons: dict[str, int] = {}
    for m in re.finditer(r"^SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$", out, re.M):
        reasons[m.group(2)[:70]] = reasons.get(m.group(2)[:70], 0) + int(m.group(1))
    say("skip reasons:\n" + "\n".join(f"  {k:4} {r}" for r, k in sorted(reasons.items(), key=lambda x: -x[1])))
    ok = rc == 0 and not c.get("failed") and not c.get("error") and not c.get("errors")
    return ("PASS" if ok else "FAIL"), f"-n {n}: {c}"


def step_vllm_tree() -> tuple[str, str]:
    t0 = time.monotonic()
    unpack(VLLM_ARCHIVE, WORK / "vllm")
    return "PASS", f"{vllm_site()} in {time.monotonic() - t0:.0f} s"


def step_v1_repro() -> tuple[str, str]:
    """V1 (docs/findings/): vLLM 0.33.0's own kernels under a real torch.cuda.CUDAGraph lose an adapter
    (exit 1); with the fix applied to a copy of the tree they do not (exit 0)."""
    site = vllm_site()
    env = base_env(PYTHONPATH=os.pathsep.join([str(site), str(site / "deps"), str(ROOT)]))
    before, _ = sh([PY, V1_REPRO, "--device", "cuda"], env=env, timeout=240)
    code = ("import sys; from pathlib import Path; from targets.vllm_lora import patching; "
            "print(patching.apply(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))")
    rc, out = sh([PY, "-c", code, V1_PATCH, site, WORK / "vllm-patched"], env=base_env(), timeout=120)
    if rc != 0:
        return "FAIL", f"unpatched exit {before} (expected 1); the patch did not apply (exit {rc})"
    fixed = out.strip().splitlines()[-1]
    env["PYTHONPATH"] = os.pathsep.join([fixed, env["PYTHONPATH"]])
    after, _ = sh([PY, V1_REPRO, "--device", "cuda"], env=env, timeout=240)
    ok = before == 1 and after == 0
    return ("PASS" if ok else "FAIL"), f"unpatched exit {before} (expected 1), patched exit {after} (expected 0)"


V1_CASE = ROOT / "docs" / "findings" / "cases" / "v1_specialize_active_lora.json"


def step_v1_replay() -> tuple[str, str]:
    """V1's case file replayed by fuzzrunner on cuda: reproduced (exit 1) on vLLM 0.33.0, gone (exit 0) with
    V1's fix given as FUZZRUNNER_VLLM_PATCH (issue 47, item 14: on the GPU image the patch went unused, and
    the replay still reproduced)."""
    rcs = [sh([PY, "-m", "fuzzrunner", "replay", "--device", "cuda", V1_CASE], env=_vllm_env(patched),
              timeout=200)[0] for patched in (False, True)]
    ok = rcs == [1, 0]
    return ("PASS" if ok else "FAIL"), f"unpatched exit {rcs[0]} (expected 1), patched exit {rcs[1]} (expected 0)"


def _patched(r: Run) -> str:
    """The campaign's report names V1's patch as the code under test (item 14: never a patch ignored)."""
    code = r.report.get("code_under_test") or {}
    return "" if code.get("patch") else f"the report's code_under_test names no patch: {code}"


def _vllm_env(patched: bool) -> dict:
    env = base_env(FUZZRUNNER_VLLM_SITE=str(vllm_site()), FUZZRUNNER_VLLM_CACHE=str(WORK / "vllm-cache"))
    if patched:
        env["FUZZRUNNER_VLLM_PATCH"] = str(V1_PATCH)
    return env


def _triage_ran(r: Run) -> str:
    """A GPU finding's CPU triage on this image: reproduced or not, never the interpreter failing."""
    bad = [f["triage"].get("reason", "")[:120] for f in r.findings if (f.get("triage") or {}).get("status")
           == "could-not-run"]
    return f"CPU triage could not run: {bad[0]}" if bad else ""


def _punica_reached(r: Run) -> str:
    """vllm_lora drew its punica entry: PunicaWrapperGPU imported with the carried tree (it did not before the tree's
    platform answered vLLM's kernel queries: targets/vllm_lora/platform.py)."""
    reached = (r.report.get("coverage") or {}).get("features") or {}
    return "" if "entry=punica" in reached else "entry=punica never reached: PunicaWrapperGPU did not import"


def step_vllm_clean() -> tuple[str, str]:
    """vllm_lora compiled, V1's fix applied (FUZZRUNNER_VLLM_PATCH): no finding; its punica entry reached."""
    # 150 s: on an H100 a vLLM campaign's start-up (shard processes, vLLM's imports, the patched tree) took
    # 37 s and each worker's first cases 15-30 s of Triton compilation; 45 s and 75 s budgets ran 0 cases
    r = fuzz("vllm-clean-patched", "vllm_lora", "--seed", "0", "--max-examples", "5000", budget=150,
             env=_vllm_env(True))
    return check([r], lambda r: clean(r) or _patched(r) or _punica_reached(r))


def _known_only(r: Run) -> str:
    """A fault-free vllm_engine campaign: no finding but vLLM's known bugs (targets/vllm_engine/known.py: P1, S1
    up to 0.33, E1, E2), and some cases ran."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from targets.vllm_engine.known import known_bug
    release = (r.report.get("code_under_test") or {}).get("release", "0.0")
    per_row = tuple(int(x) for x in release.split(".")[:2] if x.isdigit()) >= (0, 34)
    new = [f["signature"] for f in r.findings if known_bug(f, logits_mapped_per_row=per_row) is None]
    if r.exit not in (0, 1) or not r.examples or new:
        return f"expected no finding but vLLM's known bugs, got {r.line()}" + (f"; new: {new[:2]}" if new else "")
    return ""


def step_vllm_engine() -> tuple[str, str]:
    """vllm_engine compiled on the carried tree (vLLM's adapter manager, LoRA layers and V2-runner bookkeeping): a
    fault-free campaign (nothing but vLLM's known bugs) and the planted fault mapping_cache_ignores_slots (found,
    its CPU triage ran), at once."""
    runs = at_once([
        lambda: fuzz("vllm-engine-clean", "vllm_engine", "--seed", "0", "--max-examples", "5000", "--no-shrink",
                     budget=150, env=_vllm_env(False)),
        lambda: fuzz("vllm-engine-fault", "vllm_engine", "--fault", "mapping_cache_ignores_slots", "--seed", "0",
                     "--max-examples", "500", "--no-shrink", budget=150, env=_vllm_env(False))])
    return check(runs, lambda r: _known_only(r) if r.label.endswith("clean") else found(r) or _triage_ran(r))


def step_vllm_fault() -> tuple[str, str]:
    """vllm_lora compiled with a planted fault (the dummy run skips prepare): found, triaged on the CPU."""
    # 150 s: the CPU triage gets 15% of the budget once there is a finding (engine/deadline.py), and a vLLM
    # case on the CPU takes seconds (on the 2-core machine, 27-41 s for one finding's worker and replay)
    r = fuzz("vllm-fault", "vllm_lora", "--fault", "dummy_run_skips_prepare", "--seed", "0", "--max-examples", "500",
             "--no-shrink", budget=150, env=_vllm_env(True))
    return check([r], lambda r: found(r) or _triage_ran(r))


def step_sglang_tree() -> tuple[str, str]:
    unpack(SGLANG_ARCHIVE, WORK / "sglang")
    return "PASS", str(sglang_site())


def _sglang_env() -> dict:
    return base_env(FUZZRUNNER_SGLANG_SITE=str(sglang_site()))


def step_sglang_clean() -> tuple[str, str]:
    r = fuzz("sglang-clean", "sglang_lora", "--seed", "0", "--max-examples", "5000", budget=40, env=_sglang_env())
    return check([r], clean)


def step_sglang_fault() -> tuple[str, str]:
    r = fuzz("sglang-fault", "sglang_lora", "--fault", "graph_seg_indptr_uninitialized", "--seed", "0",
             "--max-examples", "500", "--no-shrink", budget=40, env=_sglang_env())
    return check([r], found)


def step_hostile_targets() -> tuple[str, str]:
    """Targets that misbehave, on CUDA workers: one that leaks 200 MB a case has its worker recycled (not a
    finding), and a case that hangs past the budget is stopped by it (not a timeout finding)."""
    hostile = "tests/integration/hostile_targets.py"
    runs = at_once([
        lambda: fuzz("leaky", f"{hostile}:LEAKY", "--max-examples", "30", "--seed", "1", budget=90,
                     env=base_env(HOSTILE_LEAK_MB="200")),
        lambda: fuzz("sleepy", f"{hostile}:SLEEPY", "--max-examples", "5", "--seed", "1", "--case-timeout", "600",
                     budget=40, env=base_env(HOSTILE_SLEEP_S="3600"))])

    def expect(r: Run) -> str:
        if r.label == "leaky":
            n = int(r.report.get("worker_recycles", 0))
            return "" if clean(r) == "" and n >= 1 else f"expected worker recycle(s) and no finding: {n}, {r.line()}"
        cut = int(r.report.get("budget_cut_cases", 0))
        ok = r.exit in (0, 2) and not r.findings and r.stop == "budget" and cut >= 1  # (one per pre-check shard)
        return "" if ok else f"expected the budget to stop the hanging case (no finding): cut {cut}, {r.line()}"
    return check(runs, expect)


def _gpu_count() -> int:
    rc, out = sh(["nvidia-smi", "-L"], quiet=True)
    return sum(1 for ln in out.splitlines() if ln.startswith("GPU ")) if rc == 0 else 0


def step_two_gpus() -> tuple[str, str]:
    """Two GPUs: one worker per GPU, a crash on both GPUs deduplicated into one finding, xdist pinning."""
    if _gpu_count() < 2:
        raise Verdict("SKIP", "needs 2 GPUs (this machine has fewer)")
    env = base_env(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    runs = [fuzz("two-gpus-clean", "reference_runner", "--workers", "2", "--max-examples", "100000", "--seed", "3",
                 "--no-shrink", budget=45, env=env),
            fuzz("two-gpus-crash", "reference_runner", "--workers", "2", "--fault", "dummy_run_skips_mapping",
                 "--max-examples", "16", "--seed", "3", "--no-shrink", budget=60, env=env)]
    verdict, why = check(runs, lambda r: clean(r) if r.label.endswith("clean") else
                         (found(r) or ("" if len(r.findings) == 1 else f"{len(r.findings)} findings, expected 1")))
    pins = REPORTS / "pinning.txt"
    pins.unlink(missing_ok=True)
    rc, _ = sh([PY, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider", "-p", "fuzzrunner.pytest_plugin",
                "scripts/gpu/test_xdist_pinning.py", "-k", "sees_one"], env=base_env(OUT=str(REPORTS)))
    seen = {ln.split()[1] for ln in pins.read_text().splitlines() if len(ln.split()) > 1} if pins.exists() else set()
    if rc != 0 or len(seen) != 2:
        return "FAIL", f"xdist pinning: exit {rc}, workers saw {sorted(seen)} (expected two devices); {why}"
    return verdict, f"{why}; xdist workers pinned to {sorted(seen)}"


def step_ray() -> tuple[str, str]:
    """A campaign through --ray local on the GPU (one shard = one Ray actor holding the GPU)."""
    site = unpack(RAY_ARCHIVE, WORK / "raysite") if RAY_ARCHIVE.is_file() else None
    if site is None:
        raise Verdict("SKIP", f"no Ray here: carry {RAY_ARCHIVE.relative_to(ROOT)} (docs/cluster.md) to run it")
    env = base_env(PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]), RAY_USAGE_STATS_ENABLED="0")
    runs = [fuzz("ray-fault", "reference_runner", "--ray", "local", "--workers", "1", "--fault", "padding_not_mapped",
                 "--seed", "3", "--max-examples", "100", "--no-shrink", budget=90, env=env)]
    return check(runs, found)


STEPS: dict[str, Callable[[], tuple[str, str]]] = {
    "doctor": step_doctor, "warm-triton": step_warm_triton, "reference-faults": step_reference_faults,
    "reference-clean": step_reference_clean, "sanitizers": step_sanitizers, "gpu-only-runner": step_gpu_only_runner,
    "plugin-xdist": step_plugin_xdist, "shadow-cost": step_shadow_cost, "cuda-tests": step_cuda_tests,
    "cpu-suite": step_cpu_suite, "vllm-tree": step_vllm_tree, "v1-repro": step_v1_repro, "v1-replay": step_v1_replay,
    "vllm-clean": step_vllm_clean, "vllm-fault": step_vllm_fault, "vllm-engine": step_vllm_engine,
    "sglang-tree": step_sglang_tree,
    "sglang-clean": step_sglang_clean, "sglang-fault": step_sglang_fault, "two-gpus": step_two_gpus, "ray": step_ray,
    "hostile-targets": step_hostile_targets,
    **PERF_STEPS,  # part 3: where the time goes, what scales it (perf_steps.py)
}


def run_step(name: str) -> int:
    """Run one step here and print its VERDICT line (the step runner reads it)."""
    try:
        verdict, why = STEPS[name]()
    except Verdict as v:
        verdict, why = v.verdict, v.why
    except Exception as e:  # noqa: BLE001 - a step that breaks is a FAIL with the reason, never a traceback only
        import traceback
        traceback.print_exc()
        verdict, why = "FAIL", f"{type(e).__name__}: {str(e)[:300]}"
    say(f"VERDICT {verdict}: {why}")
    return 0 if verdict == "PASS" else 1
