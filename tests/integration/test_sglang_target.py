"""The ``sglang_lora`` target: SGLang's own LoRA backends and kernels (docs/sglang.md).

Needs an SGLang release set up (``scripts/setup.sh`` sets up the pinned one; ``FUZZRUNNER_SGLANG_VERSION``
picks another); without one, every test but the first is skipped with the reason and the fix.
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
AVAILABLE, REASON = _import_object("targets.sglang_lora:sglang_available")()
needs_sglang = pytest.mark.skipif(not AVAILABLE, reason=f"sglang_lora: {REASON}")
cpu_only = pytest.mark.skipif(_env.device_type() != "cpu", reason="the CPU's shadow oracle names the reads; "
                                                                    "on a GPU see scripts/gpu_acceptance.py")
CONFIG = {"backend": "triton", "max_loras": 3, "rank": 8, "hidden": 16, "out": 16, "dtype": "float16",
          "graph_sizes": [2, 4], "overlap": False, "chunk": 16}
# every op kind, fault-free: eager decode and extend, no-adapter and mixed batches, capture, padded replays
# with several adapters, idle, unload and reload (the adapter lands in another slot)
FAULT_FREE_OPS = [{"op": "step", "mode": "decode", "uids": [1, 1, 0, 2], "seed": 1},
                  {"op": "step", "mode": "extend", "uids": [2, 0], "lens": [3, 17], "seed": 2},
                  {"op": "capture", "bs": 4},
                  {"op": "replay", "uids": [1, 2, 0], "seed": 3},
                  {"op": "idle"},
                  {"op": "unload", "uid": 1},
                  {"op": "step", "mode": "decode", "uids": [3, 0], "seed": 4},
                  {"op": "capture", "bs": 2},
                  {"op": "replay", "uids": [1], "seed": 5},
                  {"op": "replay", "uids": [2, 3, 1], "seed": 6}]
CAPTURE_REPLAY = [{"op": "capture", "bs": 4}, {"op": "replay", "uids": [1, 2, 0], "seed": 3}]


def _cli(*args, env=None, timeout=900):
    e = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "fuzzrunner", *args], capture_output=True, text=True,
                          env=e, cwd=ROOT, timeout=timeout)


def _run(ops, faults=(), **config):
    from fuzzrunner.execute import run_case
    from fuzzrunner.target import load_target
    case = Case("sglang_lora", {**CONFIG, **config}, tuple(ops), tuple(faults))
    return run_case(case, load_target("sglang_lora"))


def _sigs(violations):
    return {(v.kind, v.tensor, v.kernel) for v in violations}


def test_without_sglang_the_target_is_unavailable_and_says_how_to_set_it_up():
    r = _cli("fuzz", "--target", "sglang_lora", "--max-examples", "1",
             env={"FUZZRUNNER_SGLANG_VERSION": "0.0.0", "FUZZRUNNER_SGLANG_SITE": ""})
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "scripts/sglang_setup.sh 0.0.0" in lines[0], r.stderr


@needs_sglang
def test_loading_sglang_leaves_no_stub_that_another_engine_would_take_for_a_real_package():
    """SGLang's import-only stubs (torchvision) leave sys.modules once it is loaded: vLLM's PunicaWrapperGPU,
    loaded later in the same process, failed on find_spec("torchvision") ("__spec__ is None")."""
    import importlib.util
    _run(FAULT_FREE_OPS[:1])
    for name in ("torchvision", "torchvision.io"):
        module = sys.modules.get(name)
        assert module is None or module.__spec__ is not None, name
    importlib.util.find_spec("torchvision")  # raises on a stub


@needs_sglang
@pytest.mark.parametrize("backend,overlap", [("triton", False), ("csgmv", True)])
def test_fault_free_ops_are_silent(backend, overlap):
    assert _run(FAULT_FREE_OPS, backend=backend, overlap=overlap) == []


@needs_sglang
@cpu_only
def test_an_empty_graph_seg_indptr_is_read_uninitialized_by_sglangs_segment_gemm_on_the_forward_thread():
    v = _run(CAPTURE_REPLAY, faults=["graph_seg_indptr_uninitialized"], overlap=True)
    reads = [x for x in v if x.kind == "uninitialized-read" and x.tensor == "cuda_graph_batch_info.seg_indptr"]
    assert reads and all(x.kernel == "_sgemm_lora_a_kernel" and "sglang/" in x.location for x in reads), v
    assert "seg_indptr[0]" in reads[0].message and "forward_thread" in reads[0].message, reads[0].message


@needs_sglang
def test_a_csgmv_grid_frozen_at_the_captures_segment_count_drops_the_other_adapters():
    assert _run(CAPTURE_REPLAY, backend="csgmv") == []
    v = _run(CAPTURE_REPLAY, faults=["csgmv_grid_frozen_at_capture"], backend="csgmv")
    assert ("numeric-mismatch", "replay.y", "replay") in _sigs(v), v


@needs_sglang
def test_a_capture_without_its_lora_batch_replays_without_adapters_or_reads_the_last_eager_batch():
    v = _run(CAPTURE_REPLAY, faults=["capture_without_lora_batch"])
    assert ("numeric-mismatch", "replay.y", "replay") in _sigs(v), v
    after_step = [{"op": "step", "mode": "decode", "uids": [1, 2], "seed": 1}, {"op": "capture", "bs": 4},
                  {"op": "replay", "uids": [2, 1, 0], "seed": 3}]
    v = _run(after_step, faults=["capture_without_lora_batch"])
    assert any(x.kind == "stale-read" and x.tensor.split(".")[0] in ("batch_info", "sgemm_batch_info") for x in v), v


@needs_sglang
def test_cli_short_fault_free_campaign_on_the_pinned_release_finds_nothing(tmp_path):
    r = _cli("fuzz", "--target", "sglang_lora", "--max-examples", "15", "--seed", "1", "--no-shrink",
             "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["findings"] == 0, report["summary"]


@needs_sglang
@cpu_only
@pytest.mark.slow
@pytest.mark.parametrize("fault", ["graph_seg_indptr_uninitialized", "csgmv_grid_frozen_at_capture",
                                   "capture_without_lora_batch"])
def test_each_planted_fault_is_found_from_scratch_within_300_examples(tmp_path, fault):
    r = _cli("fuzz", "--target", "sglang_lora", "--fault", fault, "--max-examples", "300", "--seed", "0",
             "--budget", "1800", "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"),
             env={"FUZZRUNNER_SGLANG_SEEDS": "0"})  # from scratch: not the seeds' minimal cases
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    [run] = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert run["replayed"] == [] and run["findings"], run["replayed"]


@needs_sglang
@pytest.mark.slow
def test_a_300_example_fault_free_campaign_finds_nothing(tmp_path):
    r = _cli("fuzz", "--target", "sglang_lora", "--max-examples", "300", "--seed", "0", "--budget", "1800",
             "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


# Two cases of one worker process that no SGLang process holds together: one hidden size, two max ranks (the
# GPU campaign's 6ba7e08800c6, scripts/gpu/cases/). SGLang's cached_triton_kernel keys the csgmv shrink on
# (K, NUM_SLICES, BLOCK_M) only; a server has one max_lora_rank, a fuzz worker many.
RANK_8_THEN_16 = [({"backend": "csgmv", "max_loras": 2, "rank": rank, "hidden": 16, "out": 32, "graph_sizes": [1],
                    "overlap": True}, [{"op": "step", "mode": "decode", "uids": [2], "seed": 2}]) for rank in (8, 16)]


class _SGLangCudaKernelCache:
    """SGLang's ``CachedKernel`` (``sglang/srt/utils/common.py``, installed by ``cached_triton_kernel`` on CUDA
    only) re-stated for the interpreter: the first launch of a key fixes the kernel's other constexprs, as its
    compiled kernel does. Same ``kernel_cache`` and ``_clear_cache`` as the release's class."""

    def __init__(self, fn, key_fn, constexprs):
        self.fn, self.key_fn, self.constexprs = fn, key_fn, constexprs
        self.kernel_cache: dict = {}

    def _clear_cache(self):
        self.kernel_cache.clear()

    def __getitem__(self, grid):
        def launcher(*args, **kwargs):
            frozen = self.kernel_cache.setdefault(self.key_fn(args, kwargs), {k: kwargs[k] for k in self.constexprs})
            return self.fn[grid](*args, **{**kwargs, **frozen})
        return launcher


@needs_sglang
@cpu_only
def test_each_case_starts_without_the_compiled_kernels_of_the_workers_last_case(monkeypatch):
    """On a GPU, a rank-16 case after a rank-8 case of the same hidden size in one worker ran the rank-8 shrink
    kernel (garbage rows, an illegal address): each case must start with SGLang's kernel caches empty."""
    from targets.sglang_lora import load_api
    module = load_api().kernels["chunked_sgmv_shrink"]
    cache = _SGLangCudaKernelCache(module._chunked_lora_shrink_kernel,
                                   lambda _, kw: (kw["K"], kw["NUM_SLICES"], kw["BLOCK_M"]), ("N", "BLOCK_N", "BLOCK_K"))
    monkeypatch.setattr(module, "_chunked_lora_shrink_kernel", cache)
    for config, ops in RANK_8_THEN_16:
        assert _run(ops, **config) == [], config
        assert [k["N"] for k in cache.kernel_cache.values()] == [config["rank"]]  # the case's own kernel ran


@needs_sglang
def test_two_ranks_of_one_hidden_size_in_one_process_are_silent():
    """The same pair compiled, where SGLang's own kernel cache is on (cuda: scripts/gpu/csgmv_check.py)."""
    for config, ops in RANK_8_THEN_16:
        assert _run(ops, **config) == [], config
