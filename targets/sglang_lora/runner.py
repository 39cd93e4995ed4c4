"""Run one ``sglang_lora`` case: SGLang's LoRA backend driven as its model runner drives it.

The session holds what SGLang's ``ModelRunner`` holds across steps: one LoRA backend (SGLang's
``TritonLoRABackend`` or ``ChunkedSgmvLoRABackend``, with its CUDA-graph batch info made at start-up
by SGLang's own ``init_cuda_graph_batch_info``), the adapter memory pool's stacked weights
(``A [slots, rank, hidden]``, ``B [slots, out, rank]``) and the graphs captured so far.

Re-implemented here from SGLang's source (it needs the engine around it):
* ``LoRAManager.prepare_lora_batch``: request adapter ids -> buffer slots (``weight_indices``), the
  batch's ``lora_ranks`` and ``scalings`` per slot (0 for slots no request uses), then the backend's
  ``prepare_lora_batch``; and ``LoRAMemoryPool``'s slot table: a batch's missing adapters are loaded
  into free slots, else into the least recently used slot no request of the batch uses; the no-adapter
  request (``None``) takes a slot of its own with zero weights and rank 0, as SGLang's pool does.
* ``ColumnParallelLinearWithLoRA.apply_lora``: ``run_lora_a_sgemm`` then ``run_lora_b_sgemm`` into the
  base output; no LoRA when the backend has no prepared batch (``batch_info is None``).
* ``CudaGraphRunner``: a capture prepares the dummy batch (``lora_ids = [None] * bs``, decode) with
  ``use_cuda_graph=True`` and runs the layer, on every device without a ``torch.cuda.CUDAGraph`` (the
  ``sglang_engine`` target captures a real one on a GPU), by freezing what a graph freezes: which
  ``LoRABatchInfo`` the kernels were launched with (its tensors are the graph's pointers) and its host values
  (``bs``, ``num_segments``, ``max_len``, ``use_cuda_graph``), which the kernel wrappers turn into grids and
  scalar arguments. A replay prepares the real batch
  (``use_cuda_graph=True``, unpadded, as ``ForwardBatch.init_new`` does), then runs the graph of the
  smallest captured size that fits, over the padded rows, with the frozen values.
* The overlap scheduler (``overlap``): batch preparation and the forward on a thread of their own fed by a queue,
  as earlier SGLang's ``TpModelWorkerClient`` ran them (0.5.x launches the forward on a second CUDA stream from
  the scheduler's thread instead: not modelled; docs/sglang.md).

The float64 reference uses only each request's intended adapter (weights, rank, scaling), never
SGLang's metadata.
"""

from __future__ import annotations

import queue
import threading

import torch

from fuzzrunner.errors import InvalidCase, UnsupportedCase

FAULTS = {
    "graph_seg_indptr_uninitialized":
        "the triton backend's CUDA-graph seg_indptr is allocated with torch.empty and only [1:] written by the "
        "cumsum, as init_cuda_graph_batch_info did in SGLang 0.5.6 (PR #14177, 'LoRA + CUDA graph flakiness': "
        "fixed with torch.zeros in 0.5.7): a replayed segment GEMM reads seg_indptr[0] never written.",
    "csgmv_grid_frozen_at_capture":
        "the csgmv kernels' grid and num_segs are the capture-time segment count, as in SGLang <= 0.5.12 "
        "(PR #28371): a replay with more segments (several resident adapters) than the capture skips the extra "
        "segments (their tokens get no LoRA) and a replay with fewer reads stale tail metadata.",
    "capture_without_lora_batch":
        "the capture runs without preparing its dummy LoRA batch (lora_ids built but None passed, #25307 -> "
        "#25507/#25799/#26028): the graph freezes whatever batch info the backend held (none: no LoRA kernels "
        "in the graph; the last eager batch's: its tensors, read stale at every replay).",
}
# graph batch-info tensors SGLang writes once at start-up, by design (from its source): the triton backend's
# per-request segments (decode: one token each, cumsum'd at init) and, from the merged sgemm routing on
# (0.5.2x), that routing's segment -> slot table (arange(max_loras_per_batch))
STATIC = {("triton", "cuda_graph_batch_info"): ("seg_lens", "seg_indptr"),
          ("triton", "cuda_graph_sgemm_batch_info"): ("weight_indices",)}
HOST_FIELDS = ("bs", "num_segments", "max_len", "use_cuda_graph")
NONE_UID = 0  # a request without an adapter


def check(case) -> dict:
    c = case.config
    need = ("backend", "max_loras", "rank", "hidden", "out", "dtype", "graph_sizes", "overlap", "chunk")
    missing = [k for k in need if k not in c]
    if missing:
        raise InvalidCase(f"sglang_lora config is missing {', '.join(missing)}.")
    if c["backend"] not in ("triton", "csgmv"):
        raise InvalidCase(f"backend {c['backend']!r}: one of triton, csgmv (SGLang's --lora-backend).")
    if c["max_loras"] < 2:
        raise InvalidCase("max_loras (SGLang's max_loras_per_batch) must be at least 2: the no-adapter slot and one.")
    for i, op in enumerate(case.ops):
        kind = op.get("op")
        if kind not in ("step", "capture", "replay", "idle", "unload"):
            raise InvalidCase(f"op {i}: unknown op {kind!r}; sglang_lora ops are step, capture, replay, idle, "
                              f"unload.")
        uids = op.get("uids", [])
        if len(set(uids)) > c["max_loras"]:
            raise InvalidCase(f"op {i}: {len(set(uids))} distinct adapters (None included) > "
                              f"max_loras {c['max_loras']}.")
        if kind == "capture" and op.get("bs") not in c["graph_sizes"]:
            raise InvalidCase(f"op {i}: capture size {op.get('bs')} is not in graph_sizes {c['graph_sizes']}.")
        if kind == "step" and op.get("mode") == "extend" and len(op.get("lens", [])) != len(uids):
            raise InvalidCase(f"op {i}: an extend step has one length per request.")
        if kind in ("step", "replay") and not uids:
            raise InvalidCase(f"op {i}: a {kind} has at least one request (an empty batch is an idle op).")
    return c


class Adapter:
    def __init__(self, uid: int, rank: int, cfg: dict):
        g = torch.Generator().manual_seed(7919 * uid + rank)
        self.uid, self.rank = uid, rank
        self.scaling = 0.5 + (uid % 4) * 0.25
        self.a = 0.25 * torch.randn(rank, cfg["hidden"], generator=g, dtype=torch.float64)
        self.b = 0.25 * torch.randn(cfg["out"], rank, generator=g, dtype=torch.float64)


class Session:
    def __init__(self, case, ctx, api):
        self.c = c = check(case)
        self.ctx, self.api, self.faults = ctx, api, set(case.faults)
        self.device = torch.device(ctx.device)
        self.dtype = getattr(torch, c["dtype"])
        self.L, self.R = c["max_loras"], c["rank"]
        api.fresh_kernel_caches()  # one case is one server: none of the last case's kernels (api.py)
        self.backend = api.make_backend(c["backend"], self.L, self.device, c["chunk"])
        self.max_bs = max(c["graph_sizes"])
        api.init_graph(self.backend, self.max_bs)
        self.graph_info = self.backend.cuda_graph_batch_info
        if "graph_seg_indptr_uninitialized" in self.faults and c["backend"] == "triton":
            self._plant_empty_seg_indptr()
        self._track_graph_info()
        # the memory pool's stacked buffers (LoRAMemoryPool.A_buffer / B_buffer of one layer)
        dev = {"dtype": self.dtype, "device": self.device}
        self.a_buf = ctx.track(torch.zeros(self.L, self.R, c["hidden"], **dev), "A_buffer")
        self.b_buf = ctx.track(torch.zeros(self.L, c["out"], self.R, **dev), "B_buffer")
        self.slots: list = [None] * self.L       # slot -> uid (NONE_UID for the no-adapter slot), None = free
        self.last_use = [0] * self.L
        self.adapters: dict[int, Adapter] = {}
        self.graphs: dict[int, tuple] = {}
        self.clock = 0
        self.worker = _ForwardThread() if c["overlap"] else None

    # -- start-up state --------------------------------------------------------------------------
    def _plant_empty_seg_indptr(self) -> None:
        """0.5.6's allocation: ``torch.empty`` then ``cumsum(seg_lens, out=seg_indptr[1:])``."""
        gi = self.graph_info
        fresh = torch.empty(self.max_bs + 1, dtype=torch.int32, device=self.device)
        torch.cumsum(gi.seg_lens[: self.max_bs], dim=0, out=fresh[1:])
        gi.seg_indptr = fresh

    def _track_graph_info(self) -> None:
        self._track_infos()

    def _track_infos(self) -> None:
        """Name every batch info's tensors. All are rewritten by each prepare_lora_batch that uses them (valid
        for that step only), except those ``STATIC`` names: written once at start-up and meant to stay."""
        if not hasattr(self, "_static"):  # the start-up objects, whatever other attribute later points at them
            self._graph_names = {id(v): k for k, v in self.api.batch_infos(self.backend).items() if v is not None}
            self._static = {id(getattr(getattr(self.backend, attr), f)) for (b, attr), fields in STATIC.items()
                            if b == self.c["backend"] and getattr(self.backend, attr, None) is not None
                            for f in fields}
        for attr, info in self.api.batch_infos(self.backend).items():
            if info is None:
                continue
            label = self._graph_names.get(id(info), attr)
            for name in ("weight_indices", "lora_ranks", "scalings", "seg_indptr", "seg_lens", "permutation"):
                t = getattr(info, name, None)
                if isinstance(t, torch.Tensor):
                    self.ctx.track(t, f"{label}.{name}", per_step=id(t) not in self._static)

    # -- adapters (LoRAMemoryPool, re-stated) ------------------------------------------------------
    def _adapter(self, uid: int) -> Adapter:
        if uid not in self.adapters:
            self.adapters[uid] = Adapter(uid, [self.R, max(1, self.R // 2)][uid % 2], self.c)
        return self.adapters[uid]

    def _load(self, uid: int, batch: set) -> int:
        if uid in self.slots:
            return self.slots.index(uid)
        free = [s for s in range(self.L) if self.slots[s] is None]
        if free:
            slot = free[0]
        else:
            victims = [s for s in range(self.L) if self.slots[s] not in batch]
            slot = min(victims, key=lambda s: self.last_use[s])
        self.slots[slot] = uid
        if uid == NONE_UID:  # SGLang zeroes the no-adapter slot's buffers
            self.a_buf[slot].zero_()
            self.b_buf[slot].zero_()
        else:
            ad = self._adapter(uid)
            self.a_buf[slot].zero_()
            self.b_buf[slot].zero_()
            self.a_buf[slot, : ad.rank].copy_(ad.a.to(self.dtype))
            self.b_buf[slot, :, : ad.rank].copy_(ad.b.to(self.dtype))
        return slot

    def _weights(self, uids: list) -> tuple[list, list, list]:
        """LoRAManager.prepare_lora_batch: weight_indices per request, lora_ranks / scalings per slot."""
        self.clock += 1
        batch = set(uids)
        indices = [self._load(u, batch) for u in uids]
        ranks, scalings = [0] * self.L, [0.0] * self.L
        for u, s in zip(uids, indices):
            self.last_use[s] = self.clock
            if u != NONE_UID:
                ranks[s], scalings[s] = self.adapters[u].rank, self.adapters[u].scaling
        return indices, ranks, scalings

    # -- batches -----------------------------------------------------------------------------------
    def _batch(self, mode: str, uids: list, lens: list | None = None):
        from .batch import ForwardBatch
        fm, bs = self.api.forward_mode, len(uids)
        if mode == "extend":
            seq = torch.tensor(lens, dtype=torch.int32, device=self.device)
            return ForwardBatch(forward_mode=fm.EXTEND, batch_size=bs, lora_ids=list(uids), extend_seq_lens=seq,
                                extend_seq_lens_cpu=list(lens), extend_num_tokens=sum(lens),
                                seq_lens_cpu=torch.tensor(lens), extend_prefix_lens_cpu=[0] * bs,
                                extend_logprob_start_lens_cpu=list(lens), is_extend_in_batch=True)
        return ForwardBatch(forward_mode=fm.IDLE if mode == "idle" else fm.DECODE, batch_size=bs, lora_ids=list(uids),
                            seq_lens_cpu=torch.ones(bs, dtype=torch.int32))

    def _prepare(self, fb, uids: list, use_cuda_graph: bool) -> None:
        indices, ranks, scalings = self._weights(uids)
        self.api.prepare(self.backend, fb, indices, ranks, scalings, use_cuda_graph)
        self._track_infos()

    def _layer(self, x):
        base = torch.zeros(x.size(0), self.c["out"], dtype=self.dtype, device=self.device)
        if getattr(self.backend, "batch_info", None) is None:  # SGLang's layers skip LoRA when no batch is prepared
            return base
        return self.api.lora_linear(self.backend, x, self.a_buf, self.b_buf, base)

    def _expected(self, x, row_uids: list):
        out = torch.zeros(x.size(0), self.c["out"], dtype=torch.float64)
        for m, u in enumerate(row_uids):
            if u not in (None, NONE_UID):
                ad = self.adapters[u]
                out[m] = ad.scaling * (ad.b @ (ad.a @ x[m].double().cpu()))
        return out

    def _input(self, rows: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        return self.ctx.track(torch.randn(rows, self.c["hidden"], generator=g).to(self.device, self.dtype), "x")

    def _forward(self, fn):
        return self.worker.call(fn) if self.worker is not None else fn()

    # -- ops ---------------------------------------------------------------------------------------
    def step(self, op) -> None:
        mode, uids = op.get("mode", "decode"), list(op["uids"])
        lens = list(op.get("lens", [])) if mode == "extend" else [1] * len(uids)
        x = self._input(sum(lens), op.get("seed", 0))
        rows = [u for u, n in zip(uids, lens) for _ in range(n)]

        def run():
            self._prepare(self._batch(mode, uids, lens if mode == "extend" else None), uids, False)
            return self._layer(x)
        self.ctx.compare("step.y", self._forward(run), self._expected(x, rows), self.dtype)

    def idle(self, op) -> None:
        """A DP-attention idle batch: no request, the forward still runs (over zero rows)."""
        if not self.api.handles_idle:
            raise UnsupportedCase("idle: this SGLang's LoRA path has no idle-batch branch (DP attention and LoRA "
                                  "did not meet before 0.5.2x); an idle op tests nothing of it.")
        x = self._input(0, 0)

        def run():
            self._prepare(self._batch("idle", []), [], False)
            return self._layer(x)
        self.ctx.output("idle.y", self._forward(run))

    def unload(self, op) -> None:
        """``unload_lora_adapter``: the adapter leaves its slot (the weights stay in the buffer)."""
        if op["uid"] in self.slots:
            self.slots[self.slots.index(op["uid"])] = None

    def capture(self, op) -> None:
        bs = op["bs"]
        uids = [NONE_UID] * bs
        x = self._input(bs, 99)

        def run():
            if "capture_without_lora_batch" not in self.faults:
                self._prepare(self._batch("decode", uids), uids, True)
            self._legacy_route()
            infos = self.api.batch_infos(self.backend)
            self.graphs[bs] = {k: (v, _host(v)) for k, v in infos.items()}
            return self._layer(x)
        self.ctx.output("capture.y", self._forward(run))

    def _legacy_route(self) -> None:
        """The planted #14177 on releases whose decode GEMMs read a merged per-adapter routing (0.5.2x): route
        them through the start-up graph batch info, as every release before it did."""
        if "graph_seg_indptr_uninitialized" in self.faults and getattr(self.backend, "sgemm_batch_info", None) \
                is not None and getattr(self.backend, "batch_info", None) is self.graph_info:
            self.backend.sgemm_batch_info = None

    def replay(self, op) -> None:
        uids = list(op["uids"])
        fits = sorted(s for s in self.graphs if s >= len(uids))
        if not fits:
            raise InvalidCase("replay: no captured graph is as large as its batch; a fitting capture must come first.")
        size = fits[0]
        x = self._input(size, op.get("seed", 0))  # the graph's static input: the batch, then padding rows
        graph = self.graphs[size]

        def run():
            self._prepare(self._batch("decode", uids), uids, True)
            self._legacy_route()
            prepared = {k: (v, _host(v)) for k, v in self.api.batch_infos(self.backend).items()}
            for k, (info, host) in graph.items():  # the graph's pointers and host values, as captured
                setattr(self.backend, k, info)
                _set_host(info, host)
                if "csgmv_grid_frozen_at_capture" in self.faults and self.c["backend"] == "csgmv" and info is not None:
                    info.use_cuda_graph = False  # grid and num_segs = num_segments: the capture's count
            try:
                return self._layer(x)
            finally:
                for k, (info, host) in prepared.items():
                    setattr(self.backend, k, info)
                    _set_host(info, host)
        y = self._forward(run)
        self.ctx.compare("replay.y", y[: len(uids)], self._expected(x[: len(uids)], uids), self.dtype)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()


def _host(info) -> dict | None:
    return None if info is None else {f: getattr(info, f, None) for f in HOST_FIELDS}


def _set_host(info, host) -> None:
    if info is not None and host is not None:
        for f, v in host.items():
            setattr(info, f, v)


class _ForwardThread:
    """Earlier SGLang's ``TpModelWorkerClient``: the forward runs on a thread of its own, fed through a queue."""

    def __init__(self):
        self.jobs: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="forward_thread", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append(("ok", fn()))
            except BaseException as e:  # handed back to the scheduler thread, as the engine does
                box.append(("error", e))
            done.set()

    def call(self, fn):
        box: list = []
        done = threading.Event()
        self.jobs.put((fn, box, done))
        done.wait()
        kind, value = box[0]
        if kind == "error":
            raise value
        return value

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=10)


def run(case, ctx, api) -> None:
    s = Session(case, ctx, api)
    try:
        for i, op in enumerate(case.ops):
            with ctx.op(i, op):
                getattr(s, op["op"])(op)
    finally:
        s.close()
