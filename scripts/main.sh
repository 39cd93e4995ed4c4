#!/usr/bin/env bash
# Set up (once) and run the main job: a short campaign on the CPU over the built-in reference runner
# (its planted faults off). It replays the corpus, fuzzes reference_runner for up to 2 minutes, and
# writes reports/ (JSON, JUnit XML, HTML); from the second run on, against the last report
# (--previous: new / still open / fixed, docs/report.md). Exit 0: no finding. Extra arguments go to
# `fuzzrunner fuzz` (e.g. --budget 600). `fuzzrunner nightly` runs every built-in target.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p reports
previous=()
[ -f reports/report.json ] && previous=(--previous reports/report.json)  # read before it is rewritten
exec .venv/bin/python -m fuzzrunner fuzz --target reference_runner --device cpu --budget 120 --corpus corpus \
  --report reports/report.json --junit reports/junit.xml --html reports/report.html "${previous[@]}" "$@"
