"""Small runners written the way engines write theirs: vLLM V1/V2 input batches, SGLang-style
segment metadata, CUDA-graph padding, data-parallel idle steps, adapters added and removed."""

import numpy as np
import torch

from fuzzrunner.tracking import carry_over, track

from .harness import pair

U, S, OOB = "uninitialized-read", "stale-read", "out-of-bounds"


class V1InputBatch:
    """vLLM V1: persistent CPU token table filled through numpy, slot mapping on the device."""

    def __init__(self, max_reqs=4, max_tokens=16):
        self.token_ids_cpu = torch.zeros(max_reqs, max_tokens, dtype=torch.int32)
        self.token_ids_np = self.token_ids_cpu.numpy()
        self.num_tokens = np.zeros(max_reqs, dtype=np.int32)
        self.input_ids = track(torch.empty(max_tokens, dtype=torch.int32), "input_ids", per_step=True,
                               initialized=False)
        self.lora_mapping = track(torch.empty(max_tokens, dtype=torch.int64), "lora_mapping",
                                  per_step=True, initialized=False)

    def add_request(self, i, tokens):
        self.token_ids_np[i, :len(tokens)] = tokens
        self.num_tokens[i] = len(tokens)

    def prepare(self, reqs, pad_to, lora_of_req, fill_padding):
        flat = torch.cat([self.token_ids_cpu[i, :self.num_tokens[i]] for i in reqs])
        n = flat.numel()
        self.input_ids[:n] = flat
        self.lora_mapping[:n] = torch.cat([torch.full((int(self.num_tokens[i]),), lora_of_req[i]) for i in reqs])
        self.input_ids[n:pad_to] = 0
        if fill_padding:  # the bug: padded tokens keep whatever the mapping held
            self.lora_mapping[n:pad_to] = 0
        return n


@pair("style-vllm-v1", U, "lora_mapping")
def v1_cuda_graph_padding(ctx, bug):
    b = V1InputBatch()
    b.add_request(0, [1, 2, 3])
    ctx.step()
    b.prepare([0], 4, {0: 1}, fill_padding=not bug)
    table = torch.randn(3, 2)
    emb = torch.nn.functional.embedding(b.input_ids[:4].long(), torch.randn(8, 2))
    lora = table.index_select(0, b.lora_mapping[:4])  # BAD


@pair("style-vllm-v1", S, "input_ids")
def v1_stale_after_shrinking_batch(ctx, bug):
    b = V1InputBatch()
    b.add_request(0, [1, 2, 3])
    b.add_request(1, [4, 5])
    ctx.step()
    b.prepare([0, 1], 5, {0: 0, 1: 0}, fill_padding=True)
    ctx.step()
    n = b.prepare([1], 2, {1: 0}, fill_padding=True)
    used = 3 if bug else n  # the bug: last step's token count
    logits_in = b.input_ids[:used].float()  # BAD


class V2Runner:
    """vLLM V2 style: a dummy run must program the LoRA mapping (the real, merged fix)."""

    def __init__(self, max_tokens=8, program_dummy=True):
        self.index_mapping = track(torch.empty(max_tokens, dtype=torch.int64), "index_mapping",
                                   per_step=True, initialized=False)
        self.weights = track(torch.randn(3, 4), "lora_weights")
        self.program_dummy = program_dummy

    def execute(self, mapping):
        n = len(mapping)
        self.index_mapping[:n] = torch.tensor(mapping)
        return self.forward(n)

    def dummy_run(self, n):
        if self.program_dummy:
            self.index_mapping[:n].zero_()
        return self.forward(n)

    def forward(self, n):
        return self.weights[self.index_mapping[:n]]  # BAD:v2_dummy_run_without_mapping,v2_warmup_after_real_step


@pair("style-vllm-v2", U, "index_mapping")
def v2_dummy_run_without_mapping(ctx, bug):
    r = V2Runner(program_dummy=not bug)
    r.dummy_run(4)


@pair("style-vllm-v2", S, "index_mapping")
def v2_warmup_after_real_step(ctx, bug):
    r = V2Runner(program_dummy=not bug)
    r.execute([1, 2, 0, 1])
    ctx.step("capture")
    r.dummy_run(4)


@pair("style-sglang", U, "seg_indptr")
def sglang_segment_metadata(ctx, bug):
    max_bs = 4
    seg_lens = track(torch.empty(max_bs, dtype=torch.int32), "seg_lens", per_step=True, initialized=False)
    seg_indptr = track(torch.empty(max_bs + 1, dtype=torch.int32), "seg_indptr", per_step=True,
                       initialized=False)
    ctx.step()
    bs = 2
    seg_lens[:bs] = torch.tensor([3, 2], dtype=torch.int32)
    seg_indptr[0] = 0
    if not bug:
        seg_indptr[1:bs + 1] = torch.cumsum(seg_lens[:bs], 0)
    else:
        seg_indptr[1:bs] = torch.cumsum(seg_lens[:bs - 1], 0)
    starts = seg_indptr[:bs + 1].tolist()  # BAD


@pair("style-sglang", U, "weight_indices")
def sglang_weight_indices_for_padded_batch(ctx, bug):
    weight_indices = track(torch.empty(8, dtype=torch.int64), "weight_indices", per_step=True,
                           initialized=False)
    lora_ranks = track(torch.tensor([0, 4, 8]), "lora_ranks")
    ctx.step()
    bs, padded = 3, 4
    weight_indices[:bs] = torch.tensor([1, 2, 1])
    if not bug:
        weight_indices[bs:padded] = 0
    ranks = lora_ranks[weight_indices[:padded]]  # BAD


@pair("style-dp-idle", U, "dp_token_slots")
def dp_idle_step_runs_the_kernels(ctx, bug):
    slots = track(torch.empty(4, dtype=torch.int64), "dp_token_slots", per_step=True, initialized=False)
    table = torch.randn(3, 2)
    ctx.step("dp_idle")  # this rank has no requests but must run the collective forward
    if not bug:
        slots[:1] = 0
    out = table.index_select(0, slots[:1])  # BAD


@pair("style-dp-idle", S, "dp_positions")
def dp_idle_reuses_last_positions(ctx, bug):
    pos = track(torch.zeros(4, dtype=torch.int64), "dp_positions", per_step=True)
    ctx.step()
    pos[:3] = torch.arange(3)
    ctx.step("dp_idle")
    if not bug:
        pos[:1] = 0
    rope = pos[:1].float() * 0.5  # BAD


@pair("style-adapters", S, "slot_of_adapter")
def adapter_removed_between_steps(ctx, bug):
    slot_of_adapter = track(torch.full((4,), -1, dtype=torch.int64), "slot_of_adapter", per_step=True)
    ctx.step()
    slot_of_adapter[1] = 0
    ctx.step()
    if bug:
        carry_over(slot_of_adapter[:1])  # only entry 0 is still valid
    else:
        carry_over(slot_of_adapter)
    slot = slot_of_adapter[1].item()  # BAD


@pair("style-adapters", OOB, "lora_b")
def no_adapter_sentinel_reaches_weights(ctx, bug):
    lora_b = track(torch.randn(2, 3), "lora_b")
    mapping = torch.tensor([0, -1, 1])
    safe = mapping if bug else mapping.clamp(min=0)
    rows = torch.nn.functional.embedding(safe, lora_b)  # BAD


@pair("style-graphs", U, "{alloc}")
def graph_capture_sized_buffer(ctx, bug):
    capture_sizes = [1, 2, 4]
    num_tokens = 3
    padded = next(s for s in capture_sizes if s >= num_tokens)
    positions = torch.empty(max(capture_sizes), dtype=torch.int64)  # ALLOC
    positions[:num_tokens] = torch.arange(num_tokens)
    if not bug:
        positions[num_tokens:padded].fill_(0)
    cos = torch.cos(positions[:padded].float())  # BAD


@pair("style-graphs", U, "{alloc}")
def sampling_metadata_mask(ctx, bug):
    temps = torch.empty(4)  # ALLOC
    greedy = torch.tensor([True, False, True, False])
    temps[~greedy] = 0.7
    if not bug:
        temps[greedy] = 1.0
    scaled = torch.randn(4, 5) / temps[:, None]  # BAD
