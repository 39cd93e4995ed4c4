#!/usr/bin/env bash
# V1 (docs/findings/v1-specialize-active-lora.md) on a GPU: vLLM 0.33.0's own LoRAKernelMeta and compiled
# lora_shrink/lora_expand under a real torch.cuda.CUDAGraph, unpatched and with the fix, then a short compiled
# vllm_lora campaign with the fix applied (FUZZRUNNER_VLLM_PATCH). For a GPU machine with no network and no
# vLLM: the tree is made here beforehand and carried as an archive:
#   scripts/vllm_setup.sh 0.33.0 --for-gpu .gpu-vllm/0.33.0          # writes .gpu-vllm/0.33.0.tar.xz
#   bash scripts/gpu_vllm_v1.sh [ARCHIVE_OR_DIR]                      # carry: .gpu-vllm/0.33.0.tar.xz
# Prints "== RESULT <step>: exit N (expected M) OK|UNEXPECTED" per step and a summary; exit 0 when every step
# gave its expected exit. GPU_V1_BUDGET (s, default 200) bounds the campaign; the whole run stays under 8 min.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
site=${1:-.gpu-vllm/0.33.0.tar.xz}
if [ -f "$site" ]; then
  dest=/tmp/gpu-vllm; rm -rf "$dest"; mkdir -p "$dest"
  tar -xJf "$site" -C "$dest" || { echo "gpu_vllm_v1: cannot unpack $site" >&2; exit 2; }
  site=$(ls -d "$dest"/*/ | head -1)
fi
if [ -z "$site" ] || [ ! -d "$site/vllm" ]; then
  echo "gpu_vllm_v1: no vLLM tree ($site); make it with scripts/vllm_setup.sh 0.33.0 --for-gpu .gpu-vllm/0.33.0 and carry .gpu-vllm/0.33.0.tar.xz" >&2
  exit 2
fi
site=${site%/}
patch=docs/findings/v1_specialize_active_lora.patch
repro=docs/findings/repro_v1_specialize_active_lora.py
export HF_HUB_OFFLINE=1 FUZZRUNNER_VLLM_CACHE=/tmp/gpu-vllm-cache TRITON_CACHE_DIR=/tmp/triton-cache-v1
unset TRITON_INTERPRET FUZZRUNNER_VLLM_PATCH
out=out/gpu_vllm_v1; rm -rf "$out"; mkdir -p "$out"
summary=() failed=0

result() {  # result LABEL RC EXPECTED
  local ok=OK; [ "$2" = "$3" ] || { ok=UNEXPECTED; failed=1; }
  echo "== RESULT $1: exit $2 (expected $3) $ok   [$(( $(date +%s) - t0 )) s]"
  summary+=("$1: exit $2 (expected $3) $ok")
}

echo "== versions"
python3 --version
python3 -c "import torch, triton; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'triton', triton.__version__, torch.cuda.get_device_name())"
echo "vLLM tree: $site"

# The repro imports only vLLM; on this machine vLLM's platform probe needs the tree's platform plugin (a module of
# this repository: vLLM's compiled ops are not carried), hence the repository on PYTHONPATH after the tree.
echo; echo "== repro-unpatched: a real CUDAGraph per row, vLLM 0.33.0 as released (expect exit 1: rows lose their adapter)"
PYTHONPATH="$site:$site/deps:." timeout 240 python3 "$repro" --device cuda 2>&1 | grep -v "^WARNING\|^INFO" | tail -25
result repro-unpatched "${PIPESTATUS[0]}" 1

echo; echo "== repro-patched: the same with $patch applied to a copy of the tree (expect exit 0)"
fixed=$(PYTHONPATH=. python3 -c "
import sys; from pathlib import Path; from targets.vllm_lora import patching
print(patching.apply(Path('$patch').resolve(), Path('$site'), Path('$FUZZRUNNER_VLLM_CACHE')))") \
  || { echo "gpu_vllm_v1: the patch did not apply (above)"; result repro-patched 2 0; fixed=; }
if [ -n "$fixed" ]; then
  PYTHONPATH="$fixed:$site:$site/deps:." timeout 150 python3 "$repro" --device cuda 2>&1 | grep -v "^WARNING\|^INFO" | tail -25
  result repro-patched "${PIPESTATUS[0]}" 0
fi

left=$(( 450 - ($(date +%s) - t0) ))
budget=${GPU_V1_BUDGET:-200}; [ "$budget" -lt "$left" ] || budget=$(( left > 60 ? left : 60 ))
echo; echo "== campaign-patched: vllm_lora compiled on the GPU, FUZZRUNNER_VLLM_PATCH=$patch, ${budget} s (expect exit 0)"
FUZZRUNNER_VLLM_SITE=$site FUZZRUNNER_VLLM_PATCH=$patch FUZZRUNNER_DEVICE=cuda PYTHONPATH=. \
  timeout $(( budget + 90 )) python3 -m fuzzrunner fuzz --target vllm_lora --device cuda --seed 0 --budget "$budget" \
  --max-examples 5000 --corpus "$out/campaign" --report "$out/campaign.json" 2>&1 | tail -30
result campaign-patched "${PIPESTATUS[0]}" 0

echo; echo "== SUMMARY ($(( $(date +%s) - t0 )) s; report in $out/campaign.json)"
for s in "${summary[@]}"; do echo "  $s"; done
python3 - "$out/campaign.json" <<'PY'
import json, pathlib, sys
p = pathlib.Path(sys.argv[1])
if p.exists():
    r = json.loads(p.read_text())
    r = r["runs"][0] if "runs" in r else r
    print(f"  campaign-patched: {r['examples']} cases in {r['duration_s']:.0f} s, {len(r['findings'])} finding(s)")
    for f in r["findings"]:
        s = f["signature"]
        print(f"    {s['kind']} of {s['tensor']} in {s['kernel']} at {s['location']} [{s['tool']}]: {f['message'][:160]}")
PY
exit $failed
