#!/usr/bin/env bash
# Run the unit tests on a GPU machine: compiled Triton kernels and real CUDA graphs.
# Uses the machine's python3 as it is (torch, triton and pytest installed; nothing is
# installed here). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== versions"
python3 --version
python3 - <<'PY'
import torch, triton
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton.__version__}")
if not torch.cuda.is_available():
    raise SystemExit("gpu_check: torch sees no CUDA device; run scripts/test.sh on a CPU machine instead.")
PY
nvidia-smi -L

echo "== tests/unit on cuda"
unset TRITON_INTERPRET  # compiled kernels, even if the caller's shell had the interpreter on
export FUZZRUNNER_DEVICE=cuda
PYTHONPATH=. exec python3 -m pytest -x -q tests/unit -p no:cacheprovider "$@"
