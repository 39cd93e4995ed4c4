"""The ``vllm_lora`` target: vLLM's own LoRA metadata and kernels (docs/vllm.md).

Needs a vLLM set up (``scripts/setup.sh`` sets up the pinned one; ``FUZZRUNNER_VLLM_VERSION`` picks
another); without one, every test but the first is skipped with the reason and the fix.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuzzrunner import _env
from fuzzrunner.case import Case
from fuzzrunner.target import _import_object

ROOT = Path(__file__).resolve().parents[2]
vllm_available = _import_object("targets.vllm_lora:vllm_available")
AVAILABLE, REASON = vllm_available()
needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_lora: {REASON}")
cpu_only = pytest.mark.skipif(_env.device_type() != "cpu", reason="planted out-of-bounds reads: the CPU's "
                                                                    "shadow oracle masks them; on a GPU see scripts/gpu_vllm.sh")
CONFIG = {"max_loras": 2, "max_num_tokens": 8, "hidden": 16, "rank": 8, "slices": [16, 16], "vocab": 32,
          "dtype": "float16", "specialize_active_lora": False, "entry": "private", "capture_sizes": [4, 8]}


def _cli(*args, env=None, timeout=900):
    e = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "fuzzrunner", *args], capture_output=True, text=True,
                          env=e, cwd=ROOT, timeout=timeout)


def _run(ops, faults=(), **config):
    from fuzzrunner.execute import run_case
    from fuzzrunner.target import load_target
    case = Case("vllm_lora", {**CONFIG, **config}, tuple(ops), tuple(faults))
    return run_case(case, load_target("vllm_lora"))


def _sigs(violations):
    return {(v.kind, v.tensor, v.kernel) for v in violations}


@pytest.mark.skipif(AVAILABLE and not os.environ.get("FUZZRUNNER_VLLM_SITE") and
                    _import_object("targets.vllm_lora.site:candidate_paths")() == [],
                    reason="a vllm is installed in this environment")
def test_without_vllm_the_target_is_unavailable_and_says_how_to_install():
    r = _cli("fuzz", "--target", "vllm_lora", "--max-examples", "1",
             env={"FUZZRUNNER_VLLM_VERSION": "0.0.0", "FUZZRUNNER_VLLM_SITE": ""})
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "scripts/vllm_setup.sh 0.0.0" in lines[0], r.stderr


@needs_vllm
@cpu_only
def test_a_never_prepared_dummy_run_reads_uninitialized_active_lora_ids_in_vllms_kernel():
    v = _run([{"op": "dummy_run", "num_tokens": 2, "kind": "no_lora", "reqs": 1, "pad": 0}],
             faults=["dummy_run_skips_prepare"])
    assert ("uninitialized-read", "token_mapping_meta.active_lora_ids", "_lora_shrink_kernel") in _sigs(v)
    shadow = [x for x in v if x.kind == "uninitialized-read"]
    assert all("vllm/lora/ops/triton_ops/" in x.location for x in shadow), [x.location for x in shadow]


@needs_vllm
@cpu_only
def test_a_stale_launch_prepared_for_more_tokens_reads_x_out_of_bounds():
    v = _run([{"op": "step", "slots": [0, 1, 1, 0, -1, 1], "pad": 0, "sampled": [], "seed": 0},
              {"op": "dummy_run", "num_tokens": 2, "kind": "no_lora", "reqs": 1, "pad": 0}],
             faults=["dummy_run_skips_prepare"])
    kinds = {(x.kind, x.tensor) for x in v}
    assert ("out-of-bounds", "x") in kinds, kinds
    assert any(x.tool == "invariants" and "outside [0, M=2)" in x.message for x in v)


@needs_vllm
@pytest.mark.parametrize("entry", ["public", "private", "punica"])
def test_fault_free_ops_are_silent(entry):
    ops = [{"op": "dummy_run", "num_tokens": 3, "kind": "no_lora", "reqs": 1, "pad": 1},
           {"op": "step", "slots": [1, 1, -1, 0, 0], "pad": 3, "sampled": [0, 2, 4], "seed": 1},
           {"op": "set_adapter", "slot": 1, "seed": 2},
           {"op": "step", "slots": [-1, 1], "pad": 0, "sampled": [1], "seed": 2},
           {"op": "step", "slots": [-1, -1, -1], "pad": 1, "sampled": [0], "seed": 3},
           {"op": "dummy_run", "num_tokens": 5, "kind": "warmup", "reqs": 2, "pad": 0, "k": 3},
           {"op": "capture", "size": 4, "key": 3, "reqs": 2},
           {"op": "replay", "slots": [0, -1, 1], "seed": 4}]
    assert _run(ops, entry=entry) == []


@needs_vllm
def test_cli_short_campaign_finds_the_planted_dummy_run_fault(tmp_path):
    r = _cli("fuzz", "--target", "vllm_lora", "--fault", "dummy_run_skips_prepare", "--max-examples", "8",
             "--seed", "0", "--no-shrink", "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    found = json.loads((tmp_path / "r.json").read_text())["runs"][0]["findings"]
    assert any(f["signature"]["tensor"] == "token_mapping_meta.active_lora_ids" for f in found), found


def _triaged(finding) -> bool:
    """docs/vllm.md, finding V1: a replay through a graph captured for key k (no no-LoRA tokens in vLLM's
    dummy mapping) with no-LoRA tokens in the real batch; only with specialize_active_lora."""
    case = finding["case"]
    op = case["ops"][finding["violation"]["details"]["op_index"]]
    return case["config"]["specialize_active_lora"] and op["op"] == "replay" and -1 in op["slots"]


@needs_vllm
def test_cli_short_fault_free_campaign_finds_nothing_untriaged(tmp_path):
    r = _cli("fuzz", "--target", "vllm_lora", "--max-examples", "25", "--seed", "1", "--no-shrink",
             "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"))
    assert r.returncode in (0, 1), r.stdout + r.stderr
    found = json.loads((tmp_path / "r.json").read_text())["runs"][0]["findings"]
    assert [f["signature"] for f in found if not _triaged(f)] == []


@needs_vllm
def test_a_capture_that_skips_the_dummy_mapping_freezes_no_lora_and_replays_without_adapters():
    ops = [{"op": "step", "slots": [-1, -1], "pad": 0, "sampled": [], "seed": 0},
           {"op": "capture", "size": 4, "key": 3, "reqs": 1},
           {"op": "replay", "slots": [0, 1], "seed": 1}]
    assert _run(ops) == []
    v = _run(ops, faults=["capture_skips_mapping"])
    assert [(x.kind, x.tensor) for x in v] == [("numeric-mismatch", "replay.y")]


@needs_vllm
def test_the_gpu_trees_platform_plugin_answers_the_no_gpu_platform_when_the_gpu_is_hidden():
    """A CPU triage worker on the GPU machine hides the GPU, but vLLM's own probe still counts it
    through NVML and would import its CUDA platform (not in the carried tree): the plugin answers
    the platform vLLM picks on a machine with no GPU (seen on the H200: every CPU triage of a
    vllm_lora finding failed with "No module named 'vllm.platforms.cuda'")."""
    code = ("import importlib, os\n"
            "from targets.vllm_lora import site, platform\n"
            "site.prepare_environment('cpu'); site.activate(site.candidate_paths())\n"
            "name = platform.plugin()\n"
            "module, cls = name.rsplit('.', 1)\n"
            "from vllm.platforms import current_platform\n"
            "print(name, getattr(importlib.import_module(module), cls) is type(current_platform))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES=""))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-2:] == ["vllm.platforms.interface.UnspecifiedPlatform", "True"]
