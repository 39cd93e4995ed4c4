#!/usr/bin/env bash
# Issue 17 on the GPU machine (no Ray in its image): unpack a Ray site carried as an archive, then
#   1. a campaign through --ray local on the GPU (one shard = one Ray actor holding the GPU), planted fault and clean;
#   2. benchmarks/ray_scaling.py on the machine's idle CPUs (Ray's overhead against --workers, 1, 2 and 4 shards).
# Make the archive here (Python 3.12 wheels of ray and its needs, unpacked, tarred with xz; ~30 MiB):
#   see docs/cluster.md "Ray on a machine without network". Run: bash scripts/gpu_ray.sh .raysite/ray312.tar.xz
set -uo pipefail
cd "$(dirname "$0")/.."
archive=${1:-.raysite/ray312.tar.xz}
site=/tmp/raysite; rm -rf "$site"; mkdir -p "$site"
tar -xJf "$archive" -C "$site" || { echo "gpu_ray: cannot unpack $archive" >&2; exit 2; }
export PYTHONPATH=.:$site RAY_USAGE_STATS_ENABLED=0
OUT=${OUT:-/tmp/gpu_ray}; mkdir -p "$OUT"
python3 -c "import ray, torch, triton; print('ray', ray.__version__, 'torch', torch.__version__, 'triton', triton.__version__)" || exit 2
nvidia-smi -L
camp() {  # name, timeout, fuzz args...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" python3 -m fuzzrunner fuzz --target reference_runner --ray local --corpus "$OUT/c_$name" \
    --report "$OUT/$name.json" -q "$@" > "$OUT/$name.log" 2>&1
  echo "=== $name: exit $? in $((SECONDS - t0)) s"; grep -v "cases/s" "$OUT/$name.log" | tail -12
}
camp ray_gpu_fault 150 --device cuda --workers 1 --fault padding_not_mapped --seed 3 --max-examples 100 --no-shrink
camp ray_gpu_clean 120 --device cuda --workers 1 --seed 3 --max-examples 150
echo "=== ray_scaling, cpu ($(nproc) CPUs)"
timeout "${RAY_BENCH_LIMIT:-240}" python3 benchmarks/ray_scaling.py --device cpu --shards 1,4 --per-shard 40 --repeat 1
