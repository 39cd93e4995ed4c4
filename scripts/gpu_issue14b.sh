#!/usr/bin/env bash
# Issue 14, second GPU pass: crash-fault speed after the fatal-result fix, initcheck per fault,
# crash_throughput on cuda (and cpu on the GPU host's 16 cores).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-/tmp/gpu_issue14}
mkdir -p "$OUT"
run() {
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s.%N)
  timeout "$limit" python3 -m fuzzrunner fuzz --target reference_runner --device cuda --corpus "$OUT/c_$name" \
    --report "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  local rc=$? t1=$(date +%s.%N)
  echo "=== $name: exit $rc in $(python3 -c "print(f'{$t1-$t0:.1f}')") s"
  grep -vE "^ *[0-9]+/[0-9]+ (generated|shrinking)|cases/s" "$OUT/$name.log" | grep -E "^reference_runner|^  [a-z]|CPU triage|found:" | tail -12
}
run dummy_run_skips_mapping 100 --fault dummy_run_skips_mapping --seed 3 --max-examples 200 --no-shrink -q --budget 90
for f in dummy_run_skips_mapping stale_after_all_no_lora; do
  run "initcheck_$f" 110 --sanitizer initcheck --fault "$f" --seed 3 --max-examples 40 --no-shrink -q --budget 90
done
timeout 150 python3 benchmarks/crash_throughput.py --device cuda --cases 60 --work-ms 50
timeout 120 python3 benchmarks/crash_throughput.py --device cpu --cases 40 --work-ms 200
