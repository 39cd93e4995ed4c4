"""``sglang_engine`` with every LoRA backend the release ships that runs without compiled code (backends.py:
``torch_native`` 0.5.6.post1+, ``triton_v2`` 0.5.23+) and the decode graph runner's "lora" / "nolora" variant choice
(variants.py), each with its planted fault (backend_faults.py). docs/sglang.md, "sglang_engine".

One subprocess for the fast cases (~25 s of import); the from-scratch campaigns are ``slow``.
"""

import json
import subprocess
import sys
from importlib import import_module

import pytest
from test_sglang_engine import ADAPTERS, AVAILABLE, REASON, ROOT, _cfg, run_cases

# One xdist group: under `--dist loadgroup` a module's ungrouped tests spread over both workers, each
# setting up the module's fixtures; grouped, `results` (every case in one SGLang subprocess) is set up once per CI run.
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=f"sglang_engine: {REASON}"),
              pytest.mark.xdist_group("sglang_engine_backends")]

LOAD_A0 = {"op": "load", "name": "a0"}
# a base-only decode batch (the "nolora" graph), an adapter batch (the "lora" graph), a mixed eager extend batch
# (two segments), a full pool (evictions), an unload and a reload with new weights: every graph size replayed
VARIANTS = [LOAD_A0, {"op": "step", "reqs": [None, None], "mode": "decode"},
            {"op": "step", "reqs": [None, "a0"], "mode": "decode"},
            {"op": "step", "reqs": ["a0", None, "a0"], "mode": "extend", "lens": [2, 1, 3]},
            {"op": "load", "name": "a1"}, {"op": "step", "reqs": ["a1", "a1", None, "a1"], "mode": "decode"},
            {"op": "load", "name": "a2"}, {"op": "step", "reqs": ["a2"], "mode": "decode"},
            {"op": "step", "reqs": [None], "mode": "decode"}, {"op": "unload", "name": "a0"},
            {"op": "load", "name": "a0", "v": 1}, {"op": "step", "reqs": ["a0", "a0", None], "mode": "decode"}]
FAULT_CASES = {
    # a decode batch of one adapter request replays the base-only graph
    "nolora_graph_for_adapters": (_cfg("triton_v2", graph_bs=2),
                                  [LOAD_A0, {"op": "step", "reqs": ["a0"], "mode": "decode"}]),
    # the first request has no adapter: the whole batch skips LoRA
    "skip_inactive_from_first_request": (_cfg("triton_v2"),
                                         [LOAD_A0, {"op": "step", "reqs": [None, "a0"], "mode": "decode"}]),
    # two segments (the base model's slot, a0's): both run the base slot
    "torch_native_first_segment_slot": (_cfg("torch_native"), [LOAD_A0, {"op": "step", "reqs": [None, "a0"],
                                                                          "mode": "extend", "lens": [1, 2]}]),
    # a1 (rank 2 of 4): the expand's select keeps bridge lane 2, which the shrink never wrote
    "v2_expand_rank_past_bridge": (_cfg("triton_v2"), [{"op": "load", "name": "a1"},
                                                       {"op": "step", "reqs": ["a1", None], "mode": "decode"}]),
}
# the linear layers and embed_tokens: torch_native's lm_head LoRA is torch-native-lm-head (a bug of SGLang's: the
# campaign's finding, docs/findings/sglang-torch-native-lm-head.md), kept out of the silent lifecycle
LINEAR = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens"]
LINEAR_ADAPTERS = {n: dict(a, modules=[m for m in a["modules"] if m != "lm_head"]) for n, a in ADAPTERS.items()}
# under decode graphs, torch_native runs an adapter of a rank below --max-lora-rank with the wrong weights (G2,
# docs/findings/sglang-g2-torch-native-graph-rank.md): its graph lifecycle's adapters are all of the max rank
FULL_RANK_ADAPTERS = {n: dict(a, r=4, alpha=8) for n, a in LINEAR_ADAPTERS.items()}


def lifecycle_cfg(backend: str, graph_bs: int) -> dict:
    """The lifecycle's server: every module but lm_head (G1); torch_native's graphs with max-rank adapters (G2)."""
    full = backend == "torch_native" and graph_bs
    return _cfg(backend, graph_bs=graph_bs, target_modules=LINEAR,
                adapters=FULL_RANK_ADAPTERS if full else LINEAR_ADAPTERS)
# SGLang's own bugs that the torch_native draw found (docs/findings): each minimal case, and its sweep verdict
FINDINGS = ROOT / "docs" / "findings" / "cases"
KNOWN = {"sglang_g1_torch_native_lm_head": "torch-native-lm-head",
         "sglang_g2_torch_native_graph_rank_stacked": "torch-native-graph-rank",
         "sglang_g2_torch_native_graph_rank_stale_tail": "torch-native-graph-rank",
         # G3 (any backend; found on triton_v2): an adapter with one of embed_tokens / lm_head keeps the other's
         # weights from the adapter its slot held (docs/findings/sglang-g3-partial-embedding-unzeroed.md)
         "sglang_g3_embed_only_after_lm_head": "embedding-partial-unzeroed",
         "sglang_g3_lm_head_only_after_embed": "embedding-partial-unzeroed"}
BACKENDS = [("torch_native", 0), ("torch_native", 4), ("triton_v2", 0), ("triton_v2", 4)]


def _version() -> str:
    return import_module("fuzzrunner.targets.sglang_lora.site").wanted_version()


def _drivable() -> tuple:
    """The backends the set-up release ships, from its tree (no import of SGLang here)."""
    site = import_module("fuzzrunner.targets.sglang_lora.site")
    backend = site.site_dirs(_version())[0] / "sglang" / "srt" / "lora" / "backend"
    have = {"triton", "csgmv"}
    if (backend / "torch_backend.py").exists():
        have.add("torch_native")
    if (backend / "triton_v2_backend.py").exists():
        have.add("triton_v2")
    return tuple(sorted(have))


@pytest.fixture(scope="module")
def results():
    have = _drivable()
    keys, cases = [], []
    for b, g in BACKENDS:
        if b in have:
            keys.append(("lifecycle", b, g))
            cases.append([lifecycle_cfg(b, g), VARIANTS, []])
    for fault, (cfg, ops) in FAULT_CASES.items():
        if cfg["backend"] in have:
            keys += [(fault, "on"), (fault, "off")]
            cases += [[cfg, ops, [fault]], [cfg, ops, []]]
    for name in KNOWN:
        case = json.loads((FINDINGS / f"{name}.json").read_text())
        if case["config"]["backend"] in have:
            keys.append(("known", name))
            cases.append([case["config"], case["ops"], []])
    if not cases:
        pytest.skip(f"SGLang {_version()} ships neither torch_native nor triton_v2")
    return dict(zip(keys, run_cases(cases)))


@pytest.mark.parametrize("backend,graph_bs", BACKENDS)
def test_each_backend_and_graph_variant_is_silent_on_sglangs_own_code(results, backend, graph_bs):
    if backend not in _drivable():
        pytest.skip(f"SGLang {_version()} has no {backend} LoRA backend")
    # silent whole: triton_v2's expand kernels read workspace lanes past a smaller adapter's rank and drop them
    # (tl.where), which the shadow oracle reported until it followed the value (oracles/shadow/discards.py)
    assert results["lifecycle", backend, graph_bs] == []


@pytest.mark.parametrize("fault", list(FAULT_CASES))
def test_each_backend_fault_is_caught_in_its_minimal_case_and_silent_without(results, fault):
    cfg, _ = FAULT_CASES[fault]
    if cfg["backend"] not in _drivable():
        pytest.skip(f"SGLang {_version()} has no {cfg['backend']} LoRA backend")
    found = results[fault, "on"]
    assert {v[0] for v in found} & {"numeric-mismatch", "state-violation"}, found
    assert results[fault, "off"] == [], results[fault, "off"]


def test_a_workspace_lane_the_expand_uses_is_caught_by_the_shadow_oracle_at_the_bridge_load(results):
    """The by-design over-read is silent (above) because its lanes are dropped; one kept lane, never written by the
    shrink, is reported at the kernel's bridge load (lhs = tl.load(lhs_ptrs, ...))."""
    if "triton_v2" not in _drivable():
        pytest.skip(f"SGLang {_version()} has no triton_v2 LoRA backend")
    reads = [v for v in results["v2_expand_rank_past_bridge", "on"] if v[0] == "uninitialized-read"]
    assert reads and {v[3] for v in reads} == {"_grouped_lora_b_kernel"}, results["v2_expand_rank_past_bridge", "on"]
    assert all(v[4].startswith("sglang/kernels/ops/lora/common/lora_b.py:") and v[5].startswith("torch.empty@workspace")
               for v in reads), reads


@pytest.mark.parametrize("name", list(KNOWN))
def test_sglangs_own_bugs_are_reached_and_triaged(results, name):
    """G1, G2 and G3 (docs/findings) on the release: found in their minimal cases, each a wrong row, and triaged by
    sweep.py as the bug it is (a release with their fixes gives nothing here: then the test says so)."""
    case = json.loads((FINDINGS / f"{name}.json").read_text())
    if case["config"]["backend"] not in _drivable():
        pytest.skip(f"SGLang {_version()} has no {case['config']['backend']} LoRA backend")
    vs = results["known", name]
    assert vs, f"{name}: no longer found on SGLang {_version()}: fixed upstream? update docs/findings"
    sweep = import_module("fuzzrunner.targets.sglang_lora.sweep")
    for kind, tool, message, kernel, location, tensor in vs:
        f = {"signature": {"tool": tool, "kind": kind, "kernel": kernel, "location": location, "tensor": tensor},
             "case": {"target": "sglang_engine", "config": case["config"]}}
        assert sweep.category(f, _version()) == KNOWN[name], (kind, message)


def test_the_rank_overread_triage_names_only_the_loads_the_kernel_discards():
    """sweep.py's ``v2-rank-overread``: an uninitialized read of the dense runner's bridge at an expand kernel's
    bridge load that a ``tl.where`` to the live rank follows (the release's file says so); any other read of the
    workspace in those kernels stays untriaged."""
    if "triton_v2" not in _drivable():
        pytest.skip(f"SGLang {_version()} has no triton_v2 LoRA backend")
    sweep = import_module("fuzzrunner.targets.sglang_lora.sweep")
    src = (import_module("fuzzrunner.targets.sglang_lora.site").site_dirs(_version())[0] / "sglang" / "kernels" /
           "ops" / "lora" / "common" / "lora_b.py").read_text().splitlines()
    loads = [i + 1 for i, ln in enumerate(src) if "lhs = tl.load(lhs_ptrs" in ln]
    assert len(loads) >= 3, loads  # grouped B's first block and its loop, per-row B's loop

    def triage(kernel, line, tensor="torch.empty@workspace.py:109"):
        sig = {"tool": "shadow", "kind": "uninitialized-read", "kernel": kernel,
               "location": f"sglang/kernels/ops/lora/common/lora_b.py:{line}", "tensor": tensor}
        return sweep.category({"signature": sig, "case": {"target": "sglang_engine", "config": {}}}, _version())
    assert {triage("_grouped_lora_b_kernel", n) for n in loads} == {"v2-rank-overread"}
    assert triage("_grouped_lora_b_kernel", loads[0] - 5) == "untriaged"  # another line of the kernel
    assert triage("_grouped_lora_b_kernel", loads[0], "torch.empty@mem_pool.py:1") == "untriaged"  # the pool's
    assert triage("_sgemm_lora_b_kernel", loads[0]) == "untriaged"


def _cli(*args, env=None):
    import os
    return subprocess.run([sys.executable, "-m", "fuzzrunner", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, **(env or {})), timeout=3600)


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(FAULT_CASES))
def test_each_backend_fault_is_found_from_scratch_within_300_examples(tmp_path, fault):
    """The campaign finds the fault: a numeric or state finding whose case is silent without it (a finding of
    SGLang's own, G1 on torch_native with lm_head LoRA, has the same signature and would not count)."""
    if FAULT_CASES[fault][0]["backend"] not in _drivable():
        pytest.skip(f"SGLang {_version()} has no {FAULT_CASES[fault][0]['backend']} LoRA backend")
    r = _cli("fuzz", "--target", "sglang_engine", "--fault", fault, "--max-examples", "300", "--seed", "0",
             "--budget", "3000", "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"),
             env={"FUZZRUNNER_SGLANG_SEEDS": "0"})  # from scratch: G1 and G2's seeds would be found first
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    [run] = json.loads((tmp_path / "r.json").read_text())["runs"]
    found = [f["case"] for f in run["findings"]
             if f["signature"]["kind"] in ("numeric-mismatch", "state-violation")]
    assert run["replayed"] == [] and found, run["findings"]
    wrong = {"numeric-mismatch", "state-violation"}  # (triton_v2's by-design over-read may stay: shadow's)
    assert any(not {v[0] for v in vs} & wrong for vs in run_cases([[c["config"], c["ops"], []] for c in found])), found


def test_g2_standalone_repro_fails_on_the_release_and_passes_with_the_patch(tmp_path):
    """docs/findings/repro_sglang_g2_torch_native_graph_rank.py: SGLang's torch ops only (no engine import): exit 1
    on the set-up release while G2 is there, exit 0 on a copy of its torch ops with the patch applied."""
    import shutil
    site = import_module("fuzzrunner.targets.sglang_lora.site").site_dirs(_version())[0]
    ops = site / "sglang" / "srt" / "lora" / "torch_ops"
    if not (ops / "graph_lora_ops.py").exists():
        pytest.skip(f"SGLang {_version()} has no torch_native graph ops (0.5.12+)")
    repro = ROOT / "docs" / "findings" / "repro_sglang_g2_torch_native_graph_rank.py"
    run = subprocess.run([sys.executable, str(repro), str(site)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    copy = tmp_path / "sglang" / "srt" / "lora" / "torch_ops"
    shutil.copytree(ops, copy)
    patched = subprocess.run(["patch", "-p2", "-d", str(tmp_path), "-i",
                              str(ROOT / "docs" / "findings" / "sglang_g2_torch_native_graph_rank.patch")],
                             capture_output=True, text=True)
    if patched.returncode != 0:
        pytest.skip(f"the patch (against 0.5.23) does not apply to SGLang {_version()}: {patched.stdout[-300:]}")
    run = subprocess.run([sys.executable, str(repro), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_campaign_that_meets_g1_and_g2_keeps_both(tmp_path):
    """G1 (torch_native's lm_head LoRA, eager) and G2 (torch_native under decode graphs) are both a numeric mismatch
    of the step's logits; their signatures were one (``numeric-mismatch of step.logits``), so a campaign that met both
    kept the first and filed the other as the same bug. The label names the backend and graph mode
    (``runner.Session.path``): a campaign with both minimal cases among its corpus' cases keeps two findings, each
    triaged as its bug."""
    sweep = import_module("fuzzrunner.targets.sglang_lora.sweep")
    site = import_module("fuzzrunner.targets.sglang_lora.site").site_dirs(_version())[0] / "sglang" / "srt" / "lora"
    if not (site / "torch_ops" / "graph_lora_ops.py").exists() or \
            sweep.GRAPH_MAX_RANK not in (site / "torch_ops" / "graph_lora_ops.py").read_text():
        pytest.skip(f"SGLang {_version()} has not G2 (torch_native graph ops slicing by the max rank: 0.5.12+)")
    cases = tmp_path / "c" / "cases" / "sglang_engine"
    cases.mkdir(parents=True)
    for name in ("sglang_g1_torch_native_lm_head", "sglang_g2_torch_native_graph_rank_stacked"):
        (cases / f"{name}.json").write_text((FINDINGS / f"{name}.json").read_text())
    r = _cli("fuzz", "--target", "sglang_engine", "--max-examples", "1", "--seed", "0", "--budget", "900",
             "--no-shrink", "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"),
             env={"FUZZRUNNER_SGLANG_SEEDS": "0", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    [run] = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert len(run["replayed"]) == 2, run["replayed"]
    # each bug keeps its own numeric mismatch (before, G1's case was left with its base-rows finding only)
    numeric = {sweep.category(f, _version()): f["signature"]["tensor"] for f in run["findings"]
               if f["signature"]["kind"] == "numeric-mismatch"}
    assert numeric == {"torch-native-lm-head": "step.logits[torch_native, eager]",
                       "torch-native-graph-rank": "step.logits[torch_native, graph]"}, run["findings"]
