#!/usr/bin/env bash
# Set up (once) and run the test suite on the CPU. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n 2 -m "not slow" "$@"
