"""``vllm_engine`` V2-runner cases with CUDA graphs: the V2 model runner's ``capture_model`` LoRA path and its graph
choice (``ModelCudaGraphManager``, ``get_lora_capture_cases``, ``create_lora_capture_hook``,
``get_num_active_loras_for_dispatch``, ``dispatch_cg_and_sync_dp``) as shipped (targets/vllm_engine/v2_graphs.py,
docs/vllm.md).

V1 (docs/findings/v1-specialize-active-lora.md) shows through the V2 runner's own capture and dispatch (and not with
its fix); the planted ``graph_dispatch_ignores_lora`` has a minimal case its oracle catches and that is silent
without it; fault-free churn is silent on every graph mode while graphs are replayed. Before 0.24 (no LoRA capture
cases: graphs keyed on the batch's shape, captured with no LoRA mapping) the same component runs in that release's
shape and shows W1 (docs/findings/README.md). Skipped where vLLM is not set up, or where a test needs what the
release lacks, with the reason.
"""

import pytest
from test_vllm_engine_target import AVAILABLE, REASON, ROOT, _found, _kinds, _run, req, step

needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_engine: {REASON}")
GRAPHS = {"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4, 8], "cudagraph_specialize_lora": True,
          "num_speculative_tokens": 0, "layers": ["qkv_proj"]}
# two adapters and a base-model request: the dispatch counts 2 adapters (key 2, or max_loras + 1 = 3)
MIXED = [step(req("a", 1, 2), req("b", 0, 2), req("c", 3, 2), seed=1)]


def _needs_v2_graphs():
    if _found().get("v2_graphs") is None:
        from targets.vllm_engine.v2_graphs import MISSING
        pytest.skip(f"vLLM {_found()['api'].version}'s V2 runner graph manager is not driven here: {MISSING}")


def _needs_lora_cases():
    """V1's capture-hook forms and the LoRA dispatch fault need the V2 runner's LoRA capture cases (0.24 on)."""
    _needs_v2_graphs()
    if _found()["v2_graphs"].shape != "lora_cases":
        pytest.skip(f"vLLM {_found()['api'].version}'s V2 runner keys its graphs without the LoRA (no LoRA capture "
                    f"cases before 0.24, #35536): W1's tests below cover it")


@pytest.fixture
def dispatched(monkeypatch):
    """The graph modes the V2 runner's dispatch chose, step by step, in the cases run after it (on the session
    class of the target as loaded: ``fuzzrunner.targets.vllm_engine``)."""
    import importlib

    from fuzzrunner.target import load_target
    runner = load_target("vllm_engine").run.func.__module__
    V2GraphSession = importlib.import_module(runner.rsplit(".", 1)[0] + ".v2_graphs").V2GraphSession
    modes: list[str] = []
    original = V2GraphSession.dispatch

    def record(self, reqs, new):
        desc, n = original(self, reqs, new)
        modes.append(desc.cg_mode.name)
        return desc, n
    monkeypatch.setattr(V2GraphSession, "dispatch", record)
    return modes


@needs_vllm
@pytest.mark.parametrize("mode", ["PIECEWISE", "FULL", "FULL_AND_PIECEWISE"])
def test_v1_shows_through_the_v2_runners_own_capture_and_dispatch(mode, dispatched):
    """With ``specialize_active_lora`` the key-2 graph was captured by the hook with two adapters and no base-model
    request (grid z = 2); the mixed batch replays it and c's rows get no LoRA, while its eager run is right."""
    _needs_lora_cases()
    found = _run(MIXED, specialize_active_lora=True, **dict(GRAPHS, cudagraph_mode=mode))
    assert _kinds(found) == {("numeric-mismatch", "replay.qkv_proj.adapter_rows")}, found
    assert dispatched == [mode.replace("FULL_AND_PIECEWISE", "PIECEWISE")]  # a prefill batch: the mixed graphs
    assert _run(MIXED, specialize_active_lora=False, **dict(GRAPHS, cudagraph_mode=mode)) == []


@needs_vllm
def test_v1s_max_loras_plus_one_form_without_cudagraph_specialize_lora():
    """``cudagraph_specialize_lora`` off: capture cases [0, max_loras + 1]; the key-3 graph's dummy batch cycles ids
    1, 2 only (the mixin's ``include_no_lora`` branch adds no no-LoRA id), so its grid z is 2 where the kernels'
    counts round up to a power of two: the mixed batch loses c again."""
    _needs_lora_cases()
    config = dict(GRAPHS, cudagraph_specialize_lora=False)
    found = _run(MIXED, specialize_active_lora=True, **config)
    assert _kinds(found) == {("numeric-mismatch", "replay.qkv_proj.adapter_rows")}, found
    from targets.vllm_engine.known import known_bug
    assert all(known_bug({"violation": {"kind": v.kind, "tensor": v.tensor, "message": v.message,
                                        "details": v.details}, "case": {"config": {**config,
                                                                                  "specialize_active_lora": True},
                                                                        "ops": MIXED}},
                         logits_mapped_per_row=True) == "V1" for v in found)


@needs_vllm
def test_the_planted_dispatch_fault_is_caught_and_its_case_is_silent_without_it():
    """``graph_dispatch_ignores_lora``: a LoRA batch of 3 tokens replays the no-LoRA graph of 4 (flag frozen on)."""
    _needs_lora_cases()
    ops = [step(req("a", 1, 3), seed=1)]
    found = _run(ops, ("graph_dispatch_ignores_lora",), **GRAPHS)
    assert ("numeric-mismatch", "replay.qkv_proj.adapter_rows") in _kinds(found), found
    assert not any(t.startswith("step.") for _, t in _kinds(found)), found  # the eager run is right
    assert _run(ops, **GRAPHS) == []
    cls = _found()["v2_graphs"].module.CudaGraphManager
    assert "dispatch" in cls.__dict__ and cls.__dict__["dispatch"].__module__.startswith("vllm.")  # restored


# fault-free churn: adapters added, pinned, removed, requests finished and going on with drafts (uniform decode
# batches: the FULL decode graphs), prefills (mixed graphs), a dummy run, a batch past the largest graph (eager)
CHURN = [{"op": "add", "id": 3},
         step(req("a", 1, 3), req("b", 0, 2), req("c", 3, 1), seed=1),
         {"op": "pin", "id": 1},
         step(req("a", 1, 2, drafts=1), req("c", 3, 2, drafts=1), finish=["b"], seed=2),
         step(req("a", 1, 2, drafts=1), req("c", 3, 2, drafts=1), req("d", 0, 2), seed=3),
         {"op": "dummy_run", "num_tokens": 2, "reqs": 1, "seed": 0},
         step(req("a", 1, 2, drafts=1), req("e", 4, 4), req("f", 0, 2), finish=["c", "d"], seed=4),
         {"op": "remove", "id": 4},
         step(req("g", 0, 1), req("h", 2, 1), finish=["a", "e", "f"], seed=5)]


@needs_vllm
@pytest.mark.parametrize("mode", ["FULL", "FULL_AND_PIECEWISE"])  # FULL mixed graphs; FULL decode + PIECEWISE
def test_v2_graph_churn_is_silent_on_every_graph_mode(mode, dispatched):
    _needs_v2_graphs()
    layers = ["qkv_proj", "o_proj", "embed_tokens", "lm_head"]
    if not _found()["make_lora_inputs_takes_num_logits"]:  # up to 0.33: one lm_head row per request (S1)
        layers.remove("lm_head")
    config = dict(GRAPHS, cudagraph_mode=mode, num_speculative_tokens=1, cudagraph_capture_sizes=[2, 4, 8],
                  layers=layers)
    ops = CHURN
    if _found()["api"].protocol == "no_mapping":  # 0.15 - 0.21: nothing maps a dummy run (V0, known), nor the rows
        ops = [op for op in CHURN if op["op"] != "dummy_run"]  # past a step's tokens, which a graph's padding rows
        config["layers"] = [n for n in layers if n != "embed_tokens"]  # gather through: V0's embedding read
    assert _run(ops, **config) == []
    assert any(m != "NONE" for m in dispatched), dispatched  # graphs were replayed, not only eager steps
    if mode == "FULL_AND_PIECEWISE":
        assert dispatched[1] == "FULL" and "PIECEWISE" in dispatched, dispatched  # the uniform decode step (a and c, 1 + 1 draft each): decode graph


@needs_vllm
@pytest.mark.slow  # a fresh process importing a patched vLLM: ~1 min on 2 cores
def test_v1_through_the_v2_runner_is_silent_with_its_fix(tmp_path):
    """The same case, replayed by a process that imports vLLM with docs/findings/v1_specialize_active_lora.patch."""
    import os
    import subprocess
    import sys

    from test_vllm_engine_target import CONFIG

    from fuzzrunner.case import Case
    _needs_lora_cases()
    path = tmp_path / "v1_v2_runner.json"
    path.write_text(Case("vllm_engine", {**CONFIG, **GRAPHS, "specialize_active_lora": True}, tuple(MIXED), ()).to_json())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FUZZRUNNER_VLLM_VERSION": _found()["api"].version,
           "FUZZRUNNER_VLLM_PATCH": str(ROOT / "docs" / "findings" / "v1_specialize_active_lora.patch")}
    r = subprocess.run([sys.executable, "-m", "fuzzrunner", "replay", str(path)], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=900)
    assert r.returncode == 0 and r.stdout.strip().endswith(": ok"), r.stdout + r.stderr


@needs_vllm
@pytest.mark.slow  # a 300-example campaign: ~5-10 min on the shared 2-core machine
def test_the_planted_dispatch_fault_is_found_from_scratch(tmp_path, capsys):
    """Seed 0, at most 300 examples: a finding that is not a known vLLM bug (V1 is told apart: known.py)."""
    from test_vllm_engine_target import _fuzz, triaged
    _needs_lora_cases()
    code, out, run = _fuzz(tmp_path, capsys, "--fault", "graph_dispatch_ignores_lora", "--max-examples", "300",
                           "--seed", "0", "--no-shrink", "--budget", "3000")
    new = [f for f in run["findings"] if not triaged(f)]
    assert code == 1 and new, out
    assert new[0]["violation"]["tensor"].startswith("replay."), new[0]


@needs_vllm
@pytest.mark.parametrize("mode", ["FULL", "PIECEWISE"])
def test_w1_graphs_before_0_24_replay_the_grid_the_start_up_left(mode, dispatched):
    """W1 (0.15 - 0.23, fixed by #35536 in 0.24): with ``specialize_active_lora`` every graph froze the grid z the
    start-up left in the kernel metadata, 0 where the start-up maps nothing (0.15 - 0.21) and 1 where its profile
    run forces it (0.22 - 0.23): the mixed batch's replay loses adapters, its eager run is right; a batch of one
    adapter alone replays right only under z = 1. Without ``specialize_active_lora`` the grid is max_loras + 1:
    silent. Where the release's PIECEWISE graphs are keyed without the LoRA (0.21) none is replayed: silent."""
    _needs_v2_graphs()
    g = _found()["v2_graphs"]
    if g.shape == "lora_cases":
        pytest.skip(f"vLLM {_found()['api'].version} captures its graphs per LoRA count (#35536): V1's tests above")
    config = dict(GRAPHS, cudagraph_mode=mode)
    replayed = mode == "FULL" or g.piecewise_keyed_on_lora
    found = _run(MIXED, specialize_active_lora=True, **config)
    assert _kinds(found) == ({("numeric-mismatch", "replay.qkv_proj.adapter_rows")} if replayed else set()), found
    assert dispatched == [mode]  # the mixed graph was chosen (replayed or, 0.21 PIECEWISE, run eagerly)
    assert _run(MIXED, specialize_active_lora=False, **config) == []
    alone = _run([step(req("a", 1, 3), seed=1)], specialize_active_lora=True, **config)
    zero = _found()["api"].protocol == "no_mapping"  # grid z = 0: no program, no LoRA at all
    assert _kinds(alone) == ({("numeric-mismatch", "replay.qkv_proj.adapter_rows")} if replayed and zero
                             else set()), alone
