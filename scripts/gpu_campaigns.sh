#!/usr/bin/env bash
# On a GPU machine (python3 with torch+cu, triton, hypothesis, pytest-xdist; compute-sanitizer on
# PATH), from the repo root: unit tests compiled; each planted fault fuzzed on the GPU (oracles
# invariants, numeric, poison); >= 1000 fault-free cases under initcheck and under memcheck (run
# concurrently, 2 shards each); the pytest plugin under xdist. Output and reports go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH=. FUZZRUNNER_DEVICE=cuda
unset TRITON_INTERPRET
fz() { timeout "$1" python3 -m fuzzrunner fuzz --device cuda "${@:2}"; echo "   -> exit $?"; }

echo "== sanitized campaigns, faults off, in the background ($(date +%T))"
for tool in initcheck memcheck; do
  timeout 520 python3 -m fuzzrunner fuzz --device cuda --sanitizer $tool --max-examples 1000 --workers 2 --seed 7 \
     --profile nightly --no-shrink --corpus "$OUT/c_$tool" --report "$OUT/$tool.json" > "$OUT/$tool.txt" 2>&1 &
done

echo "== unit tests, compiled Triton, real CUDA graphs ($(date +%T))"
timeout 200 bash scripts/gpu_check.sh 2>&1 | tail -4

echo "== each planted fault, fuzzed on the GPU ($(date +%T))"
for f in dummy_run_skips_mapping padding_not_mapped stale_after_all_no_lora graph_freezes_active_loras; do
  echo "-- $f"
  fz 150 --fault "$f" --max-examples 100 --seed 1 --profile ci --corpus "$OUT/c_$f" 2>&1 | grep -v "cases/s" | head -12
done

echo "== pytest plugin under xdist, one GPU ($(date +%T))"
timeout 200 python3 -m pytest -n 2 -q -s -p no:cacheprovider -p fuzzrunner.pytest_plugin scripts/gpu/test_xdist_pinning.py 2>&1 \
  | grep -E "CUDA_VISIBLE|passed|failed|error" | head -12

echo "== waiting for the sanitized campaigns ($(date +%T))"
wait
for tool in initcheck memcheck; do echo "-- $tool"; grep -v "cases/s" "$OUT/$tool.txt" | tail -6; done
echo "== done ($(date +%T))"
