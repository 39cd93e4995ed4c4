#!/usr/bin/env bash
# Issue 23 (engine half) on a GPU: the worker memory watch with CUDA workers (plain and under
# compute-sanitizer, where the Python worker is the wrapper's child), the hard budget with a
# hanging case, and a target's KeyboardInterrupt as a finding. Output to $OUT.
# What proves it: "worker recycle(s)" lines with a growth of ~200 MB per case in both leak runs,
# "stopped: budget" with "budget ran out during a case" within the budget, and a
# "crash in KeyboardInterrupt" finding with exit 1.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH=. HOSTILE_LEAK_MB=200 HOSTILE_SLEEP_S=3600
unset TRITON_INTERPRET
T=tests/integration/hostile_targets.py
echo "== a leaking target on CUDA workers (200 MB per case), the default limit (3x the first case's size, >= +1 GiB)"
timeout 300 python3 -m fuzzrunner fuzz --device cuda --target $T:LEAKY --max-examples 40 --seed 1 \
  --corpus "$OUT/c1" --report "$OUT/leak.json" 2>&1 | grep -v "cases/s"
echo "== the same under compute-sanitizer memcheck (the RSS of the wrapper's process tree)"
timeout 400 python3 -m fuzzrunner fuzz --device cuda --sanitizer memcheck --target $T:LEAKY --max-examples 40 --seed 1 \
  --corpus "$OUT/c2" --report "$OUT/leak_memcheck.json" 2>&1 | grep -v "cases/s"
echo "== a hanging case, --budget 60 --case-timeout inf"
s0=$SECONDS; timeout 300 python3 -m fuzzrunner fuzz --device cuda --target $T:SLEEPY --max-examples 5 \
  --seed 1 --budget 60 --case-timeout inf --corpus "$OUT/c3" --report "$OUT/budget.json" 2>&1 | grep -v "cases/s"
echo "wall $((SECONDS - s0)) s (imports and reports included)"
echo "== KeyboardInterrupt raised by the target"
timeout 300 python3 -m fuzzrunner fuzz --device cuda --target $T:RAISES --max-examples 30 --seed 1 --corpus "$OUT/c4" 2>&1 \
  | grep -v "cases/s"; echo "exit ${PIPESTATUS[0]}"
