#!/usr/bin/env bash
# Issue 14's GPU checks, one mode per 10-minute device call:
#   bash scripts/gpu_issue14.sh faults      # the four faults on cuda, seed 3, 200 examples, no shrink; a clean run
#   bash scripts/gpu_issue14.sh crashing    # the two crashing faults again (crash-aware search), within a budget
#   bash scripts/gpu_issue14.sh sanitizer   # faults under initcheck (SANITIZER_FAULTS); crash_throughput on cuda and cpu
#                                           # (NO_BENCH=1 leaves the benchmark out)
#   bash scripts/gpu_issue14.sh zygote      # crash_throughput's zygote rows on cuda; the crashing faults
# Prints each campaign's summary (findings with their CPU triage) and its wall time.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-/tmp/gpu_issue14}
mkdir -p "$OUT"
FAULTS="dummy_run_skips_mapping padding_not_mapped stale_after_all_no_lora graph_freezes_active_loras"
run() {  # name, timeout, fuzz args...
  local name=$1 limit=$2; shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout "$limit" python3 -m fuzzrunner fuzz --target reference_runner --device cuda --corpus "$OUT/c_$name" \
    --report "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  rc=$?; t1=$(date +%s.%N)
  echo "=== $name: exit $rc in $(python3 -c "print(f'{$t1-$t0:.1f}')") s"
  grep -vE "^ *[0-9]+/[0-9]+ (generated|shrinking)|cases/s" "$OUT/$name.log" | tail -25
}
case "${1:-faults}" in
  faults)
    nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    for f in $FAULTS; do run "$f" 150 --fault "$f" --seed 3 --max-examples 200 --no-shrink -q; done
    run clean 150 --seed 3 --max-examples 200 --no-shrink -q
    ;;
  crashing)
    for f in dummy_run_skips_mapping padding_not_mapped; do
      run "crashing_$f" 110 --fault "$f" --seed 3 --max-examples 200 --no-shrink -q
    done
    timeout 100 python3 benchmarks/crash_throughput.py --device cuda --cases 40 --work-ms 50
    ;;
  sanitizer)
    for f in ${SANITIZER_FAULTS:-$FAULTS}; do
      run "initcheck_$f" 110 --sanitizer initcheck --fault "$f" --seed 3 --max-examples 40 --no-shrink -q --budget 90
    done
    [ -n "${NO_BENCH:-}" ] && exit 0
    timeout 150 python3 benchmarks/crash_throughput.py --device cuda --cases 60 --work-ms 50
    timeout 120 python3 benchmarks/crash_throughput.py --device cpu --cases 40 --work-ms 200
    ;;
  zygote)
    nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    timeout 80 python3 benchmarks/crash_throughput.py --device cuda --cases 40 --work-ms 50 --zygote-only
    for f in ${CRASHING_FAULTS:-dummy_run_skips_mapping padding_not_mapped}; do
      run "crashing_$f" "${CRASHING_LIMIT:-75}" --fault "$f" --seed 3 --max-examples 200 --no-shrink -q
    done
    ;;
  *) echo "usage: scripts/gpu_issue14.sh faults|crashing|sanitizer|zygote" >&2; exit 2 ;;
esac
