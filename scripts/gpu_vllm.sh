#!/usr/bin/env bash
# The vllm_lora target on a GPU: vLLM's LoRA ops compiled, under compute-sanitizer. For a machine with no
# network and no vLLM: it runs on a tree made beforehand, on a machine with network, by
#   scripts/vllm_setup.sh VERSION --for-gpu .gpu-vllm/VERSION
# (vLLM's Python files, no vLLM .so; its dependencies for Python 3.12), carried as .gpu-vllm/VERSION.tar.xz.
#   bash scripts/gpu_vllm.sh [ARCHIVE_OR_DIR] [MAX_EXAMPLES]   (default: the first under .gpu-vllm/, 40)
# Every step prints "== RESULT <label>: exit N (expected ...)"; the summary repeats them.
# GPU_VLLM_BUDGET (s per step, default 45) and GPU_VLLM_STEPS (labels, default all) bound the run.
set -uo pipefail
cd "$(dirname "$0")/.."

site=${1:-$(ls -d .gpu-vllm/*.tar.xz .gpu-vllm/*/ 2>/dev/null | head -1)}
n=${2:-40}
if [ -f "$site" ]; then  # the archive vllm_setup.sh --for-gpu wrote: unpack it off the carried tree
  dest=/tmp/gpu-vllm; rm -rf "$dest"; mkdir -p "$dest"
  tar -xJf "$site" -C "$dest" || { echo "gpu_vllm: cannot unpack $site" >&2; exit 2; }
  site=$(ls -d "$dest"/*/ | head -1)
fi
if [ -z "$site" ] || [ ! -d "$site/vllm" ]; then
  echo "gpu_vllm: no vLLM tree (${site:-.gpu-vllm/*}); make one with scripts/vllm_setup.sh VERSION --for-gpu .gpu-vllm/VERSION and carry .gpu-vllm/VERSION.tar.xz" >&2
  exit 2
fi
export FUZZRUNNER_VLLM_SITE=$site FUZZRUNNER_DEVICE=cuda PYTHONPATH=. HF_HUB_OFFLINE=1
unset TRITON_INTERPRET
out=out/gpu_vllm
rm -rf "$out"; mkdir -p "$out"
summary=()

budget=${GPU_VLLM_BUDGET:-40}          # seconds per step: eight steps stay inside a 10-minute command (plus start-up); or pick some with GPU_VLLM_STEPS
steps=${GPU_VLLM_STEPS:-all}           # or a subset, e.g. GPU_VLLM_STEPS="fault-initcheck fault-memcheck"

step() {  # step LABEL EXPECTED ARGS...
  local label=$1 expected=$2; shift 2
  if [ "$steps" != all ] && [[ " $steps " != *" $label "* ]]; then return; fi
  echo; echo "== $label"; echo "\$ python3 -m fuzzrunner fuzz --target vllm_lora $*"
  python3 -m fuzzrunner fuzz --target vllm_lora --device cuda --seed 0 --no-shrink --budget "$budget" \
    --corpus "$out/$label" --report "$out/$label.json" "$@" 2>&1 | tail -40
  local rc=${PIPESTATUS[0]}
  echo "== RESULT $label: exit $rc (expected $expected)"
  summary+=("$label: exit $rc (expected $expected)")
}

echo "== versions"
python3 --version
python3 -c "import torch, triton; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'triton', triton.__version__)"
command -v compute-sanitizer || echo "compute-sanitizer not on PATH (the sanitizer steps will say so)"
python3 -m fuzzrunner doctor

step fault-compiled        "1: the never-prepared read"  --fault dummy_run_skips_prepare --max-examples "$n"
step clean-compiled        "0, or triaged findings"      --max-examples "$((n * 3))"
step embedding-compiled    "1: the dummy run's unwritten _embeddings_indices" --fault dummy_run_skips_embedding_indices --max-examples "$n"
step moe-compiled          "1: fused_moe_lora on the previous batch's mapping" --fault fused_moe_ignores_no_lora_flag --max-examples "$n"
step fault-shadow         "1: uninitialized or stale read of the never-prepared metadata (the device shadow alone)" --oracle shadow --fault dummy_run_skips_prepare --max-examples "$n"
step moe-shadow           "1: stale read of token_lora_mapping in the fused MoE kernel (the device shadow alone)" --oracle shadow --fault fused_moe_ignores_no_lora_flag --max-examples "$n"
step clean-shadow         "0: the device shadow silent on vLLM's kernels" --oracle shadow --max-examples "$((n * 3))"
step clean-shadow-cpu     "0: the CPU shadow (interpreter) on this host's CPU, the device shadow's yardstick" --oracle shadow --device cpu --max-examples "$((n * 3))"
step fault-initcheck       "1: initcheck reads of active_lora_ids" --sanitizer initcheck --fault dummy_run_skips_prepare --max-examples 10
step fault-memcheck        "1: memcheck out-of-bounds (stale metadata)" --sanitizer memcheck --fault dummy_run_skips_prepare --max-examples 10
step clean-initcheck       "0, or triaged findings"      --sanitizer initcheck --max-examples 10
step clean-memcheck        "0, or triaged findings"      --sanitizer memcheck --max-examples 10

echo; echo "== SUMMARY (reports in $out/*.json)"
for s in "${summary[@]}"; do echo "  $s"; done
python3 - "$out" <<'PY'
import json, pathlib, sys
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(p.read_text())
    r = r["runs"][0] if "runs" in r else r  # schema 2: one run per target; schema 1: flat
    print(f"  {p.stem}: {r['examples']} cases in {r['duration_s']:.0f} s, {len(r['findings'])} finding(s)")
    for f in r["findings"]:
        s = f["signature"]
        print(f"    {s['kind']} of {s['tensor']} in {s['kernel']} at {s['location']} [{s['tool']}]")
PY
