"""G1, standalone (SGLang only; CPU or GPU): ``--lora-backend torch_native`` applies lm_head LoRA with the whole
batch's routing to the LogitsProcessor's pruned rows.

SGLang's own ``TorchNativeLoRABackend.prepare_lora_batch`` for an extend batch of two requests, ``[a0 (2 tokens),
base model (1 token)]`` (the base model's slot has rank 0), then ``ParallelLMHeadWithLoRA.apply_lora`` (called
unbound on an object holding what it reads: the backend, the lm_head LoRA buffers, the offsets) on the two rows the
LogitsProcessor keeps, each request's last token. The base model's row must get no lm_head delta; a0's row its own.

    python docs/findings/repro_sglang_g1_torch_native_lm_head.py [SGLANG_SITE_DIR]   # the folder holding sglang/
                                                      # (default: this checkout's .cache/sglang/0.5.23/site)

Exit 1 while the bug is there (the base model's row gets a0's delta: the backend routes the pruned rows with the
batch's segments, 2 rows of a0's slot then 1 of the base's), 0 when each row gets its own request's delta (a fixed
tree: sglang_g1_torch_native_lm_head.patch), 2 if it could not run. SGLang is imported by ``sglang_site.py``
(beside this file).
"""

import sys
import types

import sglang_site


def main(site: str | None) -> int:
    print(sglang_site.import_sglang(site))
    import torch
    from sglang.srt.lora.backend.torch_backend import TorchNativeLoRABackend
    from sglang.srt.lora.layers import ParallelLMHeadWithLoRA
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    hidden, vocab, rank, scaling = 8, 16, 4, 2.0
    g = torch.Generator().manual_seed(0)
    a = torch.zeros(2, rank, hidden)     # lm_head_A_buffer: (slots, max rank, hidden); slot 1: the base model's
    b = torch.zeros(2, vocab, rank)      # lm_head_B_buffer: (slots, vocab, max rank)
    a[0], b[0] = torch.randn(rank, hidden, generator=g), torch.randn(vocab, rank, generator=g)
    backend = TorchNativeLoRABackend(2, torch.device("cpu"))
    batch = types.SimpleNamespace(forward_mode=ForwardMode.EXTEND, batch_size=2, extend_seq_lens_cpu=[2, 1],
                                  extend_seq_lens=torch.tensor([2, 1], dtype=torch.int32), return_logprob=False)
    backend.prepare_lora_batch(batch, [0, 1], [rank, 0], [scaling, 0.0], False)
    print(f"routing after prepare_lora_batch: segments {backend.batch_info.seg_lens_cpu.tolist()} of slots "
          f"{backend.batch_info.weight_indices_cpu.tolist()}; lm_head_batch_info: "
          f"{getattr(backend, 'lm_head_batch_info', None) and 'pruned'}")
    layer = types.SimpleNamespace(lora_backend=backend, lm_head_A_buffer=a, lm_head_B_buffer=b,
                                  output_offset=torch.tensor([0, vocab], dtype=torch.int32),
                                  output_offset_cpu=torch.tensor([0, vocab], dtype=torch.int32))
    layer._get_lm_head_batch_info = lambda n: ParallelLMHeadWithLoRA._get_lm_head_batch_info(layer, n)
    kept = torch.randn(2, hidden, generator=g)  # the LogitsProcessor's rows: a0's last token, the base's last token
    got = ParallelLMHeadWithLoRA.apply_lora(layer, torch.zeros(2, vocab), kept)
    want = torch.stack([scaling * (kept[0].double() @ a[0].double().T @ b[0].double().T), torch.zeros(vocab).double()])
    errors = (got.double() - want).abs().max(dim=1).values.tolist()
    print(f"lm_head LoRA delta, max error per kept row: a0's {errors[0]:.3g}, the base model's {errors[1]:.3g}")
    if max(errors) > 1e-3:
        print("G1 present: the pruned rows are routed with the whole batch's segments"
              + (" (the base model's row got a0's delta)" if errors[1] > 1e-3 else ""))
        return 1
    print("each kept row got its own request's delta")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2:
        print(f"usage: {sys.argv[0]} [SGLANG_SITE_DIR]  (the folder holding sglang/)", file=sys.stderr)
        sys.exit(2)
    sys.exit(sglang_site.exit_code(main, sys.argv[1] if len(sys.argv) > 1 else None))
