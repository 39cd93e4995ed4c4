#!/usr/bin/env bash
# Create .venv with the CPU build of torch (it lies on disk here: no download) and fuzzrunner
# (editable, with Triton, Hypothesis, pytest, pytest-xdist, jsonschema, the dev tools: ruff, mypy,
# import-linter, fakeredis, and the ray extra for the cluster tests, from the registry). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! { .venv/bin/python -c "import fuzzrunner.cli, torch, triton, hypothesis, xdist, jsonschema, mypy, importlinter, fakeredis, ray" \
       && [ -x .venv/bin/ruff ]; } 2>/dev/null; then
  echo "setting up .venv (once: a minute or two, quiet) ..." >&2
  python3 -m venv .venv
  log=$(mktemp)
  if ! { .venv/bin/python -m pip install -q "torch==2.13.0" && .venv/bin/python -m pip install -q -e ".[dev,ray]"; } >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" >&2 || true
    echo "setup failed: pip could not install the packages above" >&2
    exit 1
  fi
  rm -f "$log"
fi
# The oldest Triton the project accepts (pyproject: triton>=3.6; the GPU image has 3.6.0), as an overlay
# on .venv (PYTHONPATH=.cache/triton-floor): scripts/test.sh runs the interpreter's tests on it too.
floor=.cache/triton-floor
if [ ! -f "$floor/triton/__init__.py" ]; then
  .venv/bin/python -m pip install -q --no-deps --target "$floor" "triton==3.6.0" >/dev/null 2>&1 \
    || { rm -rf "$floor"; echo "could not install triton==3.6.0 for the floor run (above): it will be skipped" >&2; }
fi
# The pinned vLLM for the vllm_lora target's CI campaign, cached under .cache/vllm/ (docs/vllm.md).
# A failure (no network, say) is printed, never fatal: the vllm_lora tests then skip with the reason.
if [ -z "${FUZZRUNNER_SKIP_VLLM:-}" ]; then
  pinned=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "."); from targets.vllm_lora.site import PINNED; print(PINNED)')
  [ -d "${FUZZRUNNER_VLLM_CACHE:-.cache/vllm}/$pinned/site" ] || echo "fetching vLLM $pinned for the vllm_lora target (once: a ~460 MB download;" \
    "FUZZRUNNER_SKIP_VLLM=1 skips it) ..." >&2
  bash scripts/vllm_setup.sh "$pinned" >&2 || echo "vllm_setup $pinned failed (above): the vllm_lora tests will skip" >&2
fi
# The pinned SGLang for the sglang_lora target's CI tests (docs/sglang.md): a 39 MB wheel and ~20 small packages,
# ~20 s once, cached in .cache/sglang/. A failure is printed, never fatal: the sglang_lora tests then skip.
if [ -z "${FUZZRUNNER_SKIP_SGLANG:-}" ]; then
  spinned=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "."); from targets.sglang_lora.site import PINNED; print(PINNED)')
  bash scripts/sglang_setup.sh "$spinned" >&2 || echo "sglang_setup $spinned failed (above): the sglang_lora tests will skip" >&2
fi
# Opt-in (FUZZRUNNER_BROWSER_TESTS=1): the browser test of the HTML report needs playwright (~13 s
# from the registry) and a chromium. Debian's chromium took 86 s to apt-get install here, more than
# CI's spare minute, so CI leaves both out and the test skips with the reason (docs/report.md).
if [ -n "${FUZZRUNNER_BROWSER_TESTS:-}" ]; then
  .venv/bin/python -c "import playwright" 2>/dev/null || .venv/bin/python -m pip install -q "playwright>=1.40" >&2 \
    || echo "could not install playwright: the browser test will skip" >&2
  if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
      || echo "could not apt-get install chromium: the browser test will skip" >&2
  fi
fi
