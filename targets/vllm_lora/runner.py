"""Run one ``vllm_lora`` case: a small model runner's use of vLLM's own LoRA metadata and ops.

The runner holds what vLLM's runners hold across steps: one token ``LoRAKernelMeta`` and one
prompt ``LoRAKernelMeta`` (vLLM's, made by its ``make``, or the ones inside its
``PunicaWrapperGPU``), stacked adapter weights, and the host decisions captured CUDA graphs froze.
Each op programs the metadata as vLLM's V2 model runner does (with the punica entry through the
wrapper's ``update_metadata``, i.e. ``convert_mapping`` of a ``LoRAMapping`` of adapter ids), then runs a
LoRA linear layer (shrink into a float32 buffer, expand added into ``y``), for sampled rows the logits
layer, and where the case asks: the embedding layer (``VocabParallelEmbeddingWithLoRA``'s gather through
``_embeddings_indices``, then ``add_lora_embedding``; punica entry) and a fused-MoE LoRA layer
(``fused_moe_lora``, naive block assignment). The embedding and MoE layers run on the mapped rows only:
both read per-row metadata, and the padding rows' entries are what an earlier batch left (in vLLM, the
start-up profile run maps every row; those rows are discarded).

The float64 reference uses only each row's intended slot and the weights, never vLLM's metadata.
"""

from __future__ import annotations

import torch

from fuzzrunner import tracking
from fuzzrunner.errors import InvalidCase

from . import dummy
from .api import opaque_op
from .cases import captured_counts

META_FIELDS = (("token_lora_mapping", False), ("token_indices_sorted_by_lora_ids", False),
               ("active_lora_ids", False), ("num_tokens_per_lora", True), ("lora_token_start_loc", True))
SCALE = 0.5

FAULTS = {
    "dummy_run_skips_prepare":
        "dummy runs launch the LoRA ops on the metadata as it stands, never calling prepare_tensors, whatever "
        "the release's runner does: vLLM's V2 model runner in 0.17-0.21 ('FIXME(woosuk): Fix warmup for "
        "LoRA'), fixed by #43139 in 0.22.",
    "dummy_run_skips_embedding_indices":
        "dummy runs program the LoRA kernel metadata (prepare_tensors) but not the punica wrapper's "
        "_embeddings_indices, which VocabParallelEmbeddingWithLoRA gathers with: torch.empty at start-up, "
        "the previous step's after it. The read behind #43139's crash (the V2 runner of 0.17-0.21 programmed "
        "nothing on a dummy run; the traceback ends in llama's embed_input_ids, a device-side assert of the "
        "embedding's index check); fixed in 0.22 by a zero mapping through set_adapter_mapping.",
    "fused_moe_ignores_no_lora_flag":
        "the fused-MoE LoRA layer launches fused_moe_lora without checking no_lora_flag_cpu, as "
        "PunicaWrapperGPU.add_lora_fused_moe did in 0.22: after an all-no-LoRA prepare_tensors (which returns "
        "early) token_lora_mapping is stale, so the naive kernel applies the previous batch's adapters (or "
        "reads torch.empty at start-up); vLLM's test_add_lora_fused_moe_early_exit guards the later fix.",
    "capture_skips_mapping":
        "a capture freezes the host decisions (no-LoRA flag, grid z) of whatever metadata the previous op "
        "left, programming no dummy mapping: vLLM 0.22-0.23's capture_model bypassing execute_model, "
        "replaced by the #35536 LoRA capture hook in 0.24.",
}


def naive_moe(tokens: int, top_k: int, experts: int, max_loras: int) -> bool:
    """vLLM 0.33's ``add_lora_w13`` (no expert map, not fully sharded): naive block assignment while
    ``tokens * top_k * SPARSITY_FACTOR(8) <= local_num_experts * max_loras``; else the sorted path."""
    return tokens * top_k * 8 <= experts * max_loras


def check(case) -> dict:
    c = case.config
    need = ("max_loras", "max_num_tokens", "hidden", "rank", "slices", "vocab", "dtype",
            "specialize_active_lora", "entry", "capture_sizes")
    missing = [k for k in need if k not in c]
    if missing:
        raise InvalidCase(f"vllm_lora config is missing {', '.join(missing)}.")
    if c["dtype"] not in ("float16", "bfloat16"):
        raise InvalidCase(f"dtype {c['dtype']!r}: vLLM's LoRA ops take float16 or bfloat16.")
    if c["entry"] not in ("public", "private", "punica"):
        raise InvalidCase(f"entry {c['entry']!r}: one of public (torch.ops.vllm.lora_*), private (_lora_*), punica.")
    L, T = c["max_loras"], c["max_num_tokens"]
    for i, op in enumerate(case.ops):
        kind = op.get("op")
        if kind not in ("step", "dummy_run", "set_adapter", "capture", "replay"):
            raise InvalidCase(f"op {i}: unknown op {kind!r}; vllm_lora ops are step, dummy_run, set_adapter, "
                              f"capture, replay.")
        slots = op.get("slots", [])
        if any(not -1 <= s < L for s in slots):
            raise InvalidCase(f"op {i}: slots must be in [-1, max_loras={L}).")
        if max(len(slots) + op.get("pad", 0), op.get("num_tokens", 0) + op.get("pad", 0), op.get("size", 0)) > T:
            raise InvalidCase(f"op {i}: more rows than max_num_tokens={T}.")
        if kind == "set_adapter" and not 0 <= op.get("slot", -1) < L:
            raise InvalidCase(f"op {i}: set_adapter's slot must be in [0, max_loras={L}).")
        if any(not 0 <= r < len(slots) for r in op.get("sampled", [])):
            raise InvalidCase(f"op {i}: sampled rows must be scheduled tokens, in [0, {len(slots)}).")
        if kind == "dummy_run" and op.get("num_tokens", 0) < 1:
            raise InvalidCase(f"op {i}: a dummy run has at least one token.")
    _check_extras(c)
    return c


def _check_extras(c: dict) -> None:
    """The optional parts of a config: adapter ids per slot, the embedding layer, the MoE layer."""
    L = c["max_loras"]
    ids = c.get("lora_index_to_id")
    if ids is not None and (len(ids) != L or len(set(ids)) != L or any(not isinstance(i, int) or i < 1 for i in ids)):
        raise InvalidCase(f"lora_index_to_id must be {L} distinct adapter ids >= 1 (one per slot).")
    moe = c.get("moe")
    if moe:
        need = ("experts", "top_k", "n", "slices", "rank", "mul_routed_weight", "enabled")
        if any(k not in moe for k in need):
            raise InvalidCase(f"moe needs {', '.join(need)}.")
        if len(moe["enabled"]) != L or moe["top_k"] > moe["experts"] or moe["rank"] > 64:
            raise InvalidCase(f"moe: enabled has one flag per slot ({L}), top_k <= experts, rank <= 64.")


class Session:
    def __init__(self, case, ctx, api):
        self.c = c = check(case)
        self.ctx, self.api, self.faults = ctx, api, set(case.faults)
        self.device = torch.device(ctx.device)
        self.dtype = getattr(torch, c["dtype"])
        self.L, self.T, self.R, self.H = c["max_loras"], c["max_num_tokens"], c["rank"], c["hidden"]
        self.specialize = bool(c["specialize_active_lora"]) and api.has_grid_control
        self.entry = c["entry"] if (c["entry"] != "punica" or api.punica_cls) else "public"
        counts = captured_counts(self.L, self.specialize)
        api.clear_pointer_caches()  # as vLLM's tests do: a reused address must not hit an old entry
        if self.entry == "punica":
            self.punica = api.make_punica(self.L, self.T, self.T, self.device, self.specialize)
            self.token_meta, self.prompt_meta = self.punica.token_mapping_meta, self.punica.prompt_mapping_meta
        else:
            self.punica = None
            self.token_meta = api.make_meta(self.L, self.T, self.device, counts)
            self.prompt_meta = api.make_meta(self.L, self.T, self.device, counts)
        for name, meta in (("token_mapping_meta", self.token_meta), ("prompt_mapping_meta", self.prompt_meta)):
            for f, initialized in META_FIELDS:
                ctx.track(getattr(meta, f), f"{name}.{f}", per_step=True, initialized=initialized)
        # the punica entry programs through update_metadata (convert_mapping), as LoRAModelManager does
        self.via_mapping = self.punica is not None and api.mapping_cls is not None
        self.ids = list(c.get("lora_index_to_id") or range(1, self.L + 1))  # slot -> adapter id
        self.emb = bool(c.get("embedding")) and self.via_mapping
        self.moe = c.get("moe") if api.has_moe else None
        if self.punica is not None:
            ctx.track(self.punica._embeddings_indices, "punica._embeddings_indices", per_step=True,
                      initialized=False)
        self.graphs: dict[int, tuple] = {}
        self._weights(case)

    # -- weights -------------------------------------------------------------------------
    def _weights(self, case) -> None:
        g = torch.Generator().manual_seed(sum(self.c["slices"]) * 7 + self.R)
        L, R, H = self.L, self.R, self.H

        def w(*shape):
            return (0.25 * torch.randn(*shape, generator=g)).to(self.device, self.dtype)
        # vLLM's stacked layout: [max_loras, 1, out, in] per slice
        self.lora_a = [self.ctx.track(w(L, 1, R, H), f"lora_a[{s}]") for s in range(len(self.c["slices"]))]
        self.lora_b = [self.ctx.track(w(L, 1, n, R), f"lora_b[{s}]") for s, n in enumerate(self.c["slices"])]
        self.logits_a = self.ctx.track(w(L, 1, R, H), "logits_lora_a")
        self.logits_b = self.ctx.track(w(L, 1, self.c["vocab"], R), "logits_lora_b")
        self.extra: list = []
        if self.emb:  # VocabParallelEmbeddingWithLoRA's stacks: A [max_loras, vocab, rank], B [max_loras, 1, dim, rank]
            self.emb_a, self.emb_b = w(L, self.c["vocab"], R), w(L, 1, H, R)  # each adapter's weights
            self.emb_base = self.ctx.track(w(self.c["vocab"], H), "embedding.weight")
            self.emb_forward, self.emb_load, stacks = self.api.embedding_layer(self.punica, self.emb_a, self.emb_b,
                                                                               self.emb_base)
            self.ctx.track(stacks[0], "embedding_lora_a")
            self.ctx.track(stacks[1], "embedding_lora_b")
            self.extra += [self.emb_a, self.emb_b]
        if self.moe:  # FusedMoEWithLoRA's stacks per slice: A [max_loras, experts, rank, hidden], B [.., n, rank]
            m = self.moe
            self.moe_a = [self.ctx.track(w(L, m["experts"], m["rank"], H), f"moe_lora_a[{i}]")
                          for i in range(m["slices"])]
            self.moe_b = [self.ctx.track(w(L, m["experts"], m["n"], m["rank"]), f"moe_lora_b[{i}]")
                          for i in range(m["slices"])]
            self.extra += self.moe_a + self.moe_b
            self.enabled = self.ctx.track(torch.tensor([int(bool(e)) for e in m["enabled"]] + [0],
                                                       dtype=torch.int32, device=self.device), "moe.adapter_enabled")

    def set_adapter(self, op) -> None:
        g = torch.Generator().manual_seed(1000 + op["seed"])
        s = op["slot"]
        for t in self.lora_a + self.lora_b + [self.logits_a, self.logits_b] + self.extra:
            t[s].copy_((0.25 * torch.randn(t[s].shape, generator=g)).to(t.dtype))
        if self.emb:
            self.emb_load(s)  # vLLM's set_lora into the layer's stacks

    # -- launches ------------------------------------------------------------------------
    def _announce(self, kernel: str, meta, name: str, M: int) -> None:
        if not tracking.watching() or bool(meta.no_lora_flag_cpu.item()):
            return
        z = self.api.grid_z(meta, M, self.specialize)
        tracking.kernel_launch(kernel, meta_name=name, M=M, grid_z=z if z is not None else self.L + 1,
                             max_loras=self.L, token_lora_mapping=meta.token_lora_mapping,
                             token_indices_sorted_by_lora_ids=meta.token_indices_sorted_by_lora_ids,
                             num_tokens_per_lora=meta.num_tokens_per_lora,
                             lora_token_start_loc=meta.lora_token_start_loc, active_lora_ids=meta.active_lora_ids)

    def linear(self, x, y) -> None:
        M = x.size(0)
        self._announce("lora_shrink", self.token_meta, "token_mapping_meta", M)
        if self.punica is not None:
            with opaque_op():
                self.punica.add_lora_linear(y, x, tuple(self.lora_a), tuple(self.lora_b), SCALE,
                                            tuple(self.c["slices"]))
            return
        public = self.entry == "public"
        buf = torch.empty((len(self.lora_a), M, self.R), dtype=torch.float32, device=self.device)
        args = self.api.meta_args(self.token_meta, M, self.specialize)
        self.api.shrink(public, x, self.lora_a, buf, args, SCALE)
        self.api.expand(public, buf, self.lora_b, y, args, add_inputs=True)

    def logits(self, h, out) -> None:
        M = h.size(0)
        self._announce("lora_shrink", self.prompt_meta, "prompt_mapping_meta", M)
        if self.punica is not None:
            with opaque_op():
                self.punica.add_lora_logits(out, h, self.logits_a, self.logits_b, SCALE)
            return
        public = self.entry == "public"
        buf = torch.empty((1, M, self.R), dtype=torch.float32, device=self.device)
        args = self.api.meta_args(self.prompt_meta, M, self.specialize)
        self.api.shrink(public, h, [self.logits_a], buf, args, SCALE)
        self.api.expand(public, buf, [self.logits_b], out, args, add_inputs=True)

    # -- float64 reference -----------------------------------------------------------------
    def _ref(self, x, y, slots, a_list, b_list):
        out = y.double().cpu().clone()
        col = 0
        for a, b in zip(a_list, b_list):
            n = b.size(2)
            for m, s in enumerate(slots):
                if s >= 0:
                    t = SCALE * (a[s, 0].double().cpu() @ x[m].double().cpu())
                    out[m, col:col + n] += b[s, 0].double().cpu() @ t
            col += n
        return out

    def embedding_layer(self, slots: list[int], seed: int, label: str) -> None:
        """VocabParallelEmbeddingWithLoRA over the mapped rows: out[m] = base[id] + B[slot] @ A[slot, id]."""
        n, V = len(slots), self.c["vocab"]
        if not n:
            return
        g = torch.Generator().manual_seed(seed + 101)
        ids = torch.randint(0, V, (n,), generator=g)
        expected = self.emb_base.double().cpu()[ids]
        for m, s in enumerate(slots):
            if s >= 0:
                expected[m] += self.emb_b[s, 0].double().cpu() @ self.emb_a[s, int(ids[m])].double().cpu()
        self._announce("lora_expand", self.token_meta, "token_mapping_meta", n)
        out = self.emb_forward(ids.to(self.device))
        self.ctx.compare(f"{label}.embedding", out, expected, self.dtype)

    def moe_layer(self, slots: list[int], seed: int, label: str) -> None:
        """A fused-MoE LoRA layer over the mapped rows: out[t, k, slice] += B[slot, e] @ A[slot, e] @ x
        for e = topk_ids[t, k] where the slot's adapter has MoE weights (times topk_weights[t, k] with
        mul_routed_weight, whose input holds one row per (token, k) pair, as in vLLM's w2)."""
        m, n = self.moe, len(slots)
        if not n or not naive_moe(n, m["top_k"], m["experts"], self.L):
            return  # vLLM would take the sorted path (moe_lora_align_block_size, a CUDA op of vllm._C)
        k, N, mul = m["top_k"], m["n"], bool(m["mul_routed_weight"])
        g = torch.Generator().manual_seed(seed + 202)
        x = self.ctx.track(torch.randn(n * k if mul else n, self.H, generator=g).to(self.device, self.dtype), "moe.x")
        topk_ids = torch.stack([torch.randperm(m["experts"], generator=g)[:k] for _ in range(n)]).to(torch.int32)
        w = torch.rand(n, k, generator=g)
        out = self.ctx.track(torch.randn(n, k, N * m["slices"], generator=g).to(self.device, self.dtype), "moe.out")
        expected = out.double().cpu().clone()
        for t, s in enumerate(slots):
            if s < 0 or not m["enabled"][s]:
                continue
            for j in range(k):
                e, xr = int(topk_ids[t, j]), x[t * k + j if mul else t].double().cpu()
                for i in range(m["slices"]):
                    v = self.moe_b[i][s, e].double().cpu() @ (self.moe_a[i][s, e].double().cpu() @ xr)
                    expected[t, j, i * N:(i + 1) * N] += v * float(w[t, j]) if mul else v
        check_flag = "fused_moe_ignores_no_lora_flag" not in self.faults
        if tracking.watching() and not (check_flag and bool(self.token_meta.no_lora_flag_cpu.item())):
            tracking.kernel_launch("fused_moe_lora", meta_name="token_mapping_meta", M=n, grid_z=1, max_loras=self.L,
                                   token_lora_mapping=self.token_meta.token_lora_mapping)
        self.api.fused_moe_call(self.entry, self.punica, self.token_meta, self.specialize, out=out, x=x,
                                lora_a=self.moe_a, lora_b=self.moe_b, topk_weights=w.to(self.device),
                                topk_ids=topk_ids.to(self.device), adapter_enabled=self.enabled, rank=m["rank"],
                                top_k=k, mul_routed_weight=mul, check_flag=check_flag)
        self.ctx.compare(f"{label}.moe", out, expected, self.dtype)

    def run_layers(self, slots: list[int], rows: int, seed: int, label: str, sampled=(), moe: bool = True) -> None:
        """One forward: the LoRA linear over ``rows`` rows (``slots`` then padding), then logits; the embedding
        and MoE layers (where the case has them) over the mapped rows."""
        g = torch.Generator().manual_seed(seed)
        x = self.ctx.track(torch.randn(rows, self.H, generator=g).to(self.device, self.dtype), "x")
        y = self.ctx.track(torch.randn(rows, sum(self.c["slices"]), generator=g).to(self.device, self.dtype), "y")
        intended = list(slots) + [-1] * (rows - len(slots))
        expected = self._ref(x, y, intended, self.lora_a, self.lora_b)
        self.linear(x, y)
        self.ctx.compare(f"{label}.y", y, expected, self.dtype)
        if sampled:
            h = x[list(sampled)].contiguous()
            out = torch.randn(len(sampled), self.c["vocab"], generator=g).to(self.device, self.dtype)
            expected = self._ref(h, out, [intended[r] for r in sampled], [self.logits_a], [self.logits_b])
            self.logits(h, out)
            self.ctx.compare(f"{label}.logits", out, expected, self.dtype)
        if self.emb:
            self.embedding_layer(slots, seed, label)
        if self.moe and moe:
            self.moe_layer(slots, seed, label)

    # -- metadata programming --------------------------------------------------------------
    def prepare(self, meta, slots: list[int]) -> None:
        meta.prepare_tensors(torch.tensor(slots, dtype=torch.int32, device=self.device))

    def program(self, slots: list[int], prompt_slots: list[int] | None = None, direct: bool = False) -> None:
        """Program a token mapping (and a prompt mapping) as vLLM does: with the punica entry through
        ``update_metadata`` (adapter ids, this case's slot -> id table), else ``prepare_tensors`` of the metas.
        ``direct``: the metas only, leaving the wrapper's own buffers (``_embeddings_indices``) as they are."""
        if self.via_mapping and not direct:
            def ids(ss):
                return [self.ids[s] if s >= 0 else 0 for s in ss]
            self.api.update_metadata(self.punica, ids(slots), ids(prompt_slots or []), self.ids, self.c["vocab"])
            return
        self.prepare(self.token_meta, slots)
        if prompt_slots:
            self.prepare(self.prompt_meta, prompt_slots)

    def dummy_slots(self, num_tokens: int, reqs: int, k: int) -> list[int]:
        """The dummy mapping for ``k`` adapters over ``num_tokens`` tokens split evenly over ``reqs`` requests
        (the remainder on the last): vLLM's own ``maybe_select_dummy_loras`` where the release has it (dummy.py),
        else its rule re-stated."""
        per = [num_tokens // reqs] * reqs
        per[-1] += num_tokens - sum(per)
        if self.api.dummy_select is not None and k:
            return dummy.from_vllm(self.api.dummy_select, self.L, per, k)
        return dummy.restated(self.L, per, k)

    def step(self, op) -> None:
        sampled = op.get("sampled", [])
        self.program(op["slots"], [op["slots"][r] for r in sampled])
        self.run_layers(op["slots"], len(op["slots"]) + op.get("pad", 0), op.get("seed", 0), "step", sampled)

    def dummy_run(self, op) -> None:
        """A dummy run as the installed release's V2 model runner makes it (api.PROTOCOLS); the output must
        be what the mapping it means to program gives (no adapter at all, unless dummy adapters are mapped)."""
        n, rows = op["num_tokens"], op["num_tokens"] + op.get("pad", 0)
        protocol = "no_mapping" if "dummy_run_skips_prepare" in self.faults else self.api.protocol
        direct = "dummy_run_skips_embedding_indices" in self.faults
        reqs = min(op.get("reqs", 1), n)
        if protocol == "lora_warmup" and op["kind"] == "warmup":
            slots = self.dummy_slots(n, reqs, op.get("k", 1))
            starts = [(n // reqs) * r for r in range(reqs)]
            self.program(slots, [slots[i] for i in starts], direct)  # #35536: unpadded mapping, padded forward
        else:
            slots = [-1] * rows
            if protocol != "no_mapping":
                self.program(slots, [-1] * reqs, direct)  # the zero mapping, over the padded tokens
            if protocol == "zero_mapping":  # #43139 then forces the flags so that the ops still launch
                self.token_meta.no_lora_flag_cpu[0] = False
                if self.api.has_grid_control:
                    self.api.set_grid_z(self.token_meta, 1)
        self.run_layers(slots, rows, 0, "dummy_run")

    def capture(self, op) -> None:
        size, key = op["size"], op["key"]
        reqs = min(op.get("reqs", 1), size)
        if "capture_skips_mapping" not in self.faults:
            slots = self.dummy_slots(size, reqs, key) if key else [-1] * size
            self.program(slots)
        meta = self.token_meta
        self.graphs[(key, size)] = (bool(meta.no_lora_flag_cpu.item()), self.api.grid_z(meta, size, self.specialize),
                                    reqs)

    def replay(self, op) -> None:
        slots = op["slots"]
        self.program(slots)
        active = len({s for s in slots if s >= 0})  # vLLM dispatches on its count of LoRA requests
        # A request has one slot, so the batch has at least one request per distinct slot (-1 included); vLLM
        # captures a graph of n tokens with min(n, max_num_reqs) requests (mixed) or n // query_len (uniform
        # decode, dispatched only to batches of at most that many), so it never replays a graph for a batch
        # of more requests than its capture had.
        reqs = len(set(slots))
        fits = [(k, n) for k, n in sorted(self.graphs) if k >= active and n >= len(slots)
                and self.graphs[(k, n)][2] >= reqs]
        if not fits:
            raise InvalidCase("replay: no captured graph fits its batch (key >= its adapters, size >= its tokens, "
                              "captured requests >= its distinct slots); a fitting capture must come first.")
        size = fits[0][1]
        flag, z, _ = self.graphs[fits[0]]
        # no MoE layer: its no-LoRA check is a host decision too, and vLLM's dispatch would pick the key-0
        # graph for a batch without adapters, which a case may not have captured
        with self.api.frozen(self.token_meta, flag, z, self.specialize):  # a graph replays what it froze
            self.run_layers(slots, size, op.get("seed", 0), "replay", moe=False)


def run(case, ctx, api) -> None:
    s = Session(case, ctx, api)
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            getattr(s, op["op"])(op)
