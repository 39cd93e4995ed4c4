#!/usr/bin/env bash
# Fuzz SGLang's own LoRA code across releases, fault-free, one after another, and write one table.
#   scripts/sglang_sweep.sh [--target sglang_lora|sglang_engine] [--budget SECONDS] [--max-examples N] [--seed N]
#                           [--no-shrink] [--case-timeout SECONDS] [--out DIR] VERSION...
# --budget is each release's campaign's whole time (start-up included; default 300 s): a release whose budget ends
# before its seeds ran reads "budget ran out" in the verdict table, never "no".
# Each VERSION is set up (scripts/sglang_setup.sh, cached), its campaign replays the target's seeds (the known
# bugs' minimal cases: a deterministic verdict per release) then generates cases, on the CPU; reports go to
# DIR/VERSION.json and the table (release, finding, triage, first found after, minimal case) to DIR/table.md; with
# --target sglang_engine, first a verdict per release and known bug (targets/sglang_engine/sweep.py).
# --case-timeout: a case running longer is a timeout finding; with --target sglang_engine 900 s unless given (a MoE
# step takes minutes in Triton's interpreter on a loaded machine: the sixth pass's 0.5.23 campaign had a MoE case
# killed at fuzzrunner's 120 s default, a timeout "finding"), else fuzzrunner's own default.
# Exit 0 when every campaign ran (findings or not).
set -euo pipefail
cd "$(dirname "$0")/.."
budget=300 examples=200 seed=0 out=out/sglang_sweep target=sglang_lora shrink=() case_timeout=
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget=$2; shift 2 ;;
    --max-examples) examples=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --no-shrink) shrink=(--no-shrink); shift ;;
    --case-timeout) case_timeout=$2; shift 2 ;;
    -*) echo "sglang_sweep: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: scripts/sglang_sweep.sh [--budget S] [--max-examples N] [--seed N] [--out DIR] VERSION...  (pip index versions sglang)" >&2
  exit 2
fi
if [ -z "$case_timeout" ] && [ "$target" = sglang_engine ]; then case_timeout=900; fi
timeout_arg=()
if [ -n "$case_timeout" ]; then timeout_arg=(--case-timeout "$case_timeout"); fi
mkdir -p "$out"
for v in "$@"; do
  echo "== SGLang $v: set-up" >&2
  if ! bash scripts/sglang_setup.sh "$v" >"$out/$v.log" 2>&1; then
    echo "   set-up failed: $(tail -1 "$out/$v.log")" >&2
    continue
  fi
  echo "== SGLang $v: fuzzing $target (${examples} examples or ${budget}s, seed $seed)" >&2
  rm -rf "$out/$v.corpus" "$out/$v.json"
  rc=0
  FUZZRUNNER_SGLANG_VERSION=$v PYTHONPATH=. .venv/bin/python -m fuzzrunner fuzz --target "$target" \
    --budget "$budget" --max-examples "$examples" --seed "$seed" --corpus "$out/$v.corpus" \
    --report "$out/$v.json" "${shrink[@]}" "${timeout_arg[@]}" >>"$out/$v.log" 2>&1 || rc=$?
  echo "   exit $rc ($([ $rc = 1 ] && echo findings || ([ $rc = 0 ] && echo none || echo error)))" >&2
done
# sglang_engine: a verdict per release and known bug (its seed replayed first), then the findings
PYTHONPATH=. .venv/bin/python -m "targets.$target.sweep" "$out" "$@" | tee "$out/table.md"
