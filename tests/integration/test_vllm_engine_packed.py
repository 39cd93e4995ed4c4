"""The Qwen3.5 linear-attention layout of ``vllm_engine``'s model (model.GDN ``qkvz``: ``in_proj_qkvz``, whose packed
names ``in_proj_qkv`` and ``in_proj_z`` span the output slices [q, k, v] and [z]) through vLLM's own LoRA layer and
packing: on a release with ``expand_packed_lora`` a full adapter is silent and the planted fault in it is caught; on
every release, what an adapter that targets one name only gives is the release's form of the known bugs Q1 - Q3
(known.py), or nothing. Needs a vLLM set up (``scripts/setup.sh`` sets up the pinned one)."""

import pytest
from test_vllm_engine_target import AVAILABLE, REASON, _found, _run, req, step

needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_engine: {REASON}")
QKVZ = {"layout": {"qkv": "merged", "gate_up": "fused", "gdn": "qkvz"}, "layers": ["in_proj_qkvz"],
        "num_speculative_tokens": 0}
STEP = [step(req("a", 1, 2), req("b", 0, 1), seed=1)]


def _adapter(*targets) -> dict:
    return {"adapters": {"1": {"rank": 4, "alpha": 8, "rslora": False, "targets": list(targets), "seed": 1}}}


def _expands() -> bool:
    _found()  # vLLM imported (its site on the path)
    from vllm.lora.layers import MergedColumnParallelLinearWithLoRA
    return hasattr(MergedColumnParallelLinearWithLoRA, "expand_packed_lora")


@needs_vllm
def test_a_full_adapter_of_the_packed_module_is_silent_and_the_planted_fault_is_caught():
    if not _expands():
        pytest.skip(f"vLLM {_found()['api'].version}: no expand_packed_lora (before 0.21: Q1)")
    full = _adapter("in_proj_qkv", "in_proj_z")
    assert _run(STEP, **QKVZ, **full) == []
    found = _run(STEP, ("packed_expansion_shares_first_lora_a",), **QKVZ, **full)
    assert [v.tensor for v in found] == ["step.in_proj_qkvz.adapter_rows"], found
    assert found[0].details["worst_index"][1] >= 32  # in z's slice (columns 32..47)


@needs_vllm
@pytest.mark.parametrize("targets", [("in_proj_qkv",), ("in_proj_z",)])
def test_a_partial_adapter_is_correct_or_the_releases_known_bug(targets):
    from dataclasses import asdict

    from test_vllm_engine_target import CONFIG

    from targets.vllm_engine import known, known_flags
    config = {**QKVZ, **_adapter(*targets)}
    found = _run(STEP, **config)
    version = tuple(int(x) for x in _found()["api"].version.split(".")[:2])
    want = ("Q1" if version < (0, 21) else "Q2" if version < (0, 29) else
            None if targets == ("in_proj_qkv",) else "Q3")  # by source: known.BUGS' ranges
    labels = [known.label({"violation": asdict(v), "case": {"config": {**CONFIG, **config}, "ops": STEP}},
                          **known_flags(_found())) for v in found]
    assert [(lb or {}).get("id") for lb in labels] == ([want] if want else []), found
