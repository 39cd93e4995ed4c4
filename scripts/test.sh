#!/usr/bin/env bash
# Set up (once) and run the test suite on the CPU. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The house style and the layer map (docs/architecture.md), before the tests.
.venv/bin/ruff check fuzzrunner targets tests scripts benchmarks
.venv/bin/mypy
.venv/bin/lint-imports
# loadgroup: the Ray tests (one xdist_group) share one local cluster in one worker.
exec .venv/bin/python -m pytest -n 2 --dist loadgroup -m "not slow" "$@"
