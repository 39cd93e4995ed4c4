#!/usr/bin/env bash
# Make one vLLM release's LoRA modules importable here, with no GPU and none of vLLM's dependencies:
# its wheel (no deps) unpacked without the compiled CUDA libraries into .cache/vllm/VERSION/site/, plus
# the pure-Python packages the imported modules need in .cache/vllm/VERSION/deps/. Idempotent.
#   scripts/vllm_setup.sh VERSION                 # e.g. 0.33.0
#   scripts/vllm_setup.sh VERSION --for-gpu DIR   # also a carryable tree for a GPU machine (Python 3.12)
# Then: FUZZRUNNER_VLLM_VERSION=VERSION .venv/bin/python -m fuzzrunner fuzz --target vllm_lora
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
if [ $# -lt 1 ]; then
  echo "usage: scripts/vllm_setup.sh VERSION [--for-gpu DIR]   (pip index versions vllm lists them)" >&2
  exit 2
fi
exec env PYTHONPATH=. .venv/bin/python -m targets.vllm_lora.install "$@"
