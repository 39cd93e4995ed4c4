"""The GPU acceptance run: does the GPU side of this checkout work? One command per device call.

    python3 scripts/gpu_acceptance.py --part 1      # the reference runner, sanitizers, the GPU shadow's cost
    python3 scripts/gpu_acceptance.py --part 2      # vLLM and SGLang compiled, V1, the test suites
    python3 scripts/gpu_acceptance.py --part 3      # where a campaign's time goes: 1 vs 8 workers, the shared
                                                    # Triton cache, the shape palette (issue 46)
    python3 scripts/gpu_acceptance.py --dry-run     # the plan: steps, lanes, budgets, commands
    python3 scripts/gpu_acceptance.py --steps doctor,shadow-cost   # some steps only

Runs on the GPU machine's image as it is (Python 3.12, torch, Triton, Hypothesis, pytest, pytest-xdist,
compute-sanitizer on PATH; no network, nothing installed). The engine trees come as archives carried with
the checkout: .gpu-vllm/0.33.0.tar.xz and .gpu-sglang/sglang.tar.xz (docs/ci.md says how to make them).
Each step prints one ``RESULT <step>: PASS|FAIL|SKIP (why)`` line as it ends, has its own time budget
(stopped past it: FAIL "timed out"), and runs in a lane: the GPU's steps one after another, the checks and
the CPU test suite beside them; a timing step runs alone. The last line is ``ACCEPTANCE: PASS|FAIL``; the
exit status is 0 only if every step passed. With $OUT set, a summary (acceptance-partN.txt: the RESULT
lines and each step's last lines) and every log and report (acceptance-partN-logs.tar.gz) go there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))

import acceptance_steps as S  # noqa: E402
from step_runner import Outcome, Runner, Step, exit_code, plan_lines  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 520.0  # a device call is at most 10 minutes: the steps end by then, with time to pack the logs
TAIL_LINES = 25     # of each step's log, in the summary


def _step(name: str, typical: float, budget: float, lane: str, what: str, **kw) -> Step:
    """Step ``name`` (its body: acceptance_steps.STEPS[name]), usually ``typical`` s, stopped at ``budget`` s."""
    return Step(name, (sys.executable, str(Path(__file__).resolve()), "step", name), budget, lane=lane, what=what,
                typical_s=typical, **kw)


def plan(part: str) -> list[Step]:
    """The steps of a part ("1" - "4" or "all"), in the order they are considered."""
    one = [
        _step("doctor", 45, 180, "gpu", "fuzzrunner doctor: the GPU, compute-sanitizer's self-tests, the shadow's "
              "filter"),
        _step("warm-triton", 90, 300, "gpu", "40 reference_runner cases compiled (Triton's cache for what follows), "
              "the default oracles silent on them"),
        _step("sanitizers", 75, 120, "checks", "initcheck and memcheck silent on the clean runner (60 s each); "
              "initcheck names the dummy-run fault's read", after=("warm-triton",)),
        _step("gpu-only-runner", 100, 200, "checks", "check-target on a runner that builds on cuda itself; its two "
              "planted bugs found, CPU triage 'could not run'", after=("warm-triton",)),
        _step("reference-faults", 210, 270, "gpu", "the reference runner's five faults x seeds 1-3: each found in a "
              "200-example campaign with a 60 s budget (the five of a seed at once)"),
        _step("plugin-xdist", 60, 150, "checks", "the pytest plugin under xdist on the GPU: pinning, a fault, silence"),
        _step("shadow-cost", 130, 240, "gpu", "benchmarks/gpu_shadow.py: the device shadow per case vs plain "
              "(goal <= 3x), silent", alone=True),
    ]
    vllm_tree = _step("vllm-tree", 10, 90, "gpu", "unpack .gpu-vllm/0.33.0.tar.xz")
    two = [
        vllm_tree,
        _step("cpu-suite", 300, 420, "cpu", "the CPU test suite, FUZZRUNNER_DEVICE=cpu, -n CPUs-4 (no slow, no gpu "
              "marks)"),
        _step("v1-repro", 40, 200, "gpu", "V1 on a real CUDA graph: vLLM 0.33.0 unpatched exit 1, patched exit 0",
              needs=("vllm-tree",)),
        _step("v1-replay", 100, 200, "gpu", "V1's case file replayed on cuda: unpatched exit 1, with "
              "FUZZRUNNER_VLLM_PATCH exit 0", needs=("vllm-tree",)),
        _step("reference-clean", 55, 80, "gpu", "a clean compiled campaign, 8 workers, 45 s: no finding, budget kept"),
        _step("sglang-tree", 10, 60, "gpu", "unpack .gpu-sglang/sglang.tar.xz"),
        _step("sglang-clean", 40, 90, "gpu", "sglang_lora 0.5.23 compiled, 40 s: no finding", needs=("sglang-tree",)),
        _step("sglang-fault", 40, 90, "gpu", "sglang_lora compiled, fault graph_seg_indptr_uninitialized, 40 s: found",
              needs=("sglang-tree",)),
        _step("cuda-tests", 200, 300, "checks", "tests/unit and the device shadow's -m gpu tests, compiled, on cuda"),
        _step("hostile-targets", 100, 150, "checks", "CUDA workers: a 200 MB/case leak recycled, a hanging case "
              "stopped by the budget (neither a finding)"),
        _step("two-gpus", 5, 240, "checks", "two GPUs: a worker each, one crash finding from both, xdist pinning",
              optional=True),
        _step("ray", 5, 200, "checks", "a GPU campaign through --ray local (with .raysite/ray312.tar.xz carried)",
              optional=True),
    ]
    three = [
        _step("stage-profile", 250, 320, "gpu", "reference_runner, vllm_lora, sglang_lora compiled, 1 and 8 workers, "
              "--stage-times: per-stage tables, 8 workers' cases/s vs 1 and vs the reference runner's", alone=True),
        _step("triton-cache", 75, 110, "gpu", "vllm_lora twice, 8 workers, on a fresh shared Triton cache: the second "
              "compiles less", alone=True),
        _step("shape-palette", 100, 130, "gpu", "vllm_lora 8 workers with --shape-palette 8 vs without: cases/s, "
              "compile s", alone=True),
    ]
    # the real-engine campaigns, compiled: a cold Triton cache makes each worker's first cases take 15-30 s on an
    # H100, so they get 150 s each and a call of their own (in part 2 they passed its 520 s)
    four = [
        vllm_tree,
        _step("vllm-clean", 160, 200, "gpu", "vllm_lora compiled with V1's patch (FUZZRUNNER_VLLM_PATCH), 150 s: no "
              "finding, its punica entry reached",
              needs=("vllm-tree",)),
        _step("vllm-fault", 160, 200, "gpu", "vllm_lora compiled, fault dummy_run_skips_prepare, 150 s: found, its "
              "CPU triage ran",
              needs=("vllm-tree",)),
        _step("vllm-engine", 170, 220, "checks", "vllm_engine compiled, at once: clean 150 s (vLLM's known bugs only), "
              "fault mapping_cache_ignores_slots 150 s (found, CPU triage ran)", needs=("vllm-tree",)),
    ]
    return {"1": one, "2": two, "3": three, "4": four, "all": one + two + three + four[1:]}[part]


def _select(steps: list[Step], names: str) -> list[Step]:
    wanted = [n for n in names.split(",") if n]
    known = {s.name for s in plan("all")}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"gpu_acceptance: unknown step(s) {', '.join(unknown)}; the steps: {', '.join(sorted(known))}")
    return [s for s in plan("all") if s.name in wanted]


def _summary(outcomes: list[Outcome], code: int, seconds: float) -> str:
    lines = [o.line() for o in outcomes]
    lines.append(f"ACCEPTANCE: {'PASS' if code == 0 else 'FAIL'} ({len(outcomes)} steps, {seconds:.0f} s)")
    for o in outcomes:
        if o.log and os.path.exists(o.log):
            tail = Path(o.log).read_text(errors="replace").splitlines()[-TAIL_LINES:]
            lines += ["", f"== {o.step} ({o.verdict}): last {len(tail)} lines of {os.path.basename(o.log)}", *tail]
    return "\n".join(lines) + "\n"


def _pack(out: Path, label: str, work: Path) -> None:
    """The logs and reports as one tarball in $OUT (a device call brings back a few files)."""
    with tarfile.open(out / f"acceptance-{label}-logs.tar.gz", "w:gz") as t:
        for sub in ("logs", "reports"):
            if (work / sub / label).exists():
                t.add(work / sub / label, arcname=f"{sub}-{label}")


def _triton_cache(work: Path) -> None:
    """A Triton cache carried as .cache/triton-gpu.tar.gz (left in $OUT by an earlier call) warms this one."""
    carried = ROOT / ".cache" / "triton-gpu.tar.gz"
    if carried.is_file() and not (work / "triton").exists():
        work.mkdir(parents=True, exist_ok=True)
        with tarfile.open(carried) as t:
            t.extractall(work)
        if (work / "triton-gpu").exists():
            (work / "triton-gpu").rename(work / "triton")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["step"]:
        return S.run_step(argv[1])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="docs/ci.md: what to carry, the command.")
    ap.add_argument("--part", choices=("1", "2", "3", "4", "all"), default="all")
    ap.add_argument("--steps", default="", help="comma-separated step names instead of a part")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds: no step runs past it")
    ap.add_argument("--save-triton-cache", action="store_true",
                    help="leave Triton's cache in $OUT as triton-gpu.tar.gz (carry it as .cache/triton-gpu.tar.gz)")
    args = ap.parse_args(argv)
    steps = _select(plan("all"), args.steps) if args.steps else plan(args.part)
    label = f"part{args.part}" if not args.steps else "steps"
    if args.dry_run:
        print("\n".join(plan_lines(steps, args.deadline)))
        return 0
    work = S.WORK
    out = Path(os.environ.get("OUT") or ROOT / "out" / "acceptance")
    out.mkdir(parents=True, exist_ok=True)
    _triton_cache(work)
    for sub in ("logs", "reports"):
        shutil.rmtree(work / sub / label, ignore_errors=True)
        (work / sub / label).mkdir(parents=True)
    os.environ["ACCEPTANCE_REPORTS"] = str(work / "reports" / label)
    t0 = time.monotonic()
    print(f"gpu_acceptance {label}: {len(steps)} steps, deadline {args.deadline:.0f} s; logs in {out}", flush=True)
    outcomes = Runner(steps, str(work / "logs" / label), deadline_s=args.deadline).run()
    code = exit_code(steps, outcomes)
    (out / f"acceptance-{label}.txt").write_text(_summary(outcomes, code, time.monotonic() - t0))
    _pack(out, label, work)
    if args.save_triton_cache and (work / "triton").exists():
        with tarfile.open(out / "triton-gpu.tar.gz", "w:gz") as t:
            t.add(work / "triton", arcname="triton-gpu")
    print(f"ACCEPTANCE: {'PASS' if code == 0 else 'FAIL'} ({sum(o.verdict == 'PASS' for o in outcomes)} of "
          f"{len(outcomes)} passed, {time.monotonic() - t0:.0f} s); summary {out / f'acceptance-{label}.txt'}",
          flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
