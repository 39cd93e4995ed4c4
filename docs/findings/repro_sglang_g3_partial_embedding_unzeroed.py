"""G3, standalone (SGLang only; CPU or GPU): an adapter with LoRA on ``embed_tokens`` but not ``lm_head`` (or on
``lm_head`` but not ``embed_tokens``) keeps, in the module it does not have, the weights of the adapter its slot
held before.

SGLang's own ``LoRAMemoryPool.load_lora_weight_to_buffer`` (called unbound on an object holding what it reads: the
embedding / lm_head buffers of two slots, the server's target modules ``embed_tokens, lm_head``) loads adapter
``first`` into slot 0, then adapter ``second`` into the same slot (an eviction), in both orders: lm_head-only then
embed_tokens-only, and embed_tokens-only then lm_head-only. After the second load, the buffers of the module the
second adapter does not have must be zero (the pool zeroes them "to avoid contamination from the residual weight
of the evicted adapters", as it does for the decoder layers' modules and for an adapter with neither module).

    python docs/findings/repro_sglang_g3_partial_embedding_unzeroed.py [SGLANG_SITE_DIR]   # the folder holding
                                                      # sglang/ (default: this checkout's .cache/sglang/0.5.23/site)

Exit 1 while the bug is there (the evicted adapter's lm_head or embed_tokens weights are still in the slot), 0 when
the slot holds only the new adapter's weights (a fixed tree: sglang_g3_partial_embedding_unzeroed.patch), 2 if it
could not run. SGLang is imported by ``sglang_site.py`` (beside this file).
"""

import sys
import types

import sglang_site

NAMES = {"embed_tokens": ("base_model.model.model.embed_tokens.lora_embedding_A",
                          "base_model.model.model.embed_tokens.lora_embedding_B"),
         "lm_head": ("base_model.model.lm_head.lora_A.weight", "base_model.model.lm_head.lora_B.weight")}


def main(site: str | None) -> int:
    print(sglang_site.import_sglang(site))
    import torch
    from sglang.srt.lora.mem_pool import LoRAMemoryPool

    hidden, vocab, rank = 8, 16, 4
    g = torch.Generator().manual_seed(0)
    shapes = {"embed_tokens": ((rank, vocab), (hidden, rank)), "lm_head": ((rank, hidden), (vocab, rank))}

    def adapter(module: str):
        (a_shape, b_shape), (a_name, b_name) = shapes[module], NAMES[module]
        return types.SimpleNamespace(
            config=types.SimpleNamespace(r=rank, lora_added_tokens_size=0), layers=[], added_tokens_embeddings={},
            embedding_layers={a_name: torch.randn(a_shape, generator=g), b_name: torch.randn(b_shape, generator=g)},
            pinned_embedding_layers={}, pinned_added_tokens_embeddings={})

    def pool():
        p = types.SimpleNamespace(
            num_layer=0, target_modules={"embed_tokens", "lm_head"}, strict_loading=False, A_buffer={}, B_buffer={},
            base_hf_config=types.SimpleNamespace(vocab_size=vocab), tp_size=1, lora_added_tokens_size=0,
            new_embeddings_buffer={}, pin_memory_available=False, enable_lora_overlap_loading=False,
            embedding_A_buffer={"embed_tokens": torch.zeros(2, rank, vocab)},
            embedding_B_buffer={"embed_tokens": torch.zeros(2, hidden, rank)},
            lm_head_A_buffer={"lm_head": torch.zeros(2, rank, hidden)},
            lm_head_B_buffer={"lm_head": torch.zeros(2, vocab, rank)})
        p._get_maybe_cached_weight_for_transfer = \
            lambda *a: LoRAMemoryPool._get_maybe_cached_weight_for_transfer(p, *a)
        return p

    lm_head_layer = types.SimpleNamespace(slice_lora_b_weights=lambda w: w)
    stale = []
    for first, second in (("lm_head", "embed_tokens"), ("embed_tokens", "lm_head")):
        p = pool()
        for uid, module in (("first", first), ("second", second)):  # the second evicts the first: slot 0
            LoRAMemoryPool.load_lora_weight_to_buffer(p, uid, 0, adapter(module), [], None, lm_head_layer)
        buffers = ((p.lm_head_A_buffer, p.lm_head_B_buffer) if first == "lm_head" else
                   (p.embedding_A_buffer, p.embedding_B_buffer))
        left = max(float(b[first][0].abs().max()) for b in buffers)
        print(f"{second}-only adapter loaded over the {first}-only one: the slot's {first} buffers hold up to "
              f"{left:.3g} (must be 0)")
        if left:
            stale.append(first)
    if stale:
        print(f"G3 present: the evicted adapter's {' and '.join(stale)} weights stay in the slot of an adapter "
              f"without them")
        return 1
    print("the slot holds only the new adapter's weights")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2:
        print(f"usage: {sys.argv[0]} [SGLANG_SITE_DIR]  (the folder holding sglang/)", file=sys.stderr)
        sys.exit(2)
    sys.exit(sglang_site.exit_code(main, sys.argv[1] if len(sys.argv) > 1 else None))
