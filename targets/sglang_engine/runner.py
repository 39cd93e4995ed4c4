"""Run one ``sglang_engine`` case: SGLang's own LoRA manager, memory pool and LoRA layers, driven as its
model runner and scheduler drive them.

Start-up, as the server does it: a ``ServerArgs`` from the case's knobs, published into SGLang's runtime
context (``sglang.test.parallel_groups.publish``: SGLang's own fixture for tests without process groups);
the tiny model of SGLang's layer classes (model.py); ``LoRAManager(...)`` exactly as
``ModelRunner.init_lora_manager`` calls it (it wraps the layers, makes the pool, takes slot 0 for the base
model); with ``graph_bs``, ``init_decode_cuda_graph_batch_info(graph_bs, 1)`` as the decode graph runner
does before capture, so that decode batches of at most that size take the graph's static batch info.

Ops, through SGLang's adapter-management API and scheduler admission where the release's tokenizer manager and
scheduler import (frontend.py; else straight to the manager, as below):
* ``load`` / ``unload``: the tokenizer manager's ``load_lora_adapter`` / ``unload_lora_adapter`` (``pinned`` as
  the adapter says, ``--max-loaded-loras`` as drawn); without the front end, the manager's, with the
  ``LoRARef`` the tokenizer manager makes (a fresh ``lora_id`` per load);
* ``step``: requests (``reqs``: adapter name or null each; ``mode`` decode or extend with ``lens``), each
  resolved by the tokenizer manager (an unloaded adapter is reloaded), admitted into batches by the scheduler
  in queue order, each batch run as ``ForwardBatch.init_new``'s LoRA part (``fetch_new_loras`` then
  ``prepare_lora_batch``) and the forward, its requests then released.

Checks, the engine's users' properties (``ctx.compare`` / ``ctx.check``): each request's logits equal the
float64 reference of its own adapter's files (none: the base model); a request without an adapter gets the
base model's logits exactly; after an unload nothing of the adapter is resident or reachable; and the pool's
invariants that the kernels rely on, after each prepare.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import torch

from fuzzrunner import tracking
from fuzzrunner.errors import InvalidCase, UnsupportedCase

from ..sglang_lora import kernel_caches
from . import adapters as adp
from . import backend_faults, serving
from . import batch as sglang_batch
from . import model as tiny
from . import moe as sparse
from .cases import step_path
from .checks import check_frontend, check_pool, check_unloaded
from .faults import FAULTS, plant
from .frontend import Frontend
from .graphs import DecodeGraphs
from .scheduler import Server, scheduler_knobs

OPS = ("load", "unload", "step")


def check_case(case) -> dict:
    c = case.config
    for k in ("backend", "max_loras_per_batch", "max_lora_rank", "target_modules", "eviction_policy", "adapters",
              "graph_bs", "dtype"):
        if k not in c:
            raise InvalidCase(f"sglang_engine config is missing {k!r}.")
    if c.get("moe"):
        _check_moe(c)
    for i, op in enumerate(case.ops):
        if op.get("op") not in OPS:
            raise InvalidCase(f"op {i}: unknown op {op.get('op')!r}; sglang_engine ops are {', '.join(OPS)}.")
        if op["op"] in ("load", "unload") and op.get("name") not in c["adapters"]:
            raise InvalidCase(f"op {i}: adapter {op.get('name')!r} is not in the case's adapters.")
        for key in ("new", "arrive"):  # a step served by SGLang's scheduler (serving.py)
            v = op.get(key)
            least = 1 if key == "new" else 0
            if v is not None and (len(v) != len(op.get("reqs", ()))
                                  or any(not isinstance(k, int) or k < least for k in v)):
                what = "tokens to generate" if key == "new" else "its arrival round"
                raise InvalidCase(f"op {i}: {key} {v!r} must give each of the step's {len(op.get('reqs', ()))} "
                                  f"requests an integer >= {least} ({what}).")
        lp = op.get("logprob")
        if lp is not None and (op.get("mode") != "extend" or len(lp) != len(op.get("lens", ()))
                               or any(not 0 <= s <= n for s, n in zip(lp, op["lens"]))):
            raise InvalidCase(f"op {i}: logprob {lp!r} must give an extend step's requests one logprob start each, "
                              f"0 <= start <= its len (lens {op.get('lens')!r}).")
    return c


def compared_as(dtype: torch.dtype, device: str) -> torch.dtype:
    """The dtype whose tolerance an output of ``dtype`` is held to. SGLang's LoRA kernels call ``tl.dot`` with
    Triton's default precision: float32 operands go through TF32 on a GPU (a 10-bit mantissa, float16's), so
    float32 outputs there get float16's tolerance (2026-12-07, H100: fault-free logits off by up to 0.0053 of
    the row's largest against 1e-4), unless ``TRITON_F32_DEFAULT=ieee``; the interpreter computes in IEEE
    float32."""
    if dtype != torch.float32 or device == "cpu" or os.environ.get("TRITON_F32_DEFAULT", "").lower() == "ieee":
        return dtype
    return torch.float16


def _check_moe(c: dict) -> None:
    m = c["moe"]
    if m.get("experts") not in sparse.EXPERTS or m.get("top_k") not in sparse.TOP_K:
        raise InvalidCase(f"moe {m!r}: experts must be one of {sparse.EXPERTS} and top_k one of {sparse.TOP_K} (the "
                          f"sizes where SGLang aligns without compiled code: moe.py).")
    if c["backend"] == "triton_v2":
        raise InvalidCase("moe case with backend triton_v2: SGLang pairs it only with its MoeLoraRunner "
                          "(--moe-runner-backend lora_*), which needs a CUDA SM90 / SM100 layer (moe.py); "
                          "draw another backend.")
    if m.get("shared_outer") and m.get("virtual"):
        raise InvalidCase(f"moe {m!r}: virtual experts over a shared factor number max_loras_per_batch, below where "
                          f"SGLang aligns them in Triton (compiled moe_align_block_size: moe.py); draw one of the two.")
    if m.get("virtual") and c["dtype"] not in ("float16", "bfloat16"):
        raise InvalidCase(f"moe {m!r} with dtype {c['dtype']}: SGLang's virtual-expert kernel takes a float16 or "
                          f"bfloat16 model only (invoke_fused_moe_kernel asserts it); draw one of those.")
    if not {"gate_up_proj", "down_proj"} <= set(c["target_modules"]):
        raise InvalidCase(f"moe case with target modules {c['target_modules']}: SGLang wraps its experts only when "
                          f"both gate_up_proj and down_proj are targeted; add them.")
    if c["graph_bs"]:
        raise InvalidCase(f"moe case with graph_bs {c['graph_bs']}: a decode graph's capture aligns the MoE LoRA with "
                          f"the compiled moe_lora_align_block_size; draw graph_bs 0.")


class Session:
    def __init__(self, case, ctx, eng, workdir: str):
        self.c = c = check_case(case)
        self.ctx, self.eng, self.workdir = ctx, eng, workdir
        self.faults = set(case.faults)
        self.dtype = getattr(torch, c["dtype"])
        self.device = torch.device(ctx.device)
        # SGLang's fused-MoE kernels compute in float16 for a model that is not bfloat16 (fused_moe.py's
        # compute_type): a MoE case's logits and logprobs carry that rounding
        self.compared_as = torch.float16 if c.get("moe") else compared_as(self.dtype, self.device.type)
        self.api = api = eng.api
        if c["backend"] not in api.backends:  # a seed or a stored case of another release
            raise UnsupportedCase(f"backend {c['backend']!r} is not drivable on SGLang {eng.version}; its registry's "
                                  f"drivable backends are {', '.join(api.backends)} (backends.py): draw one of those.")
        if eng.scheduler is None and _served(case):
            raise UnsupportedCase(f"the scheduler path is not driven on SGLang {eng.version}; a case with arrival "
                                  f"rounds, tokens to generate or a drain threshold needs it ({eng.scheduler_why}).")
        if c.get("lora_drain_wait_threshold") and eng.scheduler is not None and not eng.scheduler.drainer:
            raise UnsupportedCase(f"lora_drain_wait_threshold={c['lora_drain_wait_threshold']}: SGLang {eng.version} "
                                  f"has no LoRADrainer (--lora-drain-wait-threshold: 0.5.12+); leave it 0 or out.")
        if c.get("disable_radix_cache") is False and (eng.scheduler is None or eng.scheduler.radix_cache is None):
            raise UnsupportedCase(f"disable_radix_cache=False: the radix cache is driven on SGLang's scheduler path "
                                  f"only, and not on {eng.version} ({eng.scheduler_why or eng.scheduler.radix_why}); "
                                  f"leave it True or out.")
        missing = sorted(set(c["target_modules"]) - set(api.modules))
        if missing:
            raise UnsupportedCase(f"target modules {missing}: SGLang {eng.version}'s LoRA pool has no buffers for them "
                                  f"(it has {', '.join(api.modules)}); draw --lora-target-modules from those.")
        self.server_args = api.server_args(
            eng.ServerArgs, model_path=eng.model_dir, device=ctx.device, dtype=c["dtype"], skip_tokenizer_init=True,
            enable_lora=True, lora_backend=c["backend"], max_loras_per_batch=c["max_loras_per_batch"],
            max_lora_rank=c["max_lora_rank"], lora_target_modules=list(c["target_modules"]),
            lora_eviction_policy=c["eviction_policy"], max_lora_chunk_size=c.get("chunk", 16),
            max_loaded_loras=c.get("max_loaded_loras"), **scheduler_knobs(
                c, eng.scheduler is not None, eng.scheduler is not None and eng.scheduler.drainer),
            **sparse.server_knobs(c.get("moe")))
        api.publish(self.server_args, ctx.device, eng.hf_config)
        # a MoE case: the config names its experts; a tied case (``tie``): lm_head is the embedding (model.py)
        self.hf = tiny.case_config(sparse.hf_config(eng.hf_config, c.get("moe")), c.get("tie", False))
        if c.get("moe"):
            why = sparse.unavailable() or (None if ctx.device == "cpu" else
                                           f"MoE cases run on the CPU only (device {ctx.device!r}: moe.py)")
            if why:
                raise UnsupportedCase(f"moe case on SGLang {eng.version}: {why}.")
            sparse.cpu_answers()
        self.model = tiny.build(self.hf, self.dtype, self.device)
        self.base = tiny.base_weights(self.model)
        self.mgr = api.manager(
            eng.LoRAManager, base_model=self.model, base_hf_config=self.hf,
            max_loras_per_batch=c["max_loras_per_batch"], load_config=eng.LoadConfig(), dtype=self.dtype,
            server_args=self.server_args, lora_backend=c["backend"], max_lora_rank=c["max_lora_rank"],
            target_modules=set(c["target_modules"]), lora_paths=[])
        self.graphs = None
        if c["graph_bs"]:  # the decode graph runner, at start-up: before any adapter is loaded
            api.init_graph(self.mgr, c["graph_bs"])
            self.graphs = DecodeGraphs(self, c["graph_bs"], skip_prepare="capture_without_lora_batch" in case.faults)
        self.front = Frontend(eng.frontend, self.mgr, self.server_args) if eng.frontend else None
        if self.front is None and (c.get("max_loaded_loras") or any(a.get("pinned") for a in c["adapters"].values())):
            raise UnsupportedCase(f"--max-loaded-loras and pinned adapters are drawn only where SGLang "
                                  f"{eng.version}'s tokenizer manager imports (scripts/sglang_setup.sh {eng.version}: "
                                  f"stamp frontend-ok).")
        # SGLang's scheduler and ForwardBatch.init_new over its own pools (scheduler.py), where the release has them
        self.server = Server(eng.scheduler, self) if eng.scheduler is not None else None
        plant(self.mgr, set(case.faults), self.front, self.model, self.server)
        self.planted = contextlib.ExitStack()  # faults planted through mock.patch.object, undone by close()
        backend_faults.plant(self.planted, self.faults, self.mgr, self.graphs)
        # SGLang's LogitsProcessor, made as the model makes it at start-up (its chunk knobs read then: run())
        self.logits = sglang_batch.Logits(eng.hf_config) if eng.logits_processor else None
        self.refs: dict = {}      # name -> LoRARef of the loaded adapter (without the front end)
        self.files: dict = {}     # name -> AdapterFiles of its latest successful load
        self.loads = 0

    # -- the adapter-management API (tokenizer manager -> scheduler -> model runner) -----------------------
    def load(self, op) -> None:
        if self.front is not None:
            return self._front_load(op)
        name, v = op["name"], op.get("v", 0)
        if name in self.refs:
            raise InvalidCase(f"load: {name!r} is loaded already (the registry refuses it before the engine).")
        path = adp.write(self.workdir, self.hf, self.c["adapters"][name], name, v)
        self.loads += 1
        ref = self.eng.LoRARef(lora_id=f"{self.loads:04d}{name}", lora_name=name, lora_path=path, pinned=False)
        result = self.mgr.load_lora_adapter(ref)
        if not result.success:
            self.ctx.check("load", [f"loading {name!r} (rank {self.c['adapters'][name]['r']}) failed: "
                                    f"{result.error_message}"])
            return
        self.refs[name], self.files[name] = ref, adp.AdapterFiles(path)

    def unload(self, op) -> None:
        if self.front is not None:
            return self._front_unload(op)
        name = op["name"]
        if name not in self.refs:
            raise InvalidCase(f"unload: {name!r} is not loaded.")
        ref = self.refs.pop(name)
        self.files.pop(name)
        result = self.mgr.unload_lora_adapter(ref)
        problems = [] if result.success else [f"unloading {name!r} failed: {result.error_message}"]
        self.ctx.check("unload", problems + check_unloaded(self.mgr, ref.lora_id, name))

    # -- a batch -------------------------------------------------------------------------------------
    def _forward_batch(self, mode: str, lora_ids: list, lens: list, tokens=None, logprob=None):
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch
        fm = self.eng.ForwardMode.EXTEND if mode == "extend" else self.eng.ForwardMode.DECODE
        return sglang_batch.forward_batch(ForwardBatch, fm, lora_ids, lens, self.device, tokens, logprob)

    def step(self, op) -> None:
        # the one decision of the path (cases.step_path): the coverage features name it as it is taken here
        path = step_path(op, self.server is not None, self.front is not None,
                         self.server is not None and not self.server.results_why)
        if path == "scheduler":  # (input logprobs where the release's result processing is not driven: below)
            return self._served_step(op)
        if path == "tokenizer-manager":
            return self._front_step(op)
        names = list(op["reqs"])
        if any(n is not None and n not in self.refs for n in names):
            raise InvalidCase("step: a request names an adapter that is not loaded (the registry refuses it).")
        ids = [None if n is None else self.refs[n].lora_id for n in names]
        if not self.mgr.validate_lora_batch(set(ids)):
            raise InvalidCase(f"step: {len(set(ids))} adapters (base included) do not fit max_loras_per_batch "
                              f"{self.c['max_loras_per_batch']}: the scheduler would not admit this batch.")
        mode = op.get("mode", "decode")
        lens = list(op.get("lens", [1] * len(names))) if mode == "extend" else [1] * len(names)
        self._batch(names, ids, mode, lens, op.get("seed", 0), op.get("logprob"))

    def _served_step(self, op) -> None:
        names = list(op["reqs"])
        for i, n in enumerate(names):
            if n is not None and n not in self.files:
                raise InvalidCase(f"step: request {i} names {n!r}, never loaded (the tokenizer manager refuses it).")
            if self.front is None and n is not None and n not in self.refs:
                raise InvalidCase(f"step: request {i} names {n!r}, not loaded (the registry refuses it).")
        before = self.front.registered() if self.front is not None else {}
        problems, drain = serving.serve(self, self.server, op)
        if self.front is not None:
            problems += check_frontend(self.front, self.mgr, before, self.c.get("max_loaded_loras"), _pinned(before))
        self.ctx.check("step", problems)
        for how, problem in drain:  # a drain that never started and one that never ended: two findings
            self.ctx.check(f"step.drain[{how}]", [problem])

    # -- through the adapter-management API and the scheduler (frontend.py) ------------------------------
    def _front_load(self, op) -> None:
        name, v = op["name"], op.get("v", 0)
        pinned = bool(self.c["adapters"][name].get("pinned"))
        before = self.front.registered()
        path = adp.write(self.workdir, self.hf, self.c["adapters"][name], name, v)
        result = self.front.load(name, path, pinned)
        limit, evicts = self.c.get("max_loaded_loras"), self.front.fe.evicts
        refused = (name in before or (pinned and len(_pinned(before)) >= self.c["max_loras_per_batch"] - 1)
                   or (limit is not None and not evicts and len(before) >= limit))
        problems = []
        if result.success:
            self.files[name] = adp.AdapterFiles(path)
            if name in before:
                problems.append(f"loading {name!r} succeeded while {name!r} was registered already")
        elif not refused:
            problems.append(f"loading {name!r} (rank {self.c['adapters'][name]['r']}, pinned {pinned}) failed: "
                            f"{result.error_message}")
        self.ctx.check("load", problems + check_frontend(self.front, self.mgr, before, limit, _pinned(before)))

    def _front_unload(self, op) -> None:
        name = op["name"]
        before = self.front.registered()
        result = self.front.unload(name)
        problems = []
        if result.success:
            if name not in before:
                problems.append(f"unloading {name!r} succeeded while it was not registered")
        elif name in before:
            problems.append(f"unloading {name!r} failed: {result.error_message}")
        self.ctx.check("unload", problems + check_frontend(self.front, self.mgr, before, self.c.get("max_loaded_loras"),
                                                           _pinned(before) - {name}))

    def _front_step(self, op) -> None:
        names = list(op["reqs"])
        mode = op.get("mode", "decode")
        lens = list(op.get("lens", [1] * len(names))) if mode == "extend" else [1] * len(names)
        for i, n in enumerate(names):
            if n is not None and n not in self.files:
                raise InvalidCase(f"step: request {i} names {n!r}, never loaded (the tokenizer manager refuses it).")
        before = self.front.registered()
        slots, problems = self.c["max_loras_per_batch"], []

        def run_batch(batch):
            ids = [uid for _, _, uid in batch]
            if len(set(ids)) > slots:
                problems.append(f"the scheduler admitted a batch of {len(set(ids))} adapters (base included) into "
                                f"{slots} slots")
                return  # the engine would be asked for slots it does not have
            lp = op.get("logprob")
            self._batch([n for _, n, _ in batch], ids, mode, [lens[i] for i, _, _ in batch], op.get("seed", 0),
                        None if lp is None else [lp[i] for i, _, _ in batch])

        problems += self.front.serve(names, run_batch, ignore_running="admission_ignores_running" in self.faults)
        self.ctx.check("step", problems + check_frontend(self.front, self.mgr, before, self.c.get("max_loaded_loras"),
                                                         _pinned(before)))

    def path(self, graph: int | None, fb) -> str:
        """What a step's logits went through, named in its results' labels (so in its findings' signatures): the
        backend and the graph mode (``eager``; ``graph``, with the variant SGLang's graph runner replays where it
        records several: ``graph lora`` / ``graph nolora``). Two bugs of one backend, one eager and one in the graph
        (G1 and G2 of torch_native), are then two findings of one campaign, not one kept and one merged into it."""
        if graph is None:
            return f"{self.c['backend']}, eager"
        variant = self.graphs.variants.resolve(fb) if fb is not None else None
        return f"{self.c['backend']}, graph" + (f" {variant}" if variant else "")

    def _check_logprobs(self, got, ref_all, tokens: list, lens: list, starts: list, path: str) -> None:
        """The input logprobs a user asked for (``return_logprob`` with a logprob start per request) are those of
        each request's own adapter, in the batch's order, however the LogitsProcessor chunks its lm_head passes."""
        want = _expected_logprobs(ref_all, tokens, lens, starts)
        if got is None and not want.numel():
            return  # every request's start is its length: SGLang computes no input logprobs (extend_return_logprob)
        if got is None or tuple(got.shape) != tuple(want.shape):
            shape = None if got is None else tuple(got.shape)
            self.ctx.check(f"step.logprobs[{path}]", [f"the LogitsProcessor returned {shape} input logprobs for "
                                             f"{tuple(want.shape)} asked (starts {starts}, lens {lens})"])
            return
        rows, off = [], 0
        for n, s in zip(lens, starts):
            rows += [off + p for p in range(s, n)]
            off += n
        scale = ref_all[rows].abs().amax(dim=-1).clamp(min=1.0) if rows else want.new_ones(0)
        self.ctx.compare(f"step.logprobs[{path}]", got / scale.to(got), want / scale, self.compared_as)

    def _batch(self, names: list, ids: list, mode: str, lens: list, seed: int, logprob=None) -> None:
        g = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, self.eng.hf_config.vocab_size, (sum(lens),), generator=g).to(self.device)
        logprob = logprob if mode == "extend" else None
        fb = self._forward_batch(mode, ids, lens, tokens, logprob)
        self.api.prepare(self.mgr, fb)
        self.forward(fb, names, ids, mode, lens, tokens, logprob)

    def forward(self, fb, names: list, ids: list, mode: str, lens: list, tokens, logprob=None):
        """The forward of a prepared batch ``fb`` (its LoRA part done: ``ForwardBatch.init_new``'s or
        ``api.prepare``) and the checks of its results; returns the logits of the rows lm_head is read for (the
        last token per request of an extend batch; every row of a decode batch)."""
        return self.forward_output(fb, names, ids, mode, lens, tokens, logprob).logits

    def forward_output(self, fb, names: list, ids: list, mode: str, lens: list, tokens, logprob=None):
        """``forward``'s logits with what the scheduler's result processing takes (``Forwarded``): SGLang's
        ``LogitsProcessorOutput`` of the batch, the float64 reference of every row and the path it went."""
        with tracking.quiet():  # the check's reads of the pool are the harness's, not SGLang's
            self.ctx.check("pool", check_pool(self.mgr, ids, self.files, names))
        rows = [n for n, k in zip(names, lens) for _ in range(k)]
        if self.c.get("moe") and not sparse.fits(self.c, len(rows)):
            raise InvalidCase(f"a forward of {len(rows)} tokens with moe {self.c['moe']} and max_loras_per_batch "
                              f"{self.c['max_loras_per_batch']}: SGLang would align its experts with compiled code "
                              f"(at most {sparse.max_tokens(self.c)} tokens: moe.py); draw smaller steps.")
        # the rows lm_head's logits are read for: an extend batch's last token per request
        last = [sum(lens[: i + 1]) - 1 for i in range(len(lens))] if mode == "extend" else None
        graph = self.graphs.pick(len(names)) if self.graphs is not None and mode == "decode" else None
        logprobs = output = None
        if graph is not None:  # the decode graph runner replays the smallest captured graph that holds it
            logits = self.graphs.replay(graph, tokens, fb)
        elif self.logits is not None:  # SGLang's LogitsProcessor, as the model's forward calls it
            with torch.no_grad():
                output = self.logits.output(tokens, tiny.hidden(self.model, tokens), self.model.lm_head, fb)
            logits, logprobs = output.next_token_logits, getattr(output, "input_token_logprobs", None)
            logits = output.next_token_logits = logits[:, : self.eng.hf_config.vocab_size]
        else:
            with torch.no_grad():
                logits = tiny.forward(self.model, tokens, last)
        routing = tiny.routes(self.model) if self.c.get("moe") else None
        with tracking.quiet():
            ref_all = tiny.reference(self.hf, self.base, tokens.tolist(),
                                     [None if n is None else self.files[n] for n in rows], routing=routing)
        ref = ref_all if last is None else ref_all[last]
        # relative to each row's largest logit: with scalings up to 8 through six LoRA'd layers the logits reach
        # 1e4, and float32 rounding of those leaves ~1e-3 on a small logit that cancels out of them (a 1e-4
        # tolerance on the element itself then reports rounding: 0.00925 on an 85.35 in a row of 26700s)
        scale = ref.abs().amax(dim=-1, keepdim=True).clamp(min=1.0)
        path = self.path(graph, fb)
        if self.c.get("moe"):
            self._check_experts(rows, path)
        self.ctx.compare(f"step.logits[{path}]", logits / scale.to(logits), ref / scale, self.compared_as)
        if logprob is not None:
            self._check_logprobs(logprobs, ref_all, tokens.tolist(), lens, logprob, path)
        kept = rows if last is None else [rows[i] for i in last]
        base_rows = [i for i, n in enumerate(kept) if n is None]
        if base_rows:
            ids = tokens
            if graph is not None:  # the base model over the graph's padded rows: the same GEMM shapes
                ids = torch.cat([ids, ids.new_zeros(graph - len(ids))])
            with torch.no_grad(), tracking.quiet():
                via = None if graph is not None or self.logits is None else (
                    lambda h, head: self.logits(tokens, h, head, fb)[0])
                base = tiny.base_path_logits(self.model, ids, last, via)
            bad = [i for i in base_rows if not torch.equal(logits[i], base[i])]
            self.ctx.check(f"base-rows[{path}]", [
                f"token {i} (a request without an adapter) differs from the base model's logits (max |diff| "
                f"{float((logits[i] - base[i]).abs().max()):.3g})" for i in bad[:3]])
        if output is None:  # the graph's or the target's own lm_head logits, as the LogitsProcessor hands them on
            output = sglang_batch.logits_output(logits)
        return Forwarded(logits, output, ref_all, path)

    def _check_experts(self, rows: list, path: str) -> None:
        """Each MoE layer at its own input: a row without an adapter equals SGLang's MoE runner without LoRA exactly; a
        row with one, the float64 experts of its adapter's files (routed as SGLang's TopK routed it)."""
        for i, layer in enumerate(self.model.model.layers):
            block = getattr(layer, sparse.BLOCK)
            x, _, out = block.last
            pre = f"model.layers.{i}.{sparse.BLOCK}.experts"
            with torch.no_grad(), tracking.quiet():
                base = sparse.base(block, x)
                xs, route = x.detach().cpu().double(), sparse.routes(block)
                want = torch.stack([sparse.reference(
                    xs[t], route[t], self.base[f"{pre}.w13_weight"], self.base[f"{pre}.w2_weight"],
                    sparse.delta(self.files.get(n), pre)) for t, n in enumerate(rows)])
            scale = want.abs().amax(dim=-1, keepdim=True).clamp(min=1.0)
            self.ctx.compare(f"step.experts[{path}]", out / scale.to(out), want / scale, torch.float16)
            bad = [t for t, n in enumerate(rows) if n is None and not torch.equal(out[t], base[t])]
            self.ctx.check(f"base-rows.experts[{path}]", [
                f"token {t} (a request without an adapter) differs from SGLang's MoE runner without LoRA (max |diff| "
                f"{float((out[t] - base[t]).abs().max()):.3g})" for t in bad[:3]])


@dataclasses.dataclass
class Forwarded:
    """A batch's forward (``Session.forward_output``): the logits of the rows lm_head is read for, SGLang's
    ``LogitsProcessorOutput`` of them, the float64 reference of every row, the path's label."""
    logits: torch.Tensor
    output: object
    ref: torch.Tensor
    path: str


def _expected_logprobs(ref_all, tokens: list, lens: list, starts: list):
    """Each asked-for input logprob from the float64 reference: position ``p`` of a request from its logprob start,
    the log-softmax of its own adapter's logits at ``p``, at the token the scheduler asks for there."""
    want = sglang_batch.input_logprob_token_ids(tokens, lens, starts)
    rows, off = [], 0
    for n, s in zip(lens, starts):
        rows += [off + p for p in range(s, n)]
        off += n
    lp = torch.log_softmax(ref_all[rows], dim=-1) if rows else ref_all.new_zeros((0, ref_all.shape[-1]))
    return lp[torch.arange(len(rows)), torch.tensor(want, dtype=torch.long)]


def _served(case) -> bool:
    """Whether the case asks for what only SGLang's scheduler path runs (serving.py): requests arriving in later
    rounds, generating several tokens or sharing a prompt stem, or the LoRA drainer (elsewhere those would be
    dropped silently)."""
    return bool(case.config.get("lora_drain_wait_threshold")) or any(
        op.get("arrive") is not None or op.get("new") is not None or op.get("stem") is not None for op in case.ops)


def _pinned(registered: dict) -> set:
    """The names of the registered adapters that are pinned (the user's pin, kept by implicit reloads)."""
    return {n for n, ref in registered.items() if ref.pinned}


def run(case, ctx, eng) -> None:
    import tempfile
    # one case is one server: none of the worker's earlier cases' compiled kernels (SGLang keeps them per process,
    # keyed for one server's pool: a rank-4 case after a rank-8 one ran the rank-8 csgmv shrink; kernel_caches.py)
    kernel_caches.empty()
    with tempfile.TemporaryDirectory(prefix="sglang_engine-") as workdir, \
            sglang_batch.logprob_env(case.config.get("logprob_chunk")):
        s = Session(case, ctx, eng, workdir)
        try:
            for i, op in enumerate(case.ops):
                if s.server is not None and s.server.abandoned:
                    break  # serving.serve: a step left requests in the scheduler after its reported problem
                with ctx.op(i, op):
                    getattr(s, op["op"])(op)
        finally:
            s.planted.close()
            if s.server is not None:
                s.server.close()
            if s.front is not None:
                s.front.close()


__all__ = ["FAULTS", "run"]
