"""The vLLM engine target and vllm_lora's punica entry on a GPU, from a carried vLLM tree: under 3 minutes.

    python3 scripts/gpu_vllm_engine.py [ARCHIVE_OR_DIR]     # default .gpu-vllm/0.33.0.tar.xz

The tree is made beforehand, on a machine with network, by ``scripts/vllm_setup.sh 0.33.0 --for-gpu
.gpu-vllm/0.33.0`` (it must be made by a checkout with targets/vllm_lora/cuda_like.py: the tree then carries
what a CUDA platform imports). Three campaigns, compiled (``--device cuda``), seed 0, no shrinking:

* ``punica``: vllm_lora, V1's fix applied (FUZZRUNNER_VLLM_PATCH), 25 s: PunicaWrapperGPU imported (its entry
  ``entry=punica`` reached), no finding;
* ``engine-clean``: vllm_engine, 40 s: no finding but vLLM's known bugs (targets/vllm_engine/known.py: P1, S1 on
  releases before 0.34, E1, E2);
* ``engine-fault``: vllm_engine, fault mapping_cache_ignores_slots, 60 s: found.

Each prints ``RESULT <name>: PASS|FAIL (why)``; the last line is ``GPU VLLM ENGINE: PASS|FAIL``, exit 0 only if all
passed. Reports go to out/gpu_vllm_engine/ (or $OUT).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from targets.vllm_engine.known import known_bug  # noqa: E402 - the checkout's, after sys.path

V1_PATCH = ROOT / "docs" / "findings" / "v1_specialize_active_lora.patch"


def tree(arg: str | None) -> Path:
    src = Path(arg or ROOT / ".gpu-vllm" / "0.33.0.tar.xz")
    if src.is_dir():
        return src
    if not src.is_file():
        raise SystemExit(f"gpu_vllm_engine: no vLLM tree at {src}; make it with scripts/vllm_setup.sh 0.33.0 "
                         f"--for-gpu .gpu-vllm/0.33.0 and carry .gpu-vllm/0.33.0.tar.xz")
    dest = Path("/tmp/gpu-vllm-engine")
    if not dest.is_dir():
        dest.mkdir(parents=True)
        with tarfile.open(src) as t:
            t.extractall(dest, filter="tar") if sys.version_info >= (3, 12) else t.extractall(dest)
    return next(p for p in dest.iterdir() if (p / "vllm").is_dir())


def fuzz(out: Path, label: str, target: str, budget: int, *args: str, env: dict) -> tuple[int, dict, float]:
    report = out / f"{label}.json"
    argv = [sys.executable, "-m", "fuzzrunner", "fuzz", "--target", target, "--device", "cuda", "--seed", "0",
            "--no-shrink", "--budget", str(budget), "--max-examples", "5000", "--corpus", str(out / label),
            "--report", str(report), *args]
    print(f"\n== {label}\n$ {' '.join(argv[1:])}", flush=True)
    t0 = time.monotonic()
    r = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=budget * 2 + 120)
    print("\n".join((r.stdout + r.stderr).strip().splitlines()[-30:]), flush=True)
    run = json.loads(report.read_text())["runs"][0] if report.is_file() else {}
    return r.returncode, run, time.monotonic() - t0


def summary(rc: int, run: dict, wall: float) -> str:
    return (f"exit {rc}, {run.get('examples', 0)} cases, {len(run.get('findings', []))} finding(s), "
            f"{wall:.0f} s")


def main() -> int:
    site = tree(sys.argv[1] if len(sys.argv) > 1 else None)
    out = Path(os.environ.get("OUT") or ROOT / "out" / "gpu_vllm_engine")
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FUZZRUNNER_VLLM_SITE=str(site), PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    env.pop("TRITON_INTERPRET", None)
    results = []

    rc, run, wall = fuzz(out, "punica", "vllm_lora", 25, env={**env, "FUZZRUNNER_VLLM_PATCH": str(V1_PATCH)})
    reached = set((run.get("coverage") or {}).get("features") or {})
    ok = rc == 0 and not run.get("findings") and "entry=punica" in reached
    results.append(("punica", ok, f"{summary(rc, run, wall)}; entry=punica "
                                  f"{'reached' if 'entry=punica' in reached else 'NOT reached'}"))

    rc, run, wall = fuzz(out, "engine-clean", "vllm_engine", 40, env=env)
    release = tuple(int(x) for x in (run.get("code_under_test") or {}).get("release", "0.0").split(".")[:2])
    bugs = [known_bug(f, logits_mapped_per_row=release >= (0, 34)) for f in run.get("findings", [])]
    new = [f["signature"] for f, b in zip(run.get("findings", []), bugs) if b is None]
    ok = rc in (0, 1) and run.get("examples", 0) > 0 and not new
    results.append(("engine-clean", ok, f"{summary(rc, run, wall)}; known: {sorted(set(filter(None, bugs)))}"
                                        + (f"; NEW: {new[:3]}" if new else "")))

    rc, run, wall = fuzz(out, "engine-fault", "vllm_engine", 60, "--fault", "mapping_cache_ignores_slots", env=env)
    results.append(("engine-fault", rc == 1 and bool(run.get("findings")), summary(rc, run, wall)))

    print()
    for name, ok, why in results:
        print(f"RESULT {name}: {'PASS' if ok else 'FAIL'} ({why})")
    passed = all(ok for _, ok, _ in results)
    print(f"GPU VLLM ENGINE: {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
