#!/usr/bin/env bash
# Fuzz vLLM's own LoRA code across releases, one after another, and write one table.
#   scripts/vllm_sweep.sh [--budget SECONDS] [--seed N] [--out DIR] [--drop-wheels] VERSION...
# Each VERSION is set up (scripts/vllm_setup.sh, cached), fuzzed fault-free for the budget on the CPU,
# and reported in DIR/VERSION.json; the table (version, findings by signature, first found after,
# minimal case) goes to DIR/table.md and stdout. Exit 0 when every campaign ran (findings or not).
# --drop-wheels deletes each release's wheel once it is set up (~250-460 MB each; the tree is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
budget=180 seed=0 out=out/vllm_sweep drop=
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --drop-wheels) drop=1; shift ;;
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
for v in "$@"; do
  echo "== vLLM $v: set-up" >&2
  if ! bash scripts/vllm_setup.sh "$v" >"$out/$v.log" 2>&1; then
    echo "   set-up failed: $(tail -1 "$out/$v.log")" >&2
    continue
  fi
  [ -z "$drop" ] || rm -f .cache/vllm/wheels/vllm-"$v"-*.whl
  echo "== vLLM $v: fuzzing for ${budget}s (seed $seed)" >&2
  rm -rf "$out/$v.corpus"
  rc=0
  FUZZRUNNER_VLLM_VERSION=$v PYTHONPATH=. .venv/bin/python -m fuzzrunner fuzz --target vllm_lora \
    --budget "$budget" --max-examples 100000 --seed "$seed" --corpus "$out/$v.corpus" \
    --report "$out/$v.json" >>"$out/$v.log" 2>&1 || rc=$?
  echo "   exit $rc ($([ $rc = 1 ] && echo findings || ([ $rc = 0 ] && echo none || echo error)))" >&2
done
PYTHONPATH=. .venv/bin/python -m targets.vllm_lora.sweep "$out" "$@" | tee "$out/table.md"
