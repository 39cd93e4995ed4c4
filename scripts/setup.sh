#!/usr/bin/env bash
# Create .venv with the CPU build of torch (on disk here: no download) and fuzzrunner, once.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import fuzzrunner, torch, triton, hypothesis, xdist" 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e . 2>&1 | grep -v "^WARNING: Location" || true
fi
