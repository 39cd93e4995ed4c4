#!/usr/bin/env bash
# Set up (once) and run the test suite on the CPU. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The house style and the layer map (docs/architecture.md), before the tests.
.venv/bin/ruff check fuzzrunner targets tests scripts benchmarks
.venv/bin/mypy
.venv/bin/lint-imports
exec .venv/bin/python -m pytest -n 2 -m "not slow" "$@"
