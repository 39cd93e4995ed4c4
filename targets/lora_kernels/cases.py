"""Hypothesis strategies for lora_kernels cases."""

from __future__ import annotations

from hypothesis import strategies as st

from fuzzrunner.case import Case


@st.composite
def kernel_launch(draw, max_loras: int, max_num_tokens: int) -> dict:
    kernel = draw(st.sampled_from(["shrink", "expand", "bgmv"]))
    n = draw(st.integers(0, max_num_tokens))
    slot_values = st.integers(-1, max_loras - 1)
    slots = draw(st.lists(slot_values, min_size=n, max_size=n))
    pad = draw(st.integers(0, max_num_tokens - n))
    return {"op": "launch", "kernel": kernel, "slots": slots, "pad": pad, "seed": draw(st.integers(0, 7))}


@st.composite
def cases(draw, faults: tuple = (), *, max_ops: int = 4) -> Case:
    """Launch sequences over one persistent metadata: larger, then smaller, then all -1 batches."""
    max_loras = draw(st.integers(1, 4))
    max_num_tokens = draw(st.sampled_from([4, 16, 40]))
    config = {
        "max_loras": max_loras, "max_num_tokens": max_num_tokens,
        "hidden": draw(st.sampled_from([16, 32, 48])),
        "rank": draw(st.sampled_from([1, 4, 8, 16, 64])),
        "slices": draw(st.sampled_from([[16], [32, 16], [32, 16, 16]])),
        "dtype": "float32",
    }
    ops = draw(st.lists(kernel_launch(max_loras, max_num_tokens), min_size=1, max_size=max_ops))
    return Case("lora_kernels", config, tuple(ops), tuple(faults))
