"""``sglang_engine``'s MoE cases: SGLang's ``FusedMoEWithLoRA`` over Mixtral's sparse block (moe.py, docs/sglang.md).

Needs the pinned SGLang set up with its engine's imports (stamp ``engine-ok``) and a release that runs MoE LoRA
without compiled code (0.5.18+); skipped with the reason otherwise. Every case runs in one subprocess, as in
test_sglang_engine.py. A MoE step costs seconds in Triton's interpreter (SGLang's fused-MoE LoRA kernels launch
one program per 64-token block of the worst-case alignment): the fast tests run two short cases, the lifecycle
of every knob is ``slow``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_sglang_engine import run_cases

from fuzzrunner.target import _import_object

ROOT = Path(__file__).resolve().parents[2]
AVAILABLE, REASON = _import_object("targets.sglang_engine:engine_available")()
# One xdist group: under `--dist loadgroup` a module's ungrouped tests spread over both workers, each
# setting up the module's fixtures; grouped, `minimal` (the MoE cases in one SGLang subprocess) is set up once per CI run.
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=f"sglang_engine: {REASON}"),
              pytest.mark.xdist_group("sglang_engine_moe")]

ADAPTERS = {"a0": {"r": 4, "alpha": 8, "modules": ["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]},
            "a1": {"r": 2, "alpha": 2, "modules": ["gate_proj", "up_proj"]},
            "a2": {"r": 4, "alpha": 16, "modules": ["down_proj", "o_proj"]}}


def _cfg(backend="triton", moe=None, **kw):
    return {"backend": backend, "max_loras_per_batch": 2, "eviction_policy": "lru", "max_lora_rank": 4,
            "target_modules": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"], "graph_bs": 0, "chunk": 16,
            "dtype": "float32", "adapters": ADAPTERS,
            "moe": moe or {"experts": 64, "top_k": 2, "shared_outer": False, "virtual": False}} | kw


# a request without an adapter beside one with: the base rows exact, the adapter's rows its own experts' delta
MINIMAL = [{"op": "load", "name": "a0"}, {"op": "step", "reqs": [None, "a0"], "mode": "decode"}]
# every op: evictions (3 adapters, 2 slots), an adapter without down_proj and one without gate / up, an unload and a
# reload with new weights, extend and decode
LIFECYCLE = [{"op": "load", "name": "a0"}, {"op": "step", "reqs": [None, "a0"], "mode": "decode"},
             {"op": "load", "name": "a1"}, {"op": "step", "reqs": ["a1", "a1"], "mode": "extend", "lens": [2, 1]},
             {"op": "load", "name": "a2"}, {"op": "step", "reqs": ["a2", None], "mode": "decode"},
             {"op": "unload", "name": "a0"}, {"op": "load", "name": "a0", "v": 1},
             {"op": "step", "reqs": ["a0", None, "a0"], "mode": "decode"}]
# the knobs: per-expert and shared-outer adapters, virtual experts, top-k 1 and 2, 64 and 128 experts, each backend
KNOBS = [("triton", {"experts": 64, "top_k": 2, "shared_outer": False, "virtual": True}, "float16"),
         ("csgmv", {"experts": 128, "top_k": 1, "shared_outer": True, "virtual": False}, "float32"),
         ("torch_native", {"experts": 64, "top_k": 1, "shared_outer": False, "virtual": False}, "float32")]

def _run(cases: list, timeout: int) -> list:
    """test_sglang_engine's runner, interpreted wherever this session runs (the cases are CPU cases)."""
    return run_cases(cases, timeout, TRITON_INTERPRET="1")


@pytest.fixture(scope="module")
def minimal():
    return _run([[_cfg(), MINIMAL, ["moe_load_swaps_gate_up"]], [_cfg(), MINIMAL, []]], timeout=900)


def _unavailable(result):
    if result is None:  # a MoE case (or its fault) this release refuses: the target's details say why
        pytest.skip("MoE LoRA is not driven on this release")


def test_the_swapped_gate_up_fault_is_caught_on_the_adapters_expert_rows(minimal):
    _unavailable(minimal[0])
    labels = {(kind, msg.split(" differs")[0].split(": ", 1)[-1]) for kind, _, msg, *_ in minimal[0]}
    assert ("numeric-mismatch", "step.experts[triton, eager]") in labels, minimal[0]
    # the base rows are untouched by a fault of an adapter's slot
    assert not any("base-rows" in msg for _, _, msg, *_ in minimal[0]), minimal[0]


def test_the_minimal_moe_case_is_silent_on_sglangs_own_code(minimal):
    _unavailable(minimal[0])
    assert minimal[1] == [], minimal[1]


@pytest.mark.slow
def test_the_moe_lifecycle_of_every_knob_is_silent_on_sglangs_own_code():
    results = _run([[_cfg(b, moe, dtype=dtype), LIFECYCLE, []] for b, moe, dtype in KNOBS], timeout=3600)
    for (backend, moe, _), r in zip(KNOBS, results):
        _unavailable(r)
        assert r == [], (backend, moe, r)


@pytest.mark.slow
def test_the_moe_fault_is_found_from_scratch_within_300_examples(tmp_path):
    """From scratch: a fresh corpus, the seeds left out (docs/sglang.md's table has the count)."""
    r = subprocess.run([sys.executable, "-m", "fuzzrunner", "fuzz", "--target", "sglang_engine", "--fault",
                        "moe_load_swaps_gate_up", "--max-examples", "300", "--seed", "0", "--budget", "6000",
                        "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json")],
                       capture_output=True, text=True, timeout=7200, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), FUZZRUNNER_SGLANG_SEEDS="0"))
    if "MoE LoRA is not driven here" in r.stdout + r.stderr:
        pytest.skip("this release's MoE LoRA is not driven (moe.py)")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    [run] = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert run["replayed"] == [] and run["findings"], run["replayed"]


# A float16 (virtual-experts) case as the clean 0.5.23 campaign found it: an adapter at alpha / r = 8 on the attention
# and the experts. Before the block's input was normalized (moe.INPUT_SCALE) its experts returned inf (silu(gate) * up
# ~1e7 in float64, past float16): a numeric-mismatch of step.experts on SGLang's own code.
LOUD = {"a0": {"r": 2, "alpha": 16, "modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj"]}}
LOUD_OPS = [{"op": "load", "name": "a0"}, {"op": "step", "reqs": ["a0", None, "a0"], "mode": "extend", "lens": [2, 1, 2]}]


def test_a_float16_moe_case_with_a_loud_adapter_stays_finite_and_silent():
    [r] = _run([[_cfg(adapters=LOUD, dtype="float16", max_lora_rank=2,
                      moe={"experts": 64, "top_k": 2, "shared_outer": False, "virtual": True}), LOUD_OPS, []]],
               timeout=900)
    _unavailable(r)
    assert r == [], r
