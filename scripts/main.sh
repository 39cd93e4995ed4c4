#!/usr/bin/env bash
# Set up (once) and run the main job: a short nightly on the CPU over the built-in targets.
# It replays the corpus, fuzzes reference_runner and lora_kernels, and writes reports/ (JSON,
# JUnit XML, HTML); from the second run on, against the last report (--previous: new / still
# open / fixed, docs/report.md). Exit 0: no finding. Extra arguments go to `fuzzrunner nightly`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
previous=()
[ -f reports/report.json ] && previous=(--previous reports/report.json)  # read before it is rewritten
exec .venv/bin/python -m fuzzrunner nightly --budget 120 --report-dir reports --corpus corpus "${previous[@]}" "$@"
