#!/usr/bin/env bash
# What each SGLang release's LoRA state machine has, read statically from its wheel (no set-up, no import):
# the facts targets/sglang_engine/api.py finds at run time, and the API generation they make (docs/sglang.md).
#   scripts/sglang_api_facts.sh [VERSION...]     # default: every wheel in .cache/sglang/wheels
# A VERSION whose wheel is not cached is downloaded (pip download --no-deps, 3-40 MB).
set -u  # no -e: grep -c exits 1 when it counts none
cd "$(dirname "$0")/.."
wheels=.cache/sglang/wheels
mkdir -p "$wheels"
for v in "$@"; do
  ls "$wheels"/sglang-"$v"-*.whl >/dev/null 2>&1 || .venv/bin/pip download -q --no-deps "sglang==$v" -d "$wheels" >/dev/null
done
if [ $# -gt 0 ]; then files=$(for v in "$@"; do ls "$wheels"/sglang-"$v"-*.whl; done); else files=$(ls "$wheels"/sglang-0.5.*.whl | sort -V); fi
yn() { [ "$1" -gt 0 ] && echo yes || echo no; }
printf "| release | gen | tp args | fetch_new_loras | graph init | emb/lm_head | remove_lora | base slot cleared | sgemm_lora_b n-mask |\n|---|---|---|---|---|---|---|---|---|\n"
for w in $files; do
  v=$(basename $w | cut -d- -f2)
  names=$(unzip -Z1 $w)
  lm=$(unzip -p $w sglang/srt/lora/lora_manager.py)
  mp=$(unzip -p $w sglang/srt/lora/mem_pool.py)
  tp=$(echo "$lm" | sed -n '/class LoRAManager/,/):$/p' | grep -c "tp_size")
  fetch=$(echo "$lm" | grep -c "def fetch_new_loras")
  if echo "$lm" | grep -q "def init_decode_cuda_graph_batch_info"; then g="decode(bs, n)"; elif echo "$lm" | grep -A2 "def init_cuda_graph_batch_info" | grep -q "num_tokens"; then g="(bs, n)"; else g="(bs)"; fi
  emb=$(echo "$mp" | grep -c "def get_embedding_lora_A_shape")
  rm=$(echo "$mp" | grep -c "def remove_lora")
  cb=$(echo "$mp" | grep -c "def _clear_buffer_slot_for_base")
  rc=$(echo "$names" | grep -c "^sglang/srt/runtime_context.py$")
  fx=$(echo "$names" | grep -c "^sglang/test/parallel_groups.py$")
  nm=$(for f in $(echo "$names" | grep "sgemm_lora_b.py$"); do unzip -p $w $f; done | grep -c "n_mask")
  if [ $fx = 1 ] && [ $tp = 0 ]; then gen=e3; elif [ $rc = 1 ]; then gen=e2; elif [ $fetch = 1 ]; then gen=e1; else gen=e0; fi
  echo "| $v | $gen | $(yn $tp) | $(yn $fetch) | $g | $(yn $emb) | $(yn $rm) | $(yn $cb) | $(yn $nm) |"
done
