"""The device shadow on cuda for sglang_engine (SGLang 0.5.23 compiled), after the H100 crash it had there.

Until the fix, ``--oracle shadow`` on cuda died before the first op: "TypeError: function takes exactly 32
arguments (27 given)" at sglang/srt/utils/common.py:4921. SGLang's ``cached_triton_kernel`` (class ``CachedKernel``,
on CUDA only) keeps what ``fn[grid](*args, **kwargs)`` returned and launches it directly later; the shadow had
returned its instrumented twin's compiled kernel (five more arguments). A hooked launch now returns a
``ReturnedKernel`` (fuzzrunner/oracles/shadow/gpu/returned_kernel.py) that relaunches the original through
``JITFunction.run``, checked.

Runs, each a fresh process, one line each (OK or UNEXPECTED), then ``SGLANG-ENGINE-DEVICE-SHADOW: PASS|FAIL``:
  replay      ``fuzzrunner replay <the NaN finding's case> --device cuda --oracle shadow``: no TypeError, exit 0
              or 1 (1 only with a finding of the shadow's own, printed);
  lifecycle   the integration test's csgmv and triton lifecycles and the NaN case, in one process under the
              device shadow: no crash, every kept csgmv kernel relaunched through the hook (relaunches > 0);
  checked     the NaN case after a rank-8 primer with SGLang's cache left full (the target's per-case emptying
              turned off): the relaunched rank-8 shrink is checked, so the shadow reports its unwritten output
              rows or its stores past the output (uninitialized-read / out-of-bounds), where the unchecked twin
              crashed and the plain kernel only produced NaN;
  campaign    ``fuzzrunner fuzz --target sglang_engine --device cuda --oracle shadow`` for 150 s (on the H100 the
              default oracles' first cases took 45 s of set-up and compilation): at least one case, no TypeError,
              no crash finding.

Needs the carried archive .gpu-sglang/sglang.tar.xz (unpacked here if the acceptance run's sglang-tree step has
not). The four runs at once, about 3-4 minutes. Usage: python3 scripts/gpu/sglang_engine_device_shadow.py
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
from acceptance_tools import PY, ROOT, SGLANG_ARCHIVE, WORK, Verdict, base_env, report_checks, sglang_site, unpack  # noqa: E402

FINDING = ROOT / "docs" / "findings" / "cases" / "triage" / "sglang_gpu_nan_2f9d344978cd.json"
CHILD = r"""
import json, os, sys
from fuzzrunner.case import Case
from fuzzrunner.execute import run_case
from fuzzrunner.oracles.shadow.gpu import returned_kernel
from fuzzrunner.target import load_target
mode, cases = sys.argv[1], json.loads(sys.argv[2])
oracles = None if sys.argv[3] == "default" else sys.argv[3].split(",")
if mode == "unfixed":  # the target as it was: a case starts with the worker's earlier kernels
    from fuzzrunner.targets.sglang_lora import kernel_caches  # (the name load_target imports it by)
    kernel_caches.empty = lambda *a, **k: 0
relaunched = [0]
launch = returned_kernel.ReturnedKernel._launch
def counted(self, *a, **k):
    relaunched[0] += 1
    return launch(self, *a, **k)
returned_kernel.ReturnedKernel._launch = counted
target = load_target("sglang_engine")
for i, d in enumerate(cases):
    try:
        vs = run_case(Case.from_dict(d), target, device=os.environ.get("FUZZRUNNER_DEVICE", "cuda"), oracles=oracles)
        out = [{"kind": v.kind, "kernel": v.kernel, "tensor": v.tensor, "msg": v.message[:200]} for v in vs]
    except BaseException as e:
        out = [{"kind": "crash", "kernel": "", "tensor": "", "msg": f"{type(e).__name__}: {e}"[:200]}]
    print("CASE", i, json.dumps(out), flush=True)
print("RELAUNCHES", relaunched[0], flush=True)
"""


def env() -> dict:
    try:
        site = sglang_site()
    except Verdict:
        unpack(SGLANG_ARCHIVE, WORK / "sglang")
        site = sglang_site()
    return base_env(FUZZRUNNER_SGLANG_SITE=str(site), FUZZRUNNER_DEVICE="cuda")


def finding_case() -> dict:
    return json.loads(FINDING.read_text())["case"]


def rank(case: dict, r: int) -> dict:
    """The case with ``max_lora_rank`` r, its adapters' ranks scaled with it."""
    c = case["config"]
    adapters = {n: {**a, "r": min(a["r"] * r // c["max_lora_rank"], r)} for n, a in c["adapters"].items()}
    return {**case, "config": {**c, "max_lora_rank": r, "adapters": adapters}}


def lifecycles() -> list[dict]:
    import importlib.util
    spec = importlib.util.spec_from_file_location("t", ROOT / "tests" / "integration" / "test_sglang_engine.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    return [{"schema": 1, "target": "sglang_engine", "faults": [], "config": t._cfg(b, graph_bs=4),
             "ops": t.LIFECYCLE} for b in ("csgmv", "triton")]


def child(mode: str, cases: list, e: dict, oracles: str = "shadow", timeout: float = 150) -> tuple[list, int, str]:
    """``cases`` run in one fresh process (``mode`` "unfixed": the target's per-case emptying of SGLang's kernel
    caches off; ``oracles``: comma-separated, or "default"): (per case its violations, relaunches, the output)."""
    try:
        p = subprocess.run([PY, "-c", CHILD, mode, json.dumps(cases), oracles], cwd=ROOT, env=e,
                           capture_output=True, text=True, timeout=timeout)
        text = p.stdout + p.stderr
    except subprocess.TimeoutExpired as x:
        text = (x.stdout.decode(errors="replace") if isinstance(x.stdout, bytes) else x.stdout or "") + \
            f"\n(timed out after {timeout:.0f} s)"
    got = [json.loads(m.group(1)) for m in re.finditer(r"^CASE \d+ (.*)$", text, re.M)]
    n = re.search(r"^RELAUNCHES (\d+)$", text, re.M)
    return got, int(n.group(1)) if n else -1, text


def said(vs: list) -> str:
    return "silent" if not vs else "; ".join(f"{v['kind']} {v['kernel'] or v['tensor']}: {v['msg'][:90]}"
                                             for v in vs[:3])


def run_replay(e: dict) -> tuple[bool, str]:
    p = subprocess.run([PY, "-m", "fuzzrunner", "replay", "--device", "cuda", "--oracle", "shadow", str(FINDING)],
                       cwd=ROOT, env=e, capture_output=True, text=True, timeout=150)
    text = p.stdout + p.stderr
    bad = "takes exactly" in text or p.returncode not in (0, 1)
    last = " | ".join(text.strip().splitlines()[-2:])[:220]
    return not bad, f"exit {p.returncode} (expect 0 or 1, no TypeError): {last}"


def run_lifecycle(e: dict) -> tuple[bool, str]:
    cases = [*lifecycles(), finding_case()]
    got, relaunched, text = child("fixed", cases, e)
    crashed = [v for vs in got for v in vs if v["kind"] == "crash" or "takes exactly" in v["msg"]]
    ok = len(got) == len(cases) and not crashed and relaunched > 0
    tail = "" if len(got) == len(cases) else " | child stopped: " + " | ".join(text.strip().splitlines()[-2:])[:200]
    return ok, (f"relaunches {relaunched} (expect > 0); per case: " + " || ".join(said(vs) for vs in got) + tail)


def run_checked(e: dict) -> tuple[bool, str]:
    case = finding_case()
    got, relaunched, text = child("unfixed", [rank(case, 8), case], e)
    if len(got) < 2:
        return False, "child stopped: " + " | ".join(text.strip().splitlines()[-3:])[:240]
    kinds = {v["kind"] for v in got[1]}
    ok = bool(kinds & {"uninitialized-read", "out-of-bounds", "stale-read"}) and "crash" not in kinds
    return ok, f"relaunches {relaunched}; primer: {said(got[0])}; the NaN case: {said(got[1])}"


def run_campaign(e: dict) -> tuple[bool, str]:
    report = WORK / "sglang-engine-device-shadow.json"
    p = subprocess.run([PY, "-m", "fuzzrunner", "fuzz", "--target", "sglang_engine", "--device", "cuda", "--oracle",
                        "shadow", "--seed", "0", "--budget", "150", "--no-shrink", "--no-cpu-triage", "--report",
                        str(report)], cwd=ROOT, env=e, capture_output=True, text=True, timeout=240)
    text = p.stdout + p.stderr
    try:
        runs = json.loads(report.read_text())["runs"]
        findings = [f for r in runs for f in r["findings"]]
        examples = sum(r["examples"] for r in runs)
    except (OSError, ValueError, KeyError):
        findings, examples = [], -1
    crashes = [f["message"][:120] for f in findings if f["signature"]["kind"] == "crash"]
    ok = "takes exactly" not in text and not crashes and p.returncode in (0, 1) and examples > 0
    return ok, (f"exit {p.returncode}, {examples} cases, {len(findings)} finding(s) "
                f"{[f['signature']['kind'] + ' ' + f['signature']['tensor'] for f in findings][:4]}; crashes {crashes}")


def timed(fn, e: dict) -> tuple[bool, str, float]:
    t = time.monotonic()
    ok, what = fn(e)
    return ok, what, time.monotonic() - t


def main() -> int:
    try:
        e = env()
    except Verdict as v:
        print(f"SGLANG-ENGINE-DEVICE-SHADOW: SKIP ({v.why})")
        return 2
    runs = (("campaign", run_campaign), ("replay", run_replay), ("lifecycle", run_lifecycle), ("checked", run_checked))
    # one GPU, four processes at once: each is small
    return report_checks("SGLANG-ENGINE-DEVICE-SHADOW", [(name, functools.partial(timed, fn, e)) for name, fn in runs],
                         width=10)


if __name__ == "__main__":
    sys.exit(main())
