#!/usr/bin/env bash
# On a 2-GPU machine: one worker per GPU, throughput 1 vs 2 workers, a crash on one GPU while the
# other goes on, dedup across shards, and xdist pinning. About 4 minutes. Output to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH=. FUZZRUNNER_DEVICE=cuda NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
unset TRITON_INTERPRET
nvidia-smi -L
for w in 1 2; do
  echo "== faults off, --workers $w ($(date +%T))"
  timeout 100 python3 -m fuzzrunner fuzz --device cuda --workers $w --max-examples 300 --seed 3 --profile ci --no-shrink \
     --corpus "$OUT/c_w$w" --report "$OUT/w$w.json" > "$OUT/w$w.txt" 2>&1 &
  sleep 25; nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv,noheader
  wait; grep -v "cases/s" "$OUT/w$w.txt" | tail -2
  python3 -c "import json; r=json.load(open('$OUT/w$w.json')); print(f\"  {r['examples']} cases in {r['duration_s']:.1f}s = {r['examples']/r['duration_s']:.1f} cases/s (incl. start-up); restarts {r['worker_restarts']}\")"
done
echo "== dummy_run_skips_mapping, --workers 2: crashes on both GPUs, one finding ($(date +%T))"
timeout 80 python3 -m fuzzrunner fuzz --device cuda --workers 2 --fault dummy_run_skips_mapping --max-examples 16 --seed 3 \
  --profile ci --no-shrink --corpus "$OUT/c_crash" --report "$OUT/crash.json" 2>&1 | grep -v "cases/s" | head -8
python3 -c "import json; r=json.load(open('$OUT/crash.json')); print(f\"  findings {len(r['findings'])}, examples {r['examples']}, worker restarts {r['worker_restarts']}\")"
echo "== pytest -n 2 with the plugin ($(date +%T))"
timeout 70 python3 -m pytest -n 2 -q -p no:cacheprovider -p fuzzrunner.pytest_plugin scripts/gpu/test_xdist_pinning.py -k sees_one 2>&1 | tail -1
sort "$OUT/pinning.txt" | uniq -c
