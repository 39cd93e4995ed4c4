"""``lora_expand``: y[m, off_s:off_s+N_s] (+)= x[s, m, :] @ B[s, slot(m)]^T (vLLM's lora_expand_op).

Slices may have unequal widths (a GQA qkv projection): B is stored padded to the
widest slice, and per-slice widths and output offsets come as device tensors, as
vLLM's ``SAME_STRIDE=False`` path does.
"""

import torch
import triton
import triton.language as tl

from .kernel_utils import lora_rows, mm_k
from .launch_config import KernelConfig


@triton.jit
def _lora_expand_kernel(
        input_ptr, lora_ptr, out_ptr, M, MAX_N, K,
        token_indices_sorted_by_lora_ids, num_tokens_per_lora, lora_token_start_loc,
        lora_ids, slice_n_ptr, slice_offset_ptr,
        input_d0_stride, input_d1_stride, input_d2_stride,
        lora_s_stride, lora_d0_stride, lora_d1_stride, lora_d2_stride,
        output_d0_stride, output_d1_stride,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        K_ITERS: tl.constexpr, EVEN_K: tl.constexpr, ADD_INPUTS: tl.constexpr,
        CAST_TYPE: tl.constexpr, DOT_F32: tl.constexpr):
    cta_n_num = tl.cdiv(MAX_N, BLOCK_N)
    pid_m = tl.program_id(axis=0) // cta_n_num
    pid_n = tl.program_id(axis=0) % cta_n_num
    slice_id = tl.program_id(axis=1)
    lora_idx = tl.program_id(axis=2)

    lora_id = tl.load(lora_ids + lora_idx)
    if lora_id == -1:
        return
    lora_m_size = tl.load(num_tokens_per_lora + lora_idx)
    cta_m_offset = pid_m * BLOCK_M
    if cta_m_offset >= lora_m_size:
        return
    curr_n = tl.load(slice_n_ptr + slice_id)
    if pid_n * BLOCK_N >= curr_n:
        return
    cta_m_len = min(BLOCK_M, lora_m_size - cta_m_offset)
    ram = lora_rows(token_indices_sorted_by_lora_ids, lora_token_start_loc, lora_idx,
                    cta_m_offset, cta_m_len, BLOCK_M)

    offset_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rbn = offset_n % curr_n
    offset_k = tl.arange(0, BLOCK_K)
    a_ptr = (input_ptr + slice_id * input_d0_stride + ram[:, None] * input_d1_stride
             + offset_k[None, :] * input_d2_stride)
    b_ptr = (lora_ptr + slice_id * lora_s_stride + lora_id * lora_d0_stride
             + rbn[None, :] * lora_d1_stride + offset_k[:, None] * lora_d2_stride)
    acc = mm_k(a_ptr, b_ptr, input_d2_stride, lora_d2_stride, offset_k, K,
               BLOCK_M, BLOCK_N, BLOCK_K, K_ITERS, 1, EVEN_K, CAST_TYPE,
               lora_ptr.dtype.element_ty, DOT_F32)

    slice_offset = tl.load(slice_offset_ptr + slice_id)
    offset_cm = tl.arange(0, BLOCK_M)
    c_ptr = out_ptr + ram[:, None] * output_d0_stride + (slice_offset + offset_n)[None, :] * output_d1_stride
    c_mask = (offset_cm[:, None] < cta_m_len) & (offset_n[None, :] < curr_n)
    if ADD_INPUTS:
        acc += tl.load(c_ptr, mask=c_mask, other=0.0).to(tl.float32)
    tl.store(c_ptr, acc.to(out_ptr.dtype.element_ty), mask=c_mask)


def lora_expand(
        inputs: torch.Tensor,                            # [S, M, R], fp32 (shrink output) or model dtype
        lora_b_weights: torch.Tensor,                    # [S, max_loras, MAX_N, R]
        output_tensor: torch.Tensor,                     # [M, sum(N_s)]
        token_lora_mapping: torch.Tensor,                # [M] int32
        token_indices_sorted_by_lora_ids: torch.Tensor,  # [M] int32
        num_tokens_per_lora: torch.Tensor,               # [max_loras + 1] int32
        lora_token_start_loc: torch.Tensor,              # [max_loras + 2] int32
        lora_ids: torch.Tensor,                          # [max_loras + 1] int32
        no_lora_flag_cpu: torch.Tensor,                  # [1] bool, host
        num_active_loras: int,
        slice_n: torch.Tensor,                           # [S] int32, width of each slice
        slice_offsets: torch.Tensor,                     # [S] int32, column where each slice starts
        config: KernelConfig,
        add_inputs: bool = True) -> None:
    if no_lora_flag_cpu.item():
        return
    S, M, R = inputs.shape
    S_w, _, MAX_N, R_w = lora_b_weights.shape
    assert inputs.is_contiguous() and lora_b_weights.is_contiguous() and output_tensor.is_contiguous()
    assert S_w == S and R_w == R and output_tensor.size(0) == M
    assert slice_n.numel() == S == slice_offsets.numel()
    assert token_lora_mapping.size(0) == M == token_indices_sorted_by_lora_ids.size(0)
    assert lora_ids.size(0) == num_tokens_per_lora.size(0)
    assert lora_token_start_loc.size(0) == lora_ids.size(0) + 1
    if M == 0 or num_active_loras == 0:
        return
    c = config.expand(M, MAX_N, R)
    grid = (triton.cdiv(M, c.block_m) * triton.cdiv(MAX_N, c.block_n), S, num_active_loras)
    _lora_expand_kernel[grid](
        inputs, lora_b_weights, output_tensor, M, MAX_N, R,
        token_indices_sorted_by_lora_ids, num_tokens_per_lora, lora_token_start_loc,
        lora_ids, slice_n, slice_offsets,
        *inputs.stride(), *lora_b_weights.stride(), *output_tensor.stride(),
        BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k,
        K_ITERS=triton.cdiv(R, c.block_k), EVEN_K=R % c.block_k == 0,
        ADD_INPUTS=add_inputs,
        CAST_TYPE=inputs.dtype == torch.float32 and lora_b_weights.dtype != torch.float32,
        DOT_F32=config.interpreted and lora_b_weights.dtype == torch.bfloat16,
        num_warps=c.num_warps, num_stages=c.num_stages)
