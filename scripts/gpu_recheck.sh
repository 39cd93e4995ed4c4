#!/usr/bin/env bash
# Short GPU re-check after fixes: unit tests in full, crash attribution with blocking launches,
# and initcheck reports naming the tracked tensor. Output to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH=. FUZZRUNNER_DEVICE=cuda
unset TRITON_INTERPRET
echo "== the runner test that failed on the GPU"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/unit/test_runner.py -k evicted_lru 2>&1 | grep -E "Error|assert|^E |passed|failed" | head -30
echo "== tests/unit, compiled, no -x"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/unit 2>&1 | tail -6
echo "== dummy_run_skips_mapping on the GPU, blocking launches"
timeout 100 python3 -m fuzzrunner fuzz --device cuda --fault dummy_run_skips_mapping --max-examples 10 --seed 1 --profile ci \
  --no-shrink --corpus "$OUT/c1" 2>&1 | grep -v "cases/s" | head -12
echo "== dummy_run_skips_mapping under initcheck: kernel, line and buffer"
timeout 150 python3 -m fuzzrunner fuzz --device cuda --sanitizer initcheck --fault dummy_run_skips_mapping --max-examples 30 \
  --seed 1 --profile ci --corpus "$OUT/c2" --report "$OUT/initcheck_fault.json" 2>&1 | grep -v "cases/s" | head -40
