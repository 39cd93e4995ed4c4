#!/usr/bin/env bash
# Issue 22 on a GPU, with the machine's own python3 (torch, Triton 3.6, numpy 2.5; nothing installed):
#   bash scripts/gpu_issue22.sh checks [VLLM_ARCHIVE]   # doctor, check-target, a runner that builds on cuda
#                                                      # itself with two bugs, vLLM on Triton 3.6 (if carried)
#   bash scripts/gpu_issue22.sh bench [SEEDS...]       # benchmarks/precheck_parallel.py (default seed 7)
# Each step prints "== RESULT <label>: exit N (expected ...)".
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
unset TRITON_INTERPRET FUZZRUNNER_DEVICE
out=${OUT:-out}/issue22
mkdir -p "$out"
tmp=$(mktemp -d)

result() { echo "== RESULT $1: exit $2 (expected $3)"; }

checks() {
  echo "== doctor"; python3 -m fuzzrunner doctor 2>&1 | grep -v "^ \{15\}" ; result doctor "${PIPESTATUS[0]}" 0
  for spec in examples/toy_runner_target.py:TARGET tests/integration/gpu_only_target.py:TARGET; do
    echo; echo "== check-target $spec"; python3 -m fuzzrunner check-target "$spec"
    result "check-target $spec" $? "$([[ $spec == *gpu_only* ]] && echo 1 || echo 0)"
  done
  echo; echo "== gpu_only: a runner that builds its tensors on cuda itself, two independent planted bugs"
  python3 -m fuzzrunner fuzz --device cuda --target tests/integration/gpu_only_target.py:TARGET \
    --fault dummy_skips_slots --fault padding_overruns --max-examples 150 --seed 3 --budget 150 \
    --corpus "$tmp/gpu_only" --report "$out/gpu_only.json" -q 2>&1 | tail -40
  result gpu_only "${PIPESTATUS[0]}" "1, two findings, no case skipped, triage: could not run on the CPU"
  local site=${1:-}
  if [ -n "$site" ] && [ -f "$site" ]; then
    mkdir -p "$tmp/vllm" && tar -xJf "$site" -C "$tmp/vllm" && site=$(ls -d "$tmp"/vllm/*/ | head -1)
    echo; echo "== vllm_lora, correct, on the CPU of this image (Triton $(python3 -c 'import triton; print(triton.__version__)'), numpy $(python3 -c 'import numpy; print(numpy.__version__)'))"
    FUZZRUNNER_VLLM_SITE=$site python3 -m fuzzrunner fuzz --target vllm_lora --device cpu --max-examples 20 \
      --seed 1 --no-shrink --budget 200 --corpus "$tmp/vllm_cpu" --report "$out/vllm_cpu.json" -q 2>&1 | tail -8
    result vllm_cpu "${PIPESTATUS[0]}" "0 or V1 only, no tool limitation, no InterpreterError crash"
    echo; echo "== vllm_lora, fault dummy_run_skips_prepare, compiled, then CPU triage on this image"
    FUZZRUNNER_VLLM_SITE=$site python3 -m fuzzrunner fuzz --target vllm_lora --device cuda \
      --fault dummy_run_skips_prepare --max-examples 40 --seed 0 --no-shrink --budget 120 \
      --corpus "$tmp/vllm_gpu" --report "$out/vllm_gpu.json" -q 2>&1 | tail -20
    result vllm_gpu_triage "${PIPESTATUS[0]}" "1, every triage reproduced or not reproduced, none an InterpreterError"
  fi
}

case "${1:-checks}" in
  checks) shift || true; checks "${1:-}" ;;
  bench) shift; python3 benchmarks/precheck_parallel.py --seeds "${@:-7}" --examples 200 2>&1 | tee "$out/bench.txt" ;;
  *) echo "usage: bash scripts/gpu_issue22.sh checks [VLLM_ARCHIVE] | bench [SEEDS...]" >&2; exit 2 ;;
esac
rm -rf "$tmp"
