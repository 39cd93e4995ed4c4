"""Float64 references for the LoRA kernels, written from the per-token slots, not the metadata.

The references take the *slot of each token* and ignore the sorted metadata on
purpose: a kernel that trusts broken metadata then disagrees with them.
"""

import torch

# (rtol, atol) per dtype of the values compared, after accumulating in fp32.
TOLERANCES = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (6e-2, 6e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES[dtype]


def shrink_ref(inputs, lora_a_weights, slots, scaling):
    """[S, M, R] float64: row m of slice s is scale * x[m] @ A[s, slot[m]]^T, 0 for slot -1."""
    S, _, R, _ = lora_a_weights.shape
    x = inputs.double()
    out = torch.zeros(S, x.size(0), R, dtype=torch.float64)
    for m, slot in enumerate(slots.tolist()):
        if slot >= 0:
            out[:, m] = scaling * (lora_a_weights[:, slot].double() @ x[m])
    return out


def expand_ref(inputs, lora_b_weights, output, slots, slice_n, slice_offsets, add_inputs=True):
    """[M, sum N_s] float64 after adding x[s, m] @ B[s, slot[m]]^T into each slice's columns.

    Without ``add_inputs`` a row with a slot is overwritten; a row with slot -1 is left
    as it was either way (the kernel never stores to it).
    """
    out = output.double().clone()
    for m, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        for s, (n, off) in enumerate(zip(slice_n.tolist(), slice_offsets.tolist())):
            if not add_inputs:
                out[m, off:off + n] = 0
            out[m, off:off + n] += lora_b_weights[s, slot, :n].double() @ inputs[s, m].double()
    return out


def bgmv_ref(inputs, lora_a_weights, lora_b_weights, output, slots, scaling):
    out = output.double().clone()
    for m, slot in enumerate(slots.tolist()):
        if slot >= 0:
            t = scaling * (lora_a_weights[slot].double() @ inputs[m].double())
            out[m] += lora_b_weights[slot].double() @ t
    return out
