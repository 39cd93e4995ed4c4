#!/usr/bin/env bash
# The shadow oracle's device mode on a GPU (issue 28), in stages (each one call of the device tool):
#   bash scripts/gpu_shadow.sh tests   # versions, cuda-python, the -m gpu tests of the device mode
#   bash scripts/gpu_shadow.sh pairs   # the whole pair suite on cuda: scoreboard against the CPU verdicts
#   bash scripts/gpu_shadow.sh faults  # only the reference runner's memory faults, compiled (-m gpu -k faults)
#   bash scripts/gpu_shadow.sh bench   # benchmarks/gpu_shadow.py: plain vs shadow, kernels and cases
# A fresh machine has a cold Triton cache: the first launches of each kernel and twin compile (the
# reference runner's LoRA kernels took minutes there on 2026-12-02); run what compiles first, in one call.
# Uses the machine's python3 as it is (nothing is installed). Outputs also go to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
unset TRITON_INTERPRET
export FUZZRUNNER_DEVICE=cuda PYTHONPATH=.:tests/power
out="${OUT:-/tmp}"
stage="${1:-tests}"

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

case "$stage" in
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
    time python3 benchmarks/gpu_shadow.py "${@:2}" 2>&1 | tee "$out/gpu_bench.txt"
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
