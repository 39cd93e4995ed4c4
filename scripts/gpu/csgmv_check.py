"""The GPU acceptance run's three csgmv findings (sglang-clean, 2026-12-06), replayed and explained on cuda.

Mechanism: SGLang's ``cached_triton_kernel`` (sglang/srt/utils/common.py, installed on CUDA only) keeps the first
compiled csgmv shrink per key ``(K, NUM_SLICES, BLOCK_M)``; ``N`` (slices x the pool's max_lora_rank) is a
constexpr outside the key. One server has one max_lora_rank; a fuzz worker runs cases of ranks 8 and 16 in one
process, so a case ran the kernel compiled for the worker's last case of the same hidden size. The target now
empties those caches at each case (API.fresh_kernel_caches); "unfixed" below turns that off in the child.

Each run is a fresh process that runs a sequence of cases (a primer of the other rank, then the finding) and
prints one line: what was expected, what came, OK or UNEXPECTED. The last line is ``CSGMV-CHECK: PASS|FAIL``.

Needs the SGLang tree (``python3 scripts/gpu_acceptance.py --steps sglang-tree``). About a minute.
Usage: python3 scripts/gpu/csgmv_check.py [--jobs 10]
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
from acceptance_tools import PY, ROOT, Verdict, base_env, report_checks, sglang_site  # noqa: E402

CASES = Path(__file__).resolve().parent / "cases"
DEADLINE_S = 85.0
CHILD = r"""
import json, sys
from fuzzrunner.case import Case
from fuzzrunner.execute import run_case
from fuzzrunner.target import load_target
mode, cases = sys.argv[1], json.loads(sys.argv[2])
oracles = sys.argv[3].split(",") if len(sys.argv) > 3 else None  # under a sanitizer: numeric only (no fills)
if mode == "unfixed":  # the target as it was: a case starts with the worker's last kernels
    from fuzzrunner.targets.sglang_lora import api  # the name load_target imports it by (targets.X is another module)
    api.API.fresh_kernel_caches = lambda self: 0
target = load_target("sglang_lora")
for i, d in enumerate(cases):
    try:
        vs = run_case(Case.from_dict(d), target, device="cuda", oracles=oracles)
        out = [{"kind": v.kind, "tensor": v.tensor, "where": v.location, "msg": v.message[:160]} for v in vs]
    except BaseException as e:
        out = [{"kind": "crash", "tensor": "", "where": "raised", "msg": f"{type(e).__name__}: {e}"[:160]}]
    print("CASE", i, json.dumps(out), flush=True)
"""


def load(name: str) -> dict:
    [path] = CASES.glob(f"csgmv_{name}_*.json")
    return json.loads(path.read_text())


def primer(case: dict, **change) -> dict:
    """One eager decode step of one adapter under the finding's configuration, with ``change`` (the other rank):
    it compiles the csgmv kernels of its own key first."""
    return {"schema": 1, "target": "sglang_lora", "faults": [], "config": {**case["config"], **change},
            "ops": [{"op": "step", "mode": "decode", "uids": [2], "seed": 1}]}


def other_rank(case: dict) -> int:
    return 24 - case["config"]["rank"]  # 8 <-> 16


def child(mode: str, seq: list, env: dict, wrap: list | None = None, timeout: float = 75) -> tuple[list, str]:
    argv = [*(wrap or []), PY, "-c", CHILD, mode, json.dumps(seq), *(["numeric"] if wrap else [])]
    try:
        p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        text = p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        text += f"\n(timed out after {timeout:.0f} s)"
    got = [json.loads(m.group(2)) for m in re.finditer(r"^CASE (\d+) (.*)$", text, re.M)]
    return got, text


def summary(violations: list) -> str:
    if not violations:
        return "silent"
    kinds = sorted({v["kind"] for v in violations})
    first = violations[0]
    return f"{'+'.join(kinds)} ({first['tensor'] or first['where']}: {first['msg'][:70]})"


def plan(env: dict) -> list[tuple]:
    """(name, mode, sequence, env, wrap, expected kinds of the last case: () = silent)."""
    crash, garbage, zero = load("crash"), load("garbage"), load("zero_replay")
    bad = ("crash", "numeric-mismatch", "poison-divergence")
    runs = []
    for label, case in (("crash", crash), ("garbage", garbage), ("zero-replay", zero)):
        r = other_rank(case)
        runs += [
            (f"{label}: alone, unfixed (a fresh process: the CPU triage's view)", "unfixed", [case], env, None, ()),
            (f"{label}: after a rank-{r} primer, unfixed", "unfixed", [primer(case, rank=r), case], env, None, bad),
            (f"{label}: after a rank-{r} primer, fixed", "fixed", [primer(case, rank=r), case], env, None, ()),
            (f"{label}: after a rank-{r} primer, unfixed, SGLang's cache off", "unfixed", [primer(case, rank=r), case],
             {**env, "SGLANG_USE_CUSTOM_TRITON_KERNEL_CACHE": "0"}, None, ()),
        ]
    nolap = {**zero, "config": {**zero["config"], "overlap": False}}
    other_hidden = 48 - garbage["config"]["hidden"]  # 16 <-> 32: another K, another key
    runs += [
        (f"garbage: after a rank-8 primer of hidden {other_hidden} (other key), unfixed", "unfixed",
         [primer(garbage, rank=8, hidden=other_hidden), garbage], env, None, ()),
        ("garbage: after a primer of its own rank 16 (same kernel), unfixed", "unfixed",
         [primer(garbage, rank=16, out=16, max_loras=3), garbage], env, None, ()),
        ("zero-replay: after a rank-16 primer, unfixed, overlap off (the thread is not it)", "unfixed",
         [primer(nolap, rank=16), nolap], env, None, bad),
        ("crash: after a rank-16 primer, unfixed, CUDA_LAUNCH_BLOCKING=1", "unfixed",
         [primer(crash, rank=16), crash], {**env, "CUDA_LAUNCH_BLOCKING": "1"}, None, bad),
    ]
    return runs


def sanitizer_runs(env: dict) -> list[tuple]:
    try:
        from fuzzrunner.sanitizer.locate import find_sanitizer
        exe = find_sanitizer().path
    except Exception as e:  # noqa: BLE001 - reported as a skipped run
        print(f"RUN sanitizer runs: SKIP ({str(e)[:120]})", flush=True)
        return []
    senv = {**env, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}  # each tensor its own allocation: exact bounds
    crash, garbage = load("crash"), load("garbage")
    return [
        ("crash: after a rank-16 primer, unfixed, memcheck", "unfixed", [primer(crash, rank=16), crash], senv,
         [exe, "--tool", "memcheck", "--print-limit", "5"], "memcheck"),
        ("garbage: after a rank-8 primer, unfixed, initcheck", "unfixed", [primer(garbage, rank=8), garbage], senv,
         [exe, "--tool", "initcheck", "--print-limit", "5"], "initcheck"),
        ("crash: after a rank-16 primer, fixed, memcheck", "fixed", [primer(crash, rank=16), crash], senv,
         [exe, "--tool", "memcheck", "--print-limit", "5"], "clean"),
    ]


def sanitizer_verdict(text: str, expect: str, cases_done: bool) -> tuple[bool, str]:
    """memcheck: an invalid global access reported; initcheck: an uninitialized global read; clean: neither, and
    every case ran. Reports are read with fuzzrunner's own parser (fuzzrunner/sanitizer/parse.py)."""
    from fuzzrunner.sanitizer.parse import reports
    heads = ("Invalid __global__", "Uninitialized __global__")
    found = [r for r in reports(text.splitlines()) if r.header.startswith(heads)]
    first = ""
    if found:
        at = next((ln.strip() for ln in found[0].lines[1:] if ln.strip().startswith("at ")), "")
        first = f"; first: {found[0].header} {at}"
    said = f"{len(found)} report(s){first}"
    if expect == "clean":
        return not found and cases_done, said + ("" if cases_done else "; the child stopped early")
    head = "Invalid __global__" if expect == "memcheck" else "Uninitialized __global__"
    return any(r.header.startswith(head) for r in found), said


def one(run: tuple) -> tuple[bool, str, float]:
    name, mode, seq, env, wrap, expect = run
    t0 = time.monotonic()
    got, text = child(mode, seq, env, wrap)
    wall = time.monotonic() - t0
    if isinstance(expect, str):  # a sanitizer run
        ok, said = sanitizer_verdict(text, expect, len(got) == len(seq))
        return ok, f"expect {expect:<10} got {said}", wall
    if len(got) < len(seq):
        tail = " | ".join(text.strip().splitlines()[-3:])[:200]
        return False, f"expect {'+'.join(expect) or 'silent'}: the child stopped early ({tail})", wall
    primers_silent = all(not g for g in got[:-1])
    last = got[-1]
    ok = primers_silent and (not last if not expect else any(v["kind"] in expect for v in last))
    said = summary(last) + ("" if primers_silent else f"; primer: {summary(got[0])}")
    return ok, f"expect {'a finding' if expect else 'silent':<10} got {said}", wall


def replay_cli(env: dict) -> tuple[bool, str, float]:
    """`fuzzrunner replay` of the three case files on cuda, each case fresh: not reproduced (exit 0)."""
    t0 = time.monotonic()
    p = subprocess.run([PY, "-m", "fuzzrunner", "replay", "--device", "cuda", *sorted(map(str, CASES.glob("csgmv_*")))],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=75)
    last = (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]
    return p.returncode == 0, f"expect exit 0   got exit {p.returncode} ({last[0][:100]})", time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10)
    args = ap.parse_args()
    try:
        env = base_env(FUZZRUNNER_SGLANG_SITE=str(sglang_site()), FUZZRUNNER_DEVICE="cuda")
    except Verdict as v:
        print(f"CSGMV-CHECK: SKIP ({v.why}; run python3 scripts/gpu_acceptance.py --steps sglang-tree)")
        return 2
    runs = sanitizer_runs(env) + plan(env)  # the slow sanitizer runs start first
    jobs = [(r[0], functools.partial(one, r)) for r in runs]
    jobs.append(("the three case files: fuzzrunner replay --device cuda", functools.partial(replay_cli, env)))
    return report_checks("CSGMV-CHECK", jobs, workers=args.jobs, deadline_s=DEADLINE_S, width=72)


if __name__ == "__main__":
    sys.exit(main())
