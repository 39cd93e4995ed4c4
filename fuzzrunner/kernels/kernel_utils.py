"""Device helpers shared by the LoRA kernels (vLLM's ``kernel_utils.py`` in miniature).

Loop bounds are ``tl.constexpr`` on purpose: Triton 3.6's interpreter breaks on
runtime-bounded ``range()`` loops under numpy >= 2.4, and a constexpr bound also
keeps the CPU path free of per-iteration scalar conversions.
"""

import triton
import triton.language as tl


@triton.jit
def mm_k(a_ptr, b_ptr, ak_stride, bk_stride, offset_k, K,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
         K_ITERS: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr,
         CAST_TYPE: tl.constexpr, b_dtype: tl.constexpr, DOT_F32: tl.constexpr = False):
    """acc[BLOCK_M, BLOCK_N] = sum over K of a[BLOCK_M, K] @ b[K, BLOCK_N].

    ``a_ptr``/``b_ptr`` point at the first K-block; each iteration steps
    ``BLOCK_K * SPLIT_K`` along K. Only a partial last block is masked, as in vLLM.
    ``DOT_F32`` upcasts the tiles before ``tl.dot``: Triton's interpreter multiplies
    bfloat16 bit patterns as integers in ``tl.dot`` (triton#11584, "not supported yet").
    """
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(K_ITERS):
        if EVEN_K:
            tiled_a = tl.load(a_ptr)
            tiled_b = tl.load(b_ptr)
        else:
            k_left = K - k * (BLOCK_K * SPLIT_K)
            tiled_a = tl.load(a_ptr, mask=offset_k[None, :] < k_left, other=0.0)
            tiled_b = tl.load(b_ptr, mask=offset_k[:, None] < k_left, other=0.0)
        if CAST_TYPE:
            tiled_a = tiled_a.to(b_dtype)
        if DOT_F32:
            tiled_a = tiled_a.to(tl.float32)
            tiled_b = tiled_b.to(tl.float32)
        # ieee: fp32 operands would otherwise go through TF32 on a GPU (~1e-3 relative error),
        # past the fp32 tolerance of torch_ref; it changes nothing for fp16/bf16 operands.
        accumulator += tl.dot(tiled_a, tiled_b, out_dtype=tl.float32, input_precision="ieee")
        a_ptr += BLOCK_K * SPLIT_K * ak_stride
        b_ptr += BLOCK_K * SPLIT_K * bk_stride
    return accumulator


@triton.jit
def lora_rows(token_indices_sorted_by_lora_ids, lora_token_start_loc, lora_idx,
              cta_m_offset, cta_m_len, BLOCK_M: tl.constexpr):
    """Token rows handled by one block of the ``lora_idx``-th active LoRA.

    Worked example: slots per token [1, -1, 1, 0] give sorted indices [1, 3, 0, 2],
    active ids [-1, 0, 1], counts [1, 1, 2], start_loc [0, 1, 2, 4]. The block for
    lora_idx 2 (slot 1) reads sorted[2:4] = rows 0 and 2. Lanes past ``cta_m_len``
    wrap (``% cta_m_len``) so every lane loads a valid entry; callers mask their
    stores with ``arange < cta_m_len``. Nothing checks ``row < M``: as in vLLM, a
    stale count or start makes the caller touch rows past M.
    """
    start = tl.load(lora_token_start_loc + lora_idx)
    offset_m = tl.arange(0, BLOCK_M) % cta_m_len
    return tl.load(token_indices_sorted_by_lora_ids + start + cta_m_offset + offset_m)
