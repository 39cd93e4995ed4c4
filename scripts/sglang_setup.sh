#!/usr/bin/env bash
# Make one SGLang release's LoRA modules importable here, with no GPU: its wheel (no deps) unpacked without
# compiled code into .cache/sglang/VERSION/site/, plus the pure-Python packages its LoRA modules import in
# .cache/sglang/VERSION/deps/. Idempotent.
#   scripts/sglang_setup.sh VERSION                          # e.g. 0.5.23
#   scripts/sglang_setup.sh VERSION --for-gpu FILE.tar.xz    # also an archive to carry to a GPU machine
# Then: FUZZRUNNER_SGLANG_VERSION=VERSION .venv/bin/python -m fuzzrunner fuzz --target sglang_lora
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
if [ $# -lt 1 ]; then
  echo "usage: scripts/sglang_setup.sh VERSION [--for-gpu FILE.tar.xz]   (pip index versions sglang lists them)" >&2
  exit 2
fi
exec env PYTHONPATH=. .venv/bin/python -m targets.sglang_lora.install "$@"
