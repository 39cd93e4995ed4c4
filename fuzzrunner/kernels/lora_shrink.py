"""``lora_shrink``: out[s, m, :] = scale * x[m, :] @ A[s, slot(m)]^T (vLLM's lora_shrink_op)."""

import torch
import triton
import triton.language as tl

from .kernel_utils import lora_rows, mm_k
from .launch_config import KernelConfig


@triton.jit
def _lora_shrink_kernel(
        input_ptr, lora_ptr, out_ptr, M, N, K,
        token_indices_sorted_by_lora_ids, num_tokens_per_lora, lora_token_start_loc,
        lora_ids, scaling,
        input_d0_stride, input_d1_stride,
        lora_s_stride, lora_d0_stride, lora_d1_stride, lora_d2_stride,
        output_d0_stride, output_d1_stride, output_d2_stride,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        SPLIT_K: tl.constexpr, K_ITERS: tl.constexpr, EVEN_K: tl.constexpr, DOT_F32: tl.constexpr):
    cta_n_num = tl.cdiv(N, BLOCK_N)
    pid_sk_m_n = tl.program_id(axis=0)
    pid_sk = pid_sk_m_n % SPLIT_K
    pid_m = (pid_sk_m_n // SPLIT_K) // cta_n_num
    pid_n = (pid_sk_m_n // SPLIT_K) % cta_n_num
    slice_id = tl.program_id(axis=1)
    lora_idx = tl.program_id(axis=2)

    lora_id = tl.load(lora_ids + lora_idx)
    if lora_id == -1:  # only exactly -1 exits; any other value indexes the weights
        return
    lora_m_size = tl.load(num_tokens_per_lora + lora_idx)
    cta_m_offset = pid_m * BLOCK_M
    if cta_m_offset >= lora_m_size:
        return
    cta_m_len = min(BLOCK_M, lora_m_size - cta_m_offset)
    ram = lora_rows(token_indices_sorted_by_lora_ids, lora_token_start_loc, lora_idx,
                    cta_m_offset, cta_m_len, BLOCK_M)

    offset_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rbn = offset_n % N
    offset_k = pid_sk * BLOCK_K + tl.arange(0, BLOCK_K)
    a_ptr = input_ptr + ram[:, None] * input_d0_stride + offset_k[None, :] * input_d1_stride
    b_ptr = (lora_ptr + slice_id * lora_s_stride + lora_id * lora_d0_stride
             + rbn[None, :] * lora_d1_stride + offset_k[:, None] * lora_d2_stride)
    acc = mm_k(a_ptr, b_ptr, input_d1_stride, lora_d2_stride, offset_k, K,
               BLOCK_M, BLOCK_N, BLOCK_K, K_ITERS, SPLIT_K, EVEN_K, False, tl.float32, DOT_F32)
    acc *= scaling

    offset_cm = tl.arange(0, BLOCK_M)
    c_ptr = (out_ptr + slice_id * output_d0_stride + ram[:, None] * output_d1_stride
             + offset_n[None, :] * output_d2_stride)
    c_mask = (offset_cm[:, None] < cta_m_len) & (offset_n[None, :] < N)
    if SPLIT_K == 1:
        tl.store(c_ptr, acc, mask=c_mask)
    else:
        tl.atomic_add(c_ptr, acc, mask=c_mask)


def lora_shrink(
        inputs: torch.Tensor,                            # [M, K], fp16/bf16/fp32
        lora_a_weights: torch.Tensor,                    # [S, max_loras, R, K]
        output_tensor: torch.Tensor,                     # [S, M, R], fp32
        token_lora_mapping: torch.Tensor,                # [M] int32, slot or -1
        token_indices_sorted_by_lora_ids: torch.Tensor,  # [M] int32
        num_tokens_per_lora: torch.Tensor,               # [max_loras + 1] int32
        lora_token_start_loc: torch.Tensor,              # [max_loras + 2] int32
        lora_ids: torch.Tensor,                          # [max_loras + 1] int32, sorted slots
        no_lora_flag_cpu: torch.Tensor,                  # [1] bool, host
        num_active_loras: int,                           # grid z, decided on the host
        scaling: float,
        config: KernelConfig) -> None:
    if no_lora_flag_cpu.item():  # before zero_(), as in vLLM: output untouched
        return
    M, K = inputs.shape
    S, _, R, K_w = lora_a_weights.shape
    assert inputs.is_contiguous() and lora_a_weights.is_contiguous()
    assert output_tensor.dtype == torch.float32 and output_tensor.is_contiguous()
    assert K_w == K and output_tensor.shape == (S, M, R), (output_tensor.shape, (S, M, R))
    assert token_lora_mapping.size(0) == M == token_indices_sorted_by_lora_ids.size(0)
    assert lora_ids.size(0) == num_tokens_per_lora.size(0)
    assert lora_token_start_loc.size(0) == lora_ids.size(0) + 1
    output_tensor.zero_()  # split-K accumulates with atomics
    if M == 0 or num_active_loras == 0:
        return  # a zero-size grid: nothing to launch
    c = config.shrink(M, R, K)
    grid = (c.split_k * triton.cdiv(M, c.block_m) * triton.cdiv(R, c.block_n), S, num_active_loras)
    _lora_shrink_kernel[grid](
        inputs, lora_a_weights, output_tensor, M, R, K,
        token_indices_sorted_by_lora_ids, num_tokens_per_lora, lora_token_start_loc,
        lora_ids, scaling,
        inputs.stride(0), inputs.stride(1),
        *lora_a_weights.stride(),
        *output_tensor.stride(),
        BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, SPLIT_K=c.split_k,
        K_ITERS=triton.cdiv(K, c.block_k * c.split_k), EVEN_K=K % (c.block_k * c.split_k) == 0,
        DOT_F32=config.interpreted and inputs.dtype == torch.bfloat16,
        num_warps=c.num_warps, num_stages=c.num_stages)
