#!/usr/bin/env bash
# Fuzz vLLM's own LoRA code across releases, one after another, and write one table.
#   scripts/vllm_sweep.sh [--target vllm_lora|vllm_engine] [--budget SECONDS] [--seed N] [--out DIR] [--drop-wheels]
#                         [--seed-cases DIR] [--prefetch] [--case-timeout SECONDS] VERSION...
# Each VERSION is set up (scripts/vllm_setup.sh, cached), fuzzed fault-free with --target (default vllm_lora) for
# the budget on the CPU,
# and reported in DIR/VERSION.json; the table (version, findings by signature, first found after,
# minimal case) goes to DIR/table.md and stdout. Exit 0 when every campaign ran (findings or not).
# --drop-wheels deletes each release's wheel once it is set up (~250-460 MB each; the tree is kept).
# --seed-cases DIR replays DIR/*.json written for --target first in every campaign (e.g. docs/findings/cases: each release's verdict on
# the known bugs, whatever the budget lets the search reach; the table's "replayed" column). --prefetch sets the
# next releases up in the background while one is fuzzed (set-up is the slow part on a busy machine).
# --case-timeout SECONDS is passed to fuzz (default: the profile's, 120 s): a loaded machine's slow case is
# otherwise a false timeout finding.
set -euo pipefail
cd "$(dirname "$0")/.."
budget=180 seed=0 out=out/vllm_sweep drop= seeds= prefetch= target=vllm_lora case_timeout=
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --drop-wheels) drop=1; shift ;;
    --seed-cases) seeds=$2; shift 2 ;;
    --prefetch) prefetch=1; shift ;;
    --case-timeout) case_timeout=$2; shift 2 ;;
    -*) echo "vllm_sweep: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: scripts/vllm_sweep.sh [--budget SECONDS] [--seed N] [--out DIR] VERSION...  (pip index versions vllm)" >&2
  exit 2
fi
bash scripts/setup.sh
mkdir -p "$out"
cache=${FUZZRUNNER_VLLM_CACHE:-.cache/vllm}
pre=
if [ -n "$prefetch" ]; then
  ( for v in "$@"; do
      bash scripts/vllm_setup.sh "$v" >"$out/$v.setup.log" 2>&1 || true
      [ -z "$drop" ] || rm -f "$cache"/wheels/vllm-"$v"-*.whl
    done ) &
  pre=$!
fi
for v in "$@"; do
  echo "== vLLM $v: set-up" >&2
  while [ -n "$pre" ] && [ ! -f "$cache/$v/ok" ] && kill -0 "$pre" 2>/dev/null; do sleep 5; done
  if ! bash scripts/vllm_setup.sh "$v" >"$out/$v.log" 2>&1; then
    echo "   set-up failed: $(tail -1 "$out/$v.log")" >&2
    continue
  fi
  [ -z "$drop" ] || rm -f "$cache"/wheels/vllm-"$v"-*.whl
  echo "== vLLM $v: fuzzing for ${budget}s (seed $seed)" >&2
  rm -rf "$out/$v.corpus"
  if [ -n "$seeds" ]; then
    mkdir -p "$out/$v.corpus/cases/$target"
    grep -l "\"target\": \"$target\"" "$seeds"/*.json | xargs -r cp -t "$out/$v.corpus/cases/$target/"
  fi
  rc=0
  FUZZRUNNER_VLLM_VERSION=$v PYTHONPATH=. .venv/bin/python -m fuzzrunner fuzz --target "$target" \
    --budget "$budget" --max-examples 100000 --seed "$seed" --corpus "$out/$v.corpus" \
    --report "$out/$v.json" ${case_timeout:+--case-timeout "$case_timeout"} >>"$out/$v.log" 2>&1 || rc=$?
  echo "   exit $rc ($([ $rc = 1 ] && echo findings || ([ $rc = 0 ] && echo none || echo error)))" >&2
done
[ -z "$pre" ] || wait "$pre"
PYTHONPATH=. .venv/bin/python -m "targets.$target.sweep" "$out" "$@" | tee "$out/table.md"
