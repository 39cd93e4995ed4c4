#!/usr/bin/env bash
# The shadow oracle's device mode on a GPU (issue 28), in stages (one or several per call of the device tool):
#   bash scripts/gpu_shadow.sh tests   # versions, cuda-python, the -m gpu tests of the device mode
#   bash scripts/gpu_shadow.sh pairs   # the whole pair suite on cuda: scoreboard against the CPU verdicts
#   bash scripts/gpu_shadow.sh faults  # only the reference runner's memory faults, compiled (-m gpu -k faults)
#   bash scripts/gpu_shadow.sh bench   # benchmarks/gpu_shadow.py: plain vs shadow, kernels and cases (its
#                                      # arguments in BENCH_ARGS, e.g. BENCH_ARGS="--cases 60 --rows none")
#   bash scripts/gpu_shadow.sh work    # scripts/gpu/gpu_work.py: per case, the GPU's kernels, time and the host's
#                                      # waits, plain and shadow (torch.profiler; WORK_ARGS, e.g. "--cases 20")
#   bash scripts/gpu_shadow.sh loops   # the case loop without the hub (1 and 8 processes), one worker through a
#                                      # hub, and a crash's blocking rerun naming its kernel
#   bash scripts/gpu_shadow.sh campaigns  # campaigns (cuda default, cuda shadow, CPU shadow); CAMPAIGN_WORKERS
#                                         # (default 8,1) and CAMPAIGN_S (45) size them
# Several stages run in one call in the order given: bash scripts/gpu_shadow.sh tests loops
# The exit status is the first failing stage's (0 when all passed); every stage runs.
# A fresh machine has a cold Triton cache: the first launches of each kernel and twin compile (the
# reference runner's LoRA kernels took minutes there on 2026-12-02); run what compiles first, in one call.
# Uses the machine's python3 as it is (nothing is installed). With $OUT set, the stages' outputs go there
# too (tests, faults, pairs, bench, campaigns: a .txt each; loops: the crash's report, gpu_crash.json).
# A Triton cache carried as .cache/triton-gpu.tar.gz (a tarball of a warm TRITON_CACHE_DIR, e.g. one an
# earlier run left in $OUT) is unpacked first and used, unless .cache/triton-gpu already exists: the compiles
# are then skipped. With $OUT set, the cache is left there at exit (a failed or stopped stage too) as
# triton-gpu.tar.gz: copy it to .cache/triton-gpu.tar.gz here and name it in the next call's carry.
set -uo pipefail
cd "$(dirname "$0")/.."
unset TRITON_INTERPRET
export FUZZRUNNER_DEVICE=cuda PYTHONPATH=.:tests/power
out="${OUT:-/tmp}"
case "${1:-}" in -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;; esac
stages=("${@:-tests}")
for st in "${stages[@]}"; do
  case "$st" in tests|faults|pairs|bench|work|loops|campaigns) ;;
    *) echo "gpu_shadow.sh: unknown stage $st (tests, faults, pairs, bench, work, loops, campaigns)" >&2; exit 2 ;;
  esac
done
if [ -f .cache/triton-gpu.tar.gz ] && [ ! -d .cache/triton-gpu ]; then tar xzf .cache/triton-gpu.tar.gz -C .cache; fi
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$PWD/.cache/triton-gpu}"
save_cache() {  # whatever happens, the cache this call filled goes back with $OUT (top folder triton-gpu, as unpacked)
  if [ -n "${OUT:-}" ] && [ -d "$TRITON_CACHE_DIR" ]; then
    tar czf "$OUT/triton-gpu.tar.gz" --transform "s|^$(basename "$TRITON_CACHE_DIR")|triton-gpu|" \
      -C "$(dirname "$TRITON_CACHE_DIR")" "$(basename "$TRITON_CACHE_DIR")" \
      && echo "Triton cache: $OUT/triton-gpu.tar.gz ($(du -h "$OUT/triton-gpu.tar.gz" | cut -f1); carry it as .cache/triton-gpu.tar.gz)"
  fi
}
trap save_cache EXIT

echo "== versions"
python3 - <<'PY'
import torch, triton
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton.__version__}, {torch.cuda.get_device_name()}")
try:
    import cuda.bindings, cuda.bindings.driver as d
    print("cuda.bindings", getattr(cuda.bindings, "__version__", "?"), "cuInit:", d.cuInit(0)[0])
except Exception as e:
    print("cuda.bindings unavailable:", e)
PY

run_stage() {
  case "$1" in
  tests)
    time python3 -u -m pytest -v -p no:cacheprovider -m gpu tests/power/test_gpu_shadow.py -rs 2>&1 | tee "$out/gpu_tests.txt" | tail -40
    ;;
  faults)
    time python3 -u -m pytest -v -p no:cacheprovider -m gpu tests/power/test_gpu_shadow.py -k faults -rs 2>&1 | tee "$out/gpu_faults.txt" | tail -20
    ;;
  pairs)
    time python3 -m shadow_pairs.device_mode cuda -v 2>&1 | tee "$out/gpu_pairs.txt" | tail -60
    ;;
  bench)
    time python3 benchmarks/gpu_shadow.py ${BENCH_ARGS:-} 2>&1 | tee "$out/gpu_bench.txt"
    ;;
  work)
    time python3 scripts/gpu/gpu_work.py ${WORK_ARGS:-} 2>&1 | tee "$out/gpu_work.txt"
    ;;
  loops)
    local s=0
    echo "== loops without the hub: 1 process, then 8 at once (cases/s; run_ms: in run_case, rest_ms: generation)"
    for o in shadow none; do timeout 120 python3 scripts/gpu/campaign_loop.py --oracle $o --warm 15 --cases 60 | tail -1 || s=1; done
    for o in shadow none; do timeout 150 python3 scripts/gpu/campaign_loop.py --oracle $o --warm 15 --cases 40 --procs 8 | tail -1 || s=1; done
    echo "== one worker through a hub (ms per case)"
    timeout 120 python3 scripts/gpu/campaign_loop.py --oracle shadow --warm 10 --cases 60 --via-hub | tail -1 || s=1
    echo "== a crash on the GPU: its finding points at the launch that broke the context (the blocking rerun)"
    timeout 150 python3 -m fuzzrunner fuzz --target reference_runner --device cuda --fault dummy_run_skips_mapping --max-examples 10 --seed 1 \
      --profile ci --no-shrink --corpus /tmp/gpu-crash-corpus --report "$out/gpu_crash.json" 2>&1 | grep -v "cases/s" | sed -n 1,14p
    [ "${PIPESTATUS[0]}" -eq 1 ] || { echo "== the crash campaign did not exit 1 (its one finding)"; s=1; }
    return $s
    ;;
  campaigns)
    echo "== campaigns"
    time python3 benchmarks/gpu_shadow.py --rows none --skip-cases --campaigns "${CAMPAIGN_WORKERS:-8,1}" --campaign-budget "${CAMPAIGN_S:-45}" \
      --warm-up 30 2>&1 | tee "$out/gpu_campaigns.txt" | grep -v "^ "
    ;;
  esac
}
rc=0
for st in "${stages[@]}"; do
  echo "== stage $st"
  run_stage "$st"; r=$?
  if [ "$rc" -eq 0 ] && [ "$r" -ne 0 ]; then rc=$r; echo "== stage $st failed: exit $r"; fi
done
exit "$rc"
