"""vllm_engine's MoE block compiled on a GPU: vLLM's FusedMoEWithLoRA as shipped (targets/vllm_engine/moe.py).

CPU campaigns draw the MoE block; GPU campaigns do not yet (moe.DEVICES), until this passes on the GPU image:
vLLM's base fused-MoE Triton kernel and its fused-MoE LoRA kernels compiled, the carried tree (no ``vllm._C``:
``_C::silu_and_mul`` and ``_moe_C::moe_sum`` answered as on the CPU), its workspace manager on cuda.

One child process runs three cases from tests/integration/test_vllm_engine_moe.py on the device and prints one
line each: expected, got, OK or UNEXPECTED; the last line is ``VLLM-ENGINE-MOE: PASS|FAIL``.

* fault-free: adapters with and without expert weights, a base request, a removal, a dummy run: silent;
* ``fused_moe_swaps_gate_up`` planted: a numeric mismatch in ``step.experts.adapter_rows``;
* ``activation_keeps_missing_modules`` planted, an eviction refilling the slot: the same.

Needs the vLLM tree (``python3 scripts/gpu_acceptance.py --steps vllm-tree``), or ``--device cpu`` here (Triton's
interpreter; a few minutes on the 2-core machine). Usage: python3 scripts/gpu/vllm_engine_moe.py [--device cpu]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
from acceptance_tools import PY, ROOT, Verdict, base_env, vllm_site  # noqa: E402

CHILD = r"""
import json, sys
from fuzzrunner.case import Case
from fuzzrunner.execute import run_case
from fuzzrunner.target import load_target
device, cases = sys.argv[1], json.loads(sys.argv[2])
target = load_target("vllm_engine")
for i, d in enumerate(cases):
    try:
        vs = run_case(Case("vllm_engine", d["config"], tuple(d["ops"]), tuple(d["faults"])), target, device=device)
        out = [{"kind": v.kind, "tensor": v.tensor, "msg": v.message[:160]} for v in vs]
    except BaseException as e:
        out = [{"kind": "crash", "tensor": "", "msg": f"{type(e).__name__}: {e}"[:160]}]
    print("CASE", i, json.dumps(out), flush=True)
"""

def _test_module(name: str = "test_vllm_engine_moe.py"):
    """An integration test's module (its config, ops and fault cases: one source for the CPU test and this check)."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ROOT / "tests" / "integration" / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def plan() -> list[tuple[str, dict, tuple | None]]:
    """(name, case, the (kind, tensor) expected among its violations; None: silent)."""
    t = _test_module()
    runs: list[tuple[str, dict, tuple | None]] = [
        ("fault-free", {"config": t.CONFIG, "ops": t.FAULT_FREE, "faults": []}, None)]
    for fault in ("fused_moe_swaps_gate_up", "activation_keeps_missing_modules"):
        ops, config, tensor = t.MOE_FAULT_CASES[fault]
        runs.append((fault, {"config": {**t.CONFIG, **config}, "ops": ops, "faults": [fault]},
                     ("numeric-mismatch", tensor)))
    return runs


def main(argv: list[str] | None = None, *, runs_of=None, tag: str = "VLLM-ENGINE-MOE", doc: str | None = None) -> int:
    """``runs_of``: the cases to run (``plan``'s form), for another check built on this one
    (vllm_engine_prompt_logprobs.py); ``tag``: its last line's name."""
    ap = argparse.ArgumentParser(description=(doc or __doc__).splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--timeout", type=float, default=540)
    args = ap.parse_args(argv)
    if args.device == "cuda":
        try:
            env = base_env(FUZZRUNNER_VLLM_SITE=str(vllm_site()))
        except Verdict as v:
            print(f"{tag}: SKIP ({v})")
            return 0
    else:
        env = {**base_env(), "TRITON_INTERPRET": "1"}
    runs = (runs_of or plan)()
    try:
        p = subprocess.run([PY, "-c", CHILD, args.device, json.dumps([c for _, c, _ in runs])], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=args.timeout)
        text = p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        text = (e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or "") + \
            f"\n(timed out after {args.timeout:.0f} s)"
    got = {int(m.group(1)): json.loads(m.group(2)) for m in re.finditer(r"^CASE (\d+) (.*)$", text, re.M)}
    ok = True
    for i, (name, _, want) in enumerate(runs):
        vs = got.get(i)
        seen = {(v["kind"], v["tensor"]) for v in vs or []}
        good = vs is not None and (not vs if want is None else want in seen)
        ok &= good
        said = "missing" if vs is None else "silent" if not vs else "; ".join(
            f"{v['kind']} {v['tensor']}: {v['msg'][:90]}" for v in vs[:2])
        print(f"{'OK' if good else 'UNEXPECTED'}  {name}: expected {'silent' if want is None else ' '.join(want)}, "
              f"got {said}")
    if not ok or len(got) < len(runs):
        print(text[-3000:])
    print(f"{tag}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
