#!/usr/bin/env bash
# The sglang_lora target on a GPU: SGLang's LoRA kernels compiled, under compute-sanitizer. For a machine with no
# network and no SGLang: it runs on an archive made beforehand, on a machine with network, by
#   scripts/sglang_setup.sh 0.5.23 0.5.6 0.5.5 --for-gpu .gpu-sglang/sglang.tar.xz
# (SGLang's Python files, no compiled kernels; the deps, compiled ones as CPython 3.12 wheels), carried as is.
#   bash scripts/gpu_sglang.sh [ARCHIVE] [MAX_EXAMPLES]      (default .gpu-sglang/sglang.tar.xz, 30)
# Every step prints "== RESULT <label>: exit N (expected ...)"; the summary repeats them.
# GPU_SGLANG_BUDGET (s per step, default 30) and GPU_SGLANG_STEPS (labels, default all) bound the run.
set -uo pipefail
cd "$(dirname "$0")/.."
archive=${1:-.gpu-sglang/sglang.tar.xz}
n=${2:-30}
dest=/tmp/gpu-sglang; rm -rf "$dest"; mkdir -p "$dest"
tar -xJf "$archive" -C "$dest" || { echo "gpu_sglang: cannot unpack $archive (make it with scripts/sglang_setup.sh ... --for-gpu)" >&2; exit 2; }
export FUZZRUNNER_DEVICE=cuda PYTHONPATH=. PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
out=out/gpu_sglang
rm -rf "$out"; mkdir -p "$out"
summary=()
budget=${GPU_SGLANG_BUDGET:-30}
steps=${GPU_SGLANG_STEPS:-all}

step() {  # step LABEL VERSION EXPECTED ARGS...
  local label=$1 version=$2 expected=$3; shift 3
  if [ "$steps" != all ] && [[ " $steps " != *" $label "* ]]; then return; fi
  ln -sfn "$dest/sglang/deps" "$dest/sglang/$version/deps"
  echo; echo "== $label (SGLang $version)"; echo "\$ python3 -m fuzzrunner fuzz --target sglang_lora $*"
  FUZZRUNNER_SGLANG_SITE=$dest/sglang/$version python3 -m fuzzrunner fuzz --target sglang_lora --device cuda \
    --seed 0 --no-shrink --no-cpu-triage --budget "$budget" --corpus "$out/$label" --report "$out/$label.json" "$@" 2>&1 | tail -30
  local rc=${PIPESTATUS[0]}
  echo "== RESULT $label: exit $rc (expected $expected)"
  summary+=("$label: exit $rc (expected $expected)")
}

echo "== versions"
python3 -c "import torch, triton; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'triton', triton.__version__, torch.cuda.get_device_name())"
command -v compute-sanitizer || echo "compute-sanitizer not on PATH (the sanitizer steps will say so)"
ln -sfn "$dest/sglang/deps" "$dest/sglang/0.5.23/deps"
FUZZRUNNER_SGLANG_SITE=$dest/sglang/0.5.23 python3 -m fuzzrunner doctor 2>&1 | grep -i -A2 "sglang"

step fault-compiled     0.5.23 "1: seg_indptr[0] never written (numeric)" --fault graph_seg_indptr_uninitialized --max-examples "$n"
step clean-compiled     0.5.23 "0"                                  --max-examples "$((n * 2))"
step fault-initcheck    0.5.23 "1: initcheck read of seg_indptr in _sgemm_lora_a_kernel" --sanitizer initcheck --fault graph_seg_indptr_uninitialized --max-examples 8
step clean-initcheck    0.5.23 "0"                                  --sanitizer initcheck --max-examples 8
step v056-initcheck     0.5.6  "1: #14177 itself, fault-free: initcheck read of seg_indptr" --sanitizer initcheck --max-examples 4
step v055-memcheck      0.5.5  "1: memcheck out-of-bounds in _sgemm_lora_b_kernel (N < BLOCK_N, no n mask)" --sanitizer memcheck --max-examples 4
step v056-csgmv         0.5.6  "1: #28371 numeric mismatch (csgmv replay drops an adapter)" --max-examples 4

echo; echo "== SUMMARY (reports in $out/*.json)"
for s in "${summary[@]}"; do echo "  $s"; done
python3 - "$out" <<'PY'
import json, pathlib, sys
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(p.read_text())
    r = r["runs"][0] if "runs" in r else r
    print(f"  {p.stem}: {r['examples']} cases in {r['duration_s']:.0f} s, {len(r['findings'])} finding(s)")
    for f in r["findings"]:
        s = f["signature"]
        print(f"    {s['kind']} of {s['tensor']} in {s['kernel']} at {s['location']} [{s['tool']}]")
PY
