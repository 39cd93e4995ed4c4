#!/usr/bin/env bash
# Set up (once) and run the test suite on the CPU. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The house style and the layer map (docs/architecture.md), before the tests.
.venv/bin/ruff check fuzzrunner targets tests scripts benchmarks
.venv/bin/mypy
.venv/bin/lint-imports
# The floor: Triton's interpreter on the oldest Triton accepted (3.6, the GPU image's) with this numpy
# (>= 2.4): our kernels, vLLM's (runtime-bounded loops), the repair and the tool-limitation verdict.
if [ -f .cache/triton-floor/triton/__init__.py ]; then
  PYTHONPATH=.cache/triton-floor .venv/bin/python -c 'import triton, numpy; print(f"floor run: Triton {triton.__version__}, numpy {numpy.__version__}")'
  PYTHONPATH=.cache/triton-floor .venv/bin/python -m pytest -q -p no:xdist tests/unit/test_triton_compat.py tests/unit/test_shadow_discards.py \
    tests/unit/test_kernels.py "tests/integration/test_vllm_target.py::test_fault_free_ops_are_silent" \
    "tests/integration/test_vllm_target.py::test_a_never_prepared_dummy_run_reads_uninitialized_active_lora_ids_in_vllms_kernel"
fi
# loadgroup: the Ray tests (one xdist_group) share one local cluster in one worker.
exec .venv/bin/python -m pytest -n 2 --dist loadgroup -m "not slow" "$@"
