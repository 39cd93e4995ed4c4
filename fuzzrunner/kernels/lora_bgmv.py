"""``lora_bgmv``: per-token LoRA, y[m] += scale * (x[m] @ A[slot(m)]^T) @ B[slot(m)]^T.

The punica "batched gather matrix-vector" op, and the shape of vLLM's fused-MoE
LoRA path with ``naive_block_assignment``: each block reads the slot of its tokens
straight from ``token_lora_mapping`` instead of going through the sorted metadata.
That is what makes it the consumer that reads a stale mapping when a caller ignores
the no-LoRA flag (vLLM's ``add_lora_fused_moe`` before ``test_add_lora_fused_moe_early_exit``).
Rows whose slot is -1 are masked; any other slot indexes the weights unchecked.
"""

import torch
import triton
import triton.language as tl

from .launch_config import KernelConfig


@triton.jit
def _lora_bgmv_kernel(
        input_ptr, lora_a_ptr, lora_b_ptr, out_ptr, token_lora_mapping,
        M, K, R, N, scaling,
        input_d0_stride, lora_a_d0_stride, lora_a_d1_stride,
        lora_b_d0_stride, lora_b_d1_stride, output_d0_stride,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        BLOCK_R: tl.constexpr):
    offset_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offset_m < M
    lora_id = tl.load(token_lora_mapping + offset_m, mask=m_mask, other=-1)
    row_mask = m_mask & (lora_id != -1)
    if tl.max(row_mask.to(tl.int32), axis=0) == 0:
        return
    offset_k = tl.arange(0, BLOCK_K)
    offset_r = tl.arange(0, BLOCK_R)
    offset_n = tl.arange(0, BLOCK_N)
    x = tl.load(input_ptr + offset_m[:, None] * input_d0_stride + offset_k[None, :],
                mask=row_mask[:, None] & (offset_k[None, :] < K), other=0.0).to(tl.float32)
    a = tl.load(lora_a_ptr + lora_id[:, None, None] * lora_a_d0_stride
                + offset_r[None, :, None] * lora_a_d1_stride + offset_k[None, None, :],
                mask=row_mask[:, None, None] & (offset_r[None, :, None] < R) & (offset_k[None, None, :] < K),
                other=0.0).to(tl.float32)
    t = tl.sum(a * x[:, None, :], axis=2) * scaling                     # [BLOCK_M, BLOCK_R]
    b = tl.load(lora_b_ptr + lora_id[:, None, None] * lora_b_d0_stride
                + offset_n[None, :, None] * lora_b_d1_stride + offset_r[None, None, :],
                mask=row_mask[:, None, None] & (offset_n[None, :, None] < N) & (offset_r[None, None, :] < R),
                other=0.0).to(tl.float32)
    y = tl.sum(b * t[:, None, :], axis=2)                               # [BLOCK_M, BLOCK_N]
    c_ptr = out_ptr + offset_m[:, None] * output_d0_stride + offset_n[None, :]
    c_mask = row_mask[:, None] & (offset_n[None, :] < N)
    y += tl.load(c_ptr, mask=c_mask, other=0.0).to(tl.float32)
    tl.store(c_ptr, y.to(out_ptr.dtype.element_ty), mask=c_mask)


def lora_bgmv(
        inputs: torch.Tensor,              # [M, K]
        lora_a_weights: torch.Tensor,      # [max_loras, R, K]
        lora_b_weights: torch.Tensor,      # [max_loras, N, R]
        output_tensor: torch.Tensor,       # [M, N], updated in place
        token_lora_mapping: torch.Tensor,  # [M] int32, slot or -1
        scaling: float,
        config: KernelConfig) -> None:
    """No host-side no-LoRA check here: deciding whether to launch is the caller's job."""
    M, K = inputs.shape
    _, R, K_a = lora_a_weights.shape
    _, N, R_b = lora_b_weights.shape
    assert K_a == K and R_b == R and output_tensor.shape == (M, N)
    assert token_lora_mapping.size(0) == M
    assert inputs.is_contiguous() and output_tensor.is_contiguous()
    assert lora_a_weights.is_contiguous() and lora_b_weights.is_contiguous()
    if M == 0:
        return
    c = config.bgmv(M, N, R, K)
    # One block spans all of K and N (the kernel has no loop over them): refuse, not truncate.
    assert K <= c.block_k and N <= c.block_n, (
        f"lora_bgmv needs K={K} <= BLOCK_K={c.block_k} and N={N} <= BLOCK_N={c.block_n}")
    block_r = max(16, triton.next_power_of_2(R))
    _lora_bgmv_kernel[(triton.cdiv(M, c.block_m),)](
        inputs, lora_a_weights, lora_b_weights, output_tensor, token_lora_mapping,
        M, K, R, N, scaling,
        inputs.stride(0), lora_a_weights.stride(0), lora_a_weights.stride(1),
        lora_b_weights.stride(0), lora_b_weights.stride(1), output_tensor.stride(0),
        BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, BLOCK_R=block_r,
        num_warps=c.num_warps)
