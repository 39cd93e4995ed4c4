#!/usr/bin/env bash
# The LoRA knobs each SGLang release reads, from its wheel (no set-up, no import): the server arguments of its
# LoRA group (ServerArgs fields named *lora*, in server_args.py or arg_groups/fields/lora.py) and the environment
# variables its LoRA code reads (SGLANG_* names in sglang/srt/lora/ and sglang/kernels/ops/lora/), one row per
# knob with the releases that have it (docs/sglang.md: "LoRA knobs").
#   scripts/sglang_lora_knobs.sh [VERSION...]     # default: every wheel in .cache/sglang/wheels
set -u
cd "$(dirname "$0")/.."
wheels=.cache/sglang/wheels
if [ $# -gt 0 ]; then files=$(for v in "$@"; do ls "$wheels"/sglang-"$v"-*.whl; done); else files=$(ls "$wheels"/sglang-0.5.*.whl | sort -V); fi
tmp=$(mktemp)
for w in $files; do
  v=$(basename "$w" | cut -d- -f2)
  names=$(unzip -Z1 "$w")
  args=$(for f in sglang/srt/server_args.py sglang/srt/arg_groups/fields/lora.py; do
           echo "$names" | grep -qx "$f" && unzip -p "$w" "$f"; done | grep -oE "^\s+[a-z_]*lora[a-z_]*\s*:" | tr -d ' :' | sort -u)
  envs=$(for f in $(echo "$names" | grep -E "^sglang/(srt/lora|kernels/ops/lora)/.*\.py$"); do
           unzip -p "$w" "$f" | grep -oE "SGLANG_[A-Z0-9_]+" | sed "s|\$| ${f#sglang/}|"; done | sort -u)
  for a in $args; do echo "server $a $v -"; done >>"$tmp"
  echo "$envs" | awk -v v="$v" 'NF==2 {print "env", $1, v, $2}' >>"$tmp"
done
all=$(for w in $files; do basename "$w" | cut -d- -f2; done | tr '\n' ' ')
printf "| knob | kind | releases | read in (LoRA code; newest release) |\n|---|---|---|---|\n"
awk -v all="$all" '
  function dash(s) { gsub(/_/, "-", s); return "--" s }
  BEGIN { n = split(all, order, " "); for (i = 1; i <= n; i++) rank[order[i]] = i }
  { key = $1 " " $2; seen[key, $3] = 1; keys[key] = 1
    if (!(key in lo) || rank[$3] < rank[lo[key]]) lo[key] = $3
    if (!(key in hi) || rank[$3] >= rank[hi[key]]) { hi[key] = $3 }
    if ($4 != "-" && rank[$3] >= rank[fhi[key]]) { if (rank[$3] > rank[fhi[key]]) files[key] = ""; fhi[key] = $3
      if (index(files[key], $4) == 0) files[key] = files[key] (files[key] == "" ? "" : ", ") $4 } }
  END { for (k in keys) { split(k, p, " ");
          r = (lo[k] == order[1] ? "all" : lo[k] " -"); if (hi[k] != order[n]) r = lo[k] " - " hi[k]; else if (lo[k] != order[1]) r = lo[k] "+"
          printf "%s\t| `%s` | %s | %s | %s |\n", p[1] p[2], (p[1] == "server" ? dash(p[2]) : p[2]), p[1], r, files[k] } }' "$tmp" | sort | cut -f2
rm -f "$tmp"
