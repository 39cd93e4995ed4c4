#!/usr/bin/env bash
# Issue 14, third GPU pass: the two crashing faults with the CPU pre-check (crash-aware search).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-/tmp/gpu_issue14}
mkdir -p "$OUT"
for f in dummy_run_skips_mapping padding_not_mapped; do
  t0=$(date +%s.%N)
  timeout 110 python3 -m fuzzrunner fuzz --target reference_runner --device cuda --corpus "$OUT/c3_$f" --fault "$f" \
    --seed 3 --max-examples 200 --no-shrink -q > "$OUT/c3_$f.log" 2>&1
  rc=$?; t1=$(date +%s.%N)
  echo "=== $f: exit $rc in $(python3 -c "print(f'{$t1-$t0:.1f}')") s"
  grep -E "^reference_runner|not run on the GPU|^  [a-z]|CPU triage|flaky|worker" "$OUT/c3_$f.log" | head -12
done
timeout 100 python3 benchmarks/crash_throughput.py --device cuda --cases 40 --work-ms 50
