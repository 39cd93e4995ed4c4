#!/usr/bin/env bash
# The sglang_engine target on a GPU, compiled: SGLang 0.5.23's own LoRAManager, pool, LoRA layers and the decode
# graph runner's capture-time preparation (prepare_lora_batch of the dummy batch, reset_routing_cache, the forward)
# under real torch.cuda.CUDAGraph captures (targets/sglang_engine/graphs.py). For a machine with no network: it runs
# on the archive the GPU acceptance run carries (docs/ci.md: scripts/sglang_setup.sh 0.5.23 --for-gpu
# .gpu-sglang/sglang.tar.xz); outside scripts/gpu_acceptance.py's plan, one call of its own.
#   bash scripts/gpu_sglang_engine.sh [ARCHIVE]      (default .gpu-sglang/sglang.tar.xz; at most 450 s of steps)
# Steps, each printing "== RESULT <label>: exit N (expected ...)":
#   engine-graph  the integration test's graph cases on cuda: the lifecycle with graph_bs 4 on both backends
#                 (expected silent) and capture_without_lora_batch's minimal case (expected found), and how many
#                 real CUDA graphs were captured (expected > 0);
#   engine-logits SGLang's LogitsProcessor over lm_head LoRA on cuda (its input-logprob passes on the device path:
#                 borrowed graph-pool memory, the fused normalizer): the integration test's logprob cases (expected
#                 silent) and logprob_pass_stale_routing's minimal case (expected found);
#   engine-backends the LoRA backends beyond triton / csgmv on cuda (tests/integration/test_sglang_engine_backends.py):
#                 torch_native and triton_v2 lifecycles with graph_bs 4 (triton_v2: real "lora" and "nolora" graphs,
#                 SGLang's variant choice; expected silent but for triton_v2's by-design rank over-read, which only
#                 the shadow oracle reports: not run on cuda), nolora_graph_for_adapters' minimal case and G2's two
#                 (docs/findings: torch_native's graph ops and ranks below the max) expected found;
#   g2-repro      docs/findings/repro_sglang_g2_torch_native_graph_rank.py on cuda (expected exit 1: G2 there);
#   engine-fault  a campaign with the planted unload_keeps_slot, 100 s (expected exit 1: found);
#   engine-clean  a fault-free campaign, 120 s (expected exit 0).
set -uo pipefail
cd "$(dirname "$0")/.."
archive=${1:-.gpu-sglang/sglang.tar.xz}
dest=/tmp/gpu-sglang-engine; rm -rf "$dest"; mkdir -p "$dest"
tar -xJf "$archive" -C "$dest" || { echo "gpu_sglang_engine: cannot unpack $archive" >&2; exit 2; }
ln -sfn "$dest/sglang/deps" "$dest/sglang/0.5.23/deps"
export FUZZRUNNER_SGLANG_SITE=$dest/sglang/0.5.23 FUZZRUNNER_DEVICE=cuda PYTHONPATH=. PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
out=out/gpu_sglang_engine; rm -rf "$out"; mkdir -p "$out"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"

echo; echo "== engine-graph"
timeout 75 python3 - <<'PY'
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("t", "tests/integration/test_sglang_engine.py")
t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)
from fuzzrunner.case import Case
from fuzzrunner.execute import run_case
from fuzzrunner.target import load_target
target = load_target("sglang_engine")
print("\n".join(target.details))
cfg, ops, _ = t.FAULT_CASES["capture_without_lora_batch"]
runs = [(t._cfg(b, graph_bs=4), t.LIFECYCLE, [], False) for b in ("triton", "csgmv")]
runs += [(cfg, ops, ["capture_without_lora_batch"], True), (cfg, ops, [], False)]
ok = True
for c, o, faults, want in runs:
    vs = run_case(Case("sglang_engine", c, tuple(o), tuple(faults)), target, device="cuda")
    print(f"  {c['backend']} graph_bs {c['graph_bs']} faults {faults}: {[(v.kind, v.message[:300]) for v in vs]}")
    ok &= bool(vs) == want
graphs = [m for n, m in sys.modules.items() if n.endswith("sglang_engine.graphs")][0]  # the target's own import
print("  CUDA graphs captured:", graphs.CAPTURED)
ok &= graphs.CAPTURED["cuda-graph"] > 0
sys.exit(0 if ok else 1)
PY
echo "== RESULT engine-graph: exit $? (expected 0: lifecycle silent on both backends under real graphs, the fault found)"

echo; echo "== engine-logits"
timeout 60 python3 - <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("t", "tests/integration/test_sglang_engine.py")
t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)
from fuzzrunner.case import Case
from fuzzrunner.execute import run_case
from fuzzrunner.target import load_target
target = load_target("sglang_engine")
runs = [(t._lp_cfg(b, chunk), t.LOGPROBS, [], False) for b, chunk in t.LP_VARIANTS]
runs += [(t._lp_cfg(), t.LOGPROBS, ["logprob_pass_stale_routing"], True)]
ok = True
for c, o, faults, want in runs:
    vs = run_case(Case("sglang_engine", c, tuple(o), tuple(faults)), target, device="cuda")
    print(f"  {c['backend']} logprob_chunk {c['logprob_chunk']} faults {faults}: {[(v.kind, v.message[:300]) for v in vs]}")
    ok &= bool(vs) == want
sys.exit(0 if ok else 1)
PY
echo "== RESULT engine-logits: exit $? (expected 0: SGLang's LogitsProcessor over lm_head LoRA silent, input-logprob passes chunked or not; the stale-pass fault found)"

echo; echo "== engine-backends"
timeout 75 python3 - <<'PY'
import importlib.util, json, sys
sys.path.insert(0, "tests/integration")
spec = importlib.util.spec_from_file_location("tb", "tests/integration/test_sglang_engine_backends.py")
tb = importlib.util.module_from_spec(spec); spec.loader.exec_module(tb)
from fuzzrunner.case import Case
from fuzzrunner.execute import run_case
from fuzzrunner.target import load_target
target = load_target("sglang_engine")
runs = [(tb.lifecycle_cfg(b, 4), tb.VARIANTS, [], False) for b in ("torch_native", "triton_v2")]
# SGLang's torch_native bugs under real graphs (docs/findings G2): expected found
runs += [(c["config"], c["ops"], [], True) for c in
         (json.load(open(f"docs/findings/cases/{n}.json")) for n in tb.KNOWN if "graph_rank" in n)]
cfg, ops = tb.FAULT_CASES["nolora_graph_for_adapters"]
runs += [(cfg, ops, ["nolora_graph_for_adapters"], True), (cfg, ops, [], False)]
ok = True
for c, o, faults, want in runs:
    vs = run_case(Case("sglang_engine", c, tuple(o), tuple(faults)), target, device="cuda")
    print(f"  {c['backend']} graph_bs {c['graph_bs']} faults {faults}: {[(v.kind, v.message[:300]) for v in vs]}")
    ok &= bool(vs) == want
graphs = [m for n, m in sys.modules.items() if n.endswith("sglang_engine.graphs")][0]
print("  CUDA graphs captured:", graphs.CAPTURED)
sys.exit(0 if ok else 1)
PY
echo "== RESULT engine-backends: exit $? (expected 0: torch_native and triton_v2 silent under real graphs, both variants; the nolora fault and G2 found)"

echo; echo "== g2-repro"
timeout 60 python3 docs/findings/repro_sglang_g2_torch_native_graph_rank.py "$FUZZRUNNER_SGLANG_SITE"
echo "== RESULT g2-repro: exit $? (expected 1: SGLang's torch_native graph ops on cuda give other weights than the adapter's, docs/findings G2)"

echo; echo "== engine-fault"
# both campaigns without the seeds: on 0.5.23 those of G1, G2 and SG1 (SGLang's own bugs) are found first
timeout 115 env FUZZRUNNER_SGLANG_SEEDS=0 python3 -m fuzzrunner fuzz --target sglang_engine --device cuda --fault unload_keeps_slot --seed 0 \
  --no-shrink --no-cpu-triage --budget 100 --max-examples 300 --report "$out/fault.json" 2>&1 | tail -8
echo "== RESULT engine-fault: exit ${PIPESTATUS[0]} (expected 1: state-violation of unload)"

echo; echo "== engine-clean"
timeout 140 env FUZZRUNNER_SGLANG_SEEDS=0 python3 -m fuzzrunner fuzz --target sglang_engine --device cuda --seed 0 --no-shrink --no-cpu-triage \
  --budget 120 --report "$out/clean.json" 2>&1 | tail -8
echo "== RESULT engine-clean: exit ${PIPESTATUS[0]} (expected 0)"
