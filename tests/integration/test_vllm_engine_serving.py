"""``vllm_engine``'s serving layer (serving.py: vLLM's ``OpenAIServingModels`` over the runner) and prefix cache
(prefix_cache.py: vLLM's ``KVCacheManager`` as the scheduler drives it): minimal cases both ways for the planted
faults, the real bugs U1 (vllm-project/vllm#54839) and H1 (#42125 / #30931) where the release has them, and the
known labels (docs/vllm.md, "The serving layer and the prefix cache")."""

import pytest
from test_vllm_engine_target import CONFIG, req, step

from fuzzrunner.case import Case
from fuzzrunner.target import _import_object

AVAILABLE, REASON = _import_object("targets.vllm_lora:vllm_available")()
needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_engine: {REASON}")

PREFIX = {"enabled": True, "block_size": 2}


def load(name, adapter, inplace=False):
    return {"op": "serve_load", "name": name, "adapter": adapter, "inplace": inplace}


def unload(name):
    return {"op": "serve_unload", "name": name}


def served(rid, name, adapter, tokens=1, stem=None):
    r = dict(req(rid, adapter, tokens), model=name)
    return r if stem is None else dict(r, stem=stem)


def _run(ops, faults=(), **config):
    from fuzzrunner.execute import run_case
    from fuzzrunner.target import load_target
    case = Case("vllm_engine", {**CONFIG, "num_speculative_tokens": 0, **config}, tuple(ops), tuple(faults))
    return run_case(case, load_target("vllm_engine"))


def _flags():
    from targets.vllm_engine import known_flags, load_engine
    return known_flags(load_engine())


def _labels(violations, ops, **config):
    from targets.vllm_engine import known
    case = {"config": {**CONFIG, **config}, "ops": ops}
    return [known.known_bug({"violation": v.__dict__ if hasattr(v, "__dict__") else v, "case": case},
                            **{k: v for k, v in _flags().items() if k != "dummy_maps_nothing"}) for v in violations]


def _kinds(violations):
    return sorted({(v.kind, v.tensor) for v in violations})


# a load, requests of two served names and the base model, a same-name reload with other weights
RELOAD = [load("n1", 1), load("n2", 3),
          step(served("a", "n1", 1, 2), served("b", "n2", 3, 1), req("c", 0, 1), seed=1),
          unload("n1"), load("n1", 4),
          step(served("d", "n1", 4, 2), finish=["a", "b", "c"], seed=2)]


@needs_vllm
def test_serving_cases_are_silent_but_for_u1():
    """Served requests get their names' adapters' deltas (the reload's new weights): only U1 shows, at the unload."""
    got = _run(RELOAD, layers=["qkv_proj", "lm_head"], serving=True)
    assert _kinds(got) == [("state-violation", "serve_unload.resident")]
    assert set(_labels(got, RELOAD, serving=True)) == {"U1"}
    assert "still lists it" in got[0].message


@needs_vllm
@pytest.mark.slow
def test_a_request_for_an_unloaded_name_is_refused():
    ops = [load("n1", 1), unload("n1"), step(served("a", "n1", 1, 2), req("b", 0, 1))]
    got = _run(ops, layers=["qkv_proj"], serving=True)
    assert [v.tensor for v in got] == ["serve_unload.resident"]  # no serve.admit: the request was refused


@needs_vllm
@pytest.mark.slow
def test_serving_reuses_freed_id_is_found_and_silent_without_it():
    ops = [load("n1", 1), step(served("a", "n1", 1, 2), seed=1), unload("n1"), load("n2", 4),
           step(served("b", "n2", 4, 2), finish=["a"], seed=2)]
    clean = _run(ops, layers=["qkv_proj"], serving=True)
    assert _kinds(clean) == [("state-violation", "serve_unload.resident")]
    got = _run(ops, faults=("serving_reuses_freed_id",), layers=["qkv_proj"], serving=True)
    assert ("numeric-mismatch", "step.qkv_proj.adapter_rows") in _kinds(got)


SHARED = [step(req("a", 1, 2) | {"stem": 0}, req("b", 0, 2) | {"stem": 1}, seed=1),
          step(req("c", 2, 2) | {"stem": 0}, req("d", 1, 1) | {"stem": 0}, req("e", 0, 1) | {"stem": 1},
               finish=["a", "b"], seed=2)]


@needs_vllm
def test_prefix_cache_reuse_within_one_adapter_is_silent_and_the_hash_fault_is_found():
    assert _run(SHARED, layers=["qkv_proj"], prefix_caching=PREFIX) == []
    got = _run(SHARED, faults=("block_hash_without_adapter",), layers=["qkv_proj"], prefix_caching=PREFIX)
    assert _kinds(got) == [("state-violation", "step.prefix_cache")]
    assert "written under adapter 1" in got[0].message and _labels(got, SHARED, prefix_caching=PREFIX) == [None]


@needs_vllm
@pytest.mark.slow
def test_prefix_caching_off_reuses_nothing():
    assert _run(SHARED, faults=("block_hash_without_adapter",), layers=["qkv_proj"],
                prefix_caching=dict(PREFIX, enabled=False)) == []


SAME_NAME = [load("n1", 1), step(served("a", "n1", 1, 2, stem=0), seed=1),
             unload("n1"), load("n1", 4),
             step(served("b", "n1", 4, 2, stem=0), finish=["a"], seed=2)]


@needs_vllm
@pytest.mark.slow
def test_a_same_name_reload_reuses_the_old_blocks_where_the_hash_keys_the_name_alone():
    """#42125: H1 on a release that hashes the adapter's name alone (0.30 and older), silent where it hashes the
    path too (0.31 on)."""
    got = [v for v in _run(SAME_NAME, layers=["qkv_proj"], serving=True, prefix_caching=PREFIX)
           if v.tensor == "step.prefix_cache"]
    if _flags()["lora_hash_name_only"]:
        assert got and set(_labels(got, SAME_NAME, serving=True, prefix_caching=PREFIX)) == {"H1"}
    else:
        assert got == []


# a chunked prompt whose first chunk ends inside a block (block size 2, 17 tokens): its next chunk completes that block,
# which a later request of the same adapter and stem reuses whole
CHUNKED = [step(dict(req("a", 1, 1), prompt=4, stem=0), seed=1), step(req("a", 1, 3), seed=2),
           step(dict(req("b", 1, 2), prompt=6, stem=0), finish=["a"], seed=3)]


@needs_vllm
@pytest.mark.slow
def test_a_block_completed_by_a_later_chunk_is_recorded_whole():
    """Before, the oracle kept the writer of a block from the chunk that began it (its first tokens only) and called
    its reuse "over other tokens": a false violation of correct code."""
    assert _run(CHUNKED, layers=["qkv_proj"], prefix_caching=PREFIX) == []
