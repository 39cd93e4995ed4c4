#!/usr/bin/env bash
# compute-sanitizer on a GPU machine: the tool and its options, the doctor self-tests, planted
# LoRA-metadata bugs run raw (their output saved for fixtures), a faulty case through the hub
# and a short campaign (reports must land on the right case), and the throughput benchmark.
# Uses the machine's python3 as it is (torch, triton, hypothesis, pytest; compute-sanitizer on
# PATH); installs nothing. Raw logs and a copy of this output go to $OUT (default /tmp/out).
# About 6 minutes; every step has its own time limit and a failed step does not stop the rest.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_sanitizer_check.txt") 2>&1
export PYTHONPATH=. FUZZRUNNER_DEVICE=cuda OUT
unset TRITON_INTERPRET  # compiled kernels, whatever the caller's shell had
failed=()
step() { echo; echo "== $1 ($(date +%T))"; }
run() {  # run NAME SECONDS CMD...: time-limited, remembered when it fails
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@"
  local rc=$?
  [ "$rc" -eq 0 ] || { echo "!! $name failed (exit $rc$([ "$rc" -eq 124 ] && echo ", timed out after ${limit}s"))"; failed+=("$name"); }
}

step "versions and compute-sanitizer"
python3 -c 'import torch, triton; print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton.__version__}, cuda available: {torch.cuda.is_available()}")'
nvidia-smi -L || true
command -v compute-sanitizer || echo "compute-sanitizer is not on PATH"
compute-sanitizer --version 2>&1 | tee "$OUT/compute-sanitizer-version.txt"
compute-sanitizer --help > "$OUT/compute-sanitizer-help.txt" 2>&1 || true
run locate 60 python3 - <<'PY'
from fuzzrunner.sanitizer import find_sanitizer, sanitizer_wrapper
s = find_sanitizer()
print(f"found {s.path}, version {s.version!r} (from {s.version_line!r})")
for opt in ("tool", "print-limit", "show-backtrace", "launch-timeout", "target-processes", "error-exitcode",
            "strip-paths", "destroy-on-device-error", "padding", "save", "xml"):
    print(f"  --{opt:<24} {'listed' if s.supports(opt) else 'NOT LISTED in --help'}")
for tool in ("initcheck", "memcheck"):
    argv, env = sanitizer_wrapper(tool, sanitizer=s)
    print(f"  {tool}: {' '.join(argv)}  env {env}")
PY

step "doctor self-tests (a planted read in a Triton kernel)"
run self-test 240 python3 - <<'PY'
import sys
from fuzzrunner.sanitizer import self_test
ok_all = True
for tool in ("initcheck", "memcheck"):
    ok, detail = self_test(tool)
    ok_all &= ok
    print(f"{tool}: {'ok' if ok else 'FAILED'}: {detail}")
sys.exit(0 if ok_all else 1)
PY

step "planted LoRA-metadata bugs, raw (logs and XML for fixtures in \$OUT)"
cat > "$OUT/planted.py" <<'PY'
"""lora_shrink over metadata never programmed (uninit) or poisoned with 0x7f7f7f7f (poison)."""
import sys
import torch
from fuzzrunner.kernels import KernelConfig, lora_shrink
from fuzzrunner.runner.kernel_meta import LoRAKernelMeta

dev = torch.device("cuda")
L, M, R, K = 2, 8, 8, 32
meta = LoRAKernelMeta.make("meta", L, 16, dev)  # torch.empty mapping buffers
if sys.argv[1] == "poison":
    meta.prepare(torch.tensor([0, 1, 0, 1, -1, 0, 1, 0], dtype=torch.int32, device=dev))
    meta.active_lora_ids.fill_(0x7F7F7F7F)  # "initialized" to initcheck; an index far out of range
x = torch.randn(M, K, device=dev)
lora_a = torch.randn(1, L, R, K, device=dev)
out = torch.empty(1, M, R, device=dev)
lora_shrink(x, lora_a, out, *meta.meta_args(M)[:5], meta.no_lora_flag_cpu, L + 1, 0.5, KernelConfig(interpreted=False))
torch.cuda.synchronize()
print("planted script done")
PY
run planted 200 python3 - <<'PY'
import os, subprocess, sys
from fuzzrunner.sanitizer import find_sanitizer, parse_text, parse_xml, sanitizer_wrapper
out, s = os.environ["OUT"], find_sanitizer()
for mode, tool in (("uninit", "initcheck"), ("poison", "memcheck"), ("poison", "initcheck")):
    name = f"{out}/real_{tool}_planted_{mode}"
    argv, env = sanitizer_wrapper(tool, sanitizer=s, extra_args=["--save", name + ".xml", "--xml"])
    done = subprocess.run([*argv, sys.executable, f"{out}/planted.py", mode], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=150)
    text = done.stdout + done.stderr
    open(name + ".log", "w").write(text)
    print(f"-- {mode} under {tool}: exit {done.returncode}, {text.count('=========')} report lines -> {name}.log")
    for v in parse_text(text, tool=tool):
        print(f"   text: {v.signature.short()} x{v.details['count']}")
    try:
        for v in parse_xml(open(name + ".xml", "rb").read(), tool=tool):
            print(f"   xml:  {v.signature.short()} x{v.details['count']}")
    except Exception as e:  # the XML layout is the uncertain part: say what went wrong
        print(f"   xml:  could not read {name}.xml: {type(e).__name__}: {e}")
    print("   " + "\n   ".join(text.strip().splitlines()[:12]))
PY

step "hub: dummy_run_skips_mapping under initcheck, between two clean cases"
run hub 200 python3 - <<'PY'
import os
from fuzzrunner.case import Case
from fuzzrunner.context import Context
from fuzzrunner.engine.hub import Hub, WorkerSpec
from fuzzrunner.sanitizer import sanitizer_wrapper
from fuzzrunner.sanitizer.session import MARKER, attribute

out = os.environ["OUT"]
log = f"{out}/real_initcheck_hub_worker.log"
if os.path.exists(log):
    os.unlink(log)
argv, env = sanitizer_wrapper("initcheck")
spec = WorkerSpec("reference_runner", Context.of("cuda"), wrapper=argv, env=env, log_path=log)
ops = ({"op": "dummy_run", "num_tokens": 4, "kind": "warmup"},
       {"op": "add_adapter", "adapter_id": 1, "rank": 8},
       {"op": "step", "requests": [{"adapter_id": 1, "tokens": [1, 2, 3]}]})
plan = [("clean", ()), ("faulty", ("dummy_run_skips_mapping",)), ("clean", ())]
ok = True
with Hub(spec, oracles=("invariants", "numeric"), timeout_s=300) as hub:  # never poison with initcheck
    for label, faults in plan:
        r = hub.run(Case("reference_runner", {}, ops, faults))
        sv = [v for v in r.violations if v.tool == "initcheck"]
        print(f"case {r.case_no} ({label}): crashed={r.crashed} {r.seconds:.2f}s, {len(r.violations)} violations")
        for v in r.violations:
            print(f"   {v.signature.short()} x{v.details.get('count', 1)}: {v.message[:140]}")
        ok &= bool(sv) == (label == "faulty")
text = open(log, errors="replace").read()
inside, outside = False, 0
for line in text.splitlines():
    m = MARKER.search(line)
    if m:
        inside = m.group(1) == "begin"
    elif line.startswith("========= ") and not line.startswith("=========  ") and not inside \
            and "SUMMARY" not in line and "COMPUTE-SANITIZER" not in line:
        outside += 1
print(f"reports outside begin/end markers: {outside}; by case: "
      f"{ {c: sum(v.details['count'] for v in vs) for c, vs in attribute(text, tool='initcheck').items()} }")
print("attribution", "ok" if ok else "WRONG: initcheck violations must be on the faulty case only")
raise SystemExit(0 if ok else 1)
PY

step "benchmark: cases/s, plain vs one sanitized worker vs a sanitizer process per case"
run benchmark 240 python3 benchmarks/sanitizer_throughput.py --tool initcheck --cases 200 --per-process 5

step "campaign: reference_runner with dummy_run_skips_mapping under initcheck (40 s budget)"
run campaign 150 python3 - <<'PY'
from fuzzrunner.engine.campaign import run_campaign
from fuzzrunner.settings import Settings
s = Settings(max_examples=40, budget_s=40, seed=0, device="cuda", sanitizer="initcheck",
             oracles=("invariants", "numeric"), case_timeout_s=300)
r = run_campaign("reference_runner", s, faults=("dummy_run_skips_mapping",))
print(f"{r.examples} examples in {r.duration_s:.1f}s, {r.worker_restarts} restarts, {len(r.findings)} findings")
tools = set()
for f in r.findings:
    tools.add(f.signature.tool)
    print(f"   {f.signature.short()} ({len(f.case.ops)} ops)")
raise SystemExit(0 if "initcheck" in tools else 1)
PY

step "unit tests of the sanitizer support (CPU parts and the gpu-marked self-test)"
run pytest 150 python3 -m pytest -q -p no:cacheprovider tests/unit/test_sanitizer.py

echo
if [ ${#failed[@]} -eq 0 ]; then echo "gpu_sanitizer_check: all steps passed; logs in $OUT"; exit 0; fi
echo "gpu_sanitizer_check: failed steps: ${failed[*]}; logs in $OUT"
exit 1
