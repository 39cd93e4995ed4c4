#!/usr/bin/env bash
# The straightened engine (issue 25) on a GPU, with the machine's own python3 (nothing installed):
# every process channel and shard path a GPU campaign takes, each step ending in
# "== RESULT <label>: exit N (expected ...)".
#   bash scripts/gpu_issue25.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
unset TRITON_INTERPRET FUZZRUNNER_DEVICE
out=${OUT:-out}/issue25
mkdir -p "$out"
tmp=$(mktemp -d)
result() { echo "== RESULT $1: exit $2 (expected $3)"; }

echo "== a crashing fault on cuda: zygote-forked workers, spares, CPU pre-check shards, CPU triage"
python3 -m fuzzrunner fuzz --target reference_runner --device cuda --fault padding_not_mapped --max-examples 40 --seed 7 --budget 80 \
  --corpus "$tmp/crash" --report "$out/crash.json" -q 2>&1 | tail -25
result crash "${PIPESTATUS[0]}" "1, the fault found, triage reproduced on the CPU"

echo; echo "== clean, two GPU shards (shard processes, Merger)"
python3 -m fuzzrunner fuzz --target reference_runner --device cuda --workers 2 --max-examples 30 --seed 1 --budget 50 \
  --corpus "$tmp/clean" --report "$out/clean.json" -q 2>&1 | tail -6
result clean "${PIPESTATUS[0]}" 0

echo; echo "== replay of the crash finding in an isolated worker on cuda"
# a campaign with planted faults keeps its findings under expected/ (corpus.py)
f=$(ls "$tmp"/crash/expected/reference_runner/*.json "$tmp"/crash/findings/reference_runner/*.json 2>/dev/null | head -1)
if [ -n "$f" ]; then python3 -m fuzzrunner replay "$f" --device cuda 2>&1 | tail -4; result replay "${PIPESTATUS[0]}" 1
else echo "no finding file"; result replay 2 1; fi

echo; echo "== compute-sanitizer initcheck: a wrapped worker (no zygote), tensor announcements"
python3 -m fuzzrunner fuzz --target reference_runner --sanitizer initcheck --fault dummy_run_skips_mapping --max-examples 6 --seed 2 \
  --budget 70 --no-shrink --corpus "$tmp/init" --report "$out/initcheck.json" -q 2>&1 | tail -12
result initcheck "${PIPESTATUS[0]}" "1, an uninitialized read named"
rm -rf "$tmp"
