"""``sglang_engine``'s cases, features, API generations and sweep rows, without SGLang."""

from functools import partial
from importlib import import_module

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzrunner.coverage import features_of

cases = import_module("fuzzrunner.targets.sglang_engine.cases")
api = import_module("fuzzrunner.targets.sglang_engine.api")
sweep = import_module("fuzzrunner.targets.sglang_lora.sweep")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
LINEAR = api.ALL_MODULES[:4]


@FAST
@given(st.data(), st.sampled_from([api.ALL_MODULES, LINEAR]), st.booleans(), st.booleans(), st.booleans(),
       st.booleans())
def test_drawn_cases_use_only_the_releases_target_modules_and_declared_features(data, modules, logprobs, sched,
                                                                               drainer, radix):
    case = data.draw(cases.sglang_engine_cases((), max_ops=8, device="cpu", modules=modules, logprobs=logprobs,
                                               scheduler=sched, drainer=drainer, radix=radix))
    c = case.config
    assert set(c["target_modules"]) <= set(modules)
    peft = {m for a in c["adapters"].values() for m in a["modules"]}
    assert {cases.SERVER_NAME[m] for m in peft} <= set(c["target_modules"])
    reached = features_of(partial(cases.features, scheduler=sched), case)
    assert set(reached) <= set(cases.feature_space(modules, logprobs=logprobs, scheduler=sched, drainer=drainer,
                                                   radix=radix))
    # --disable-radix-cache only where the release's radix cache is driven on its scheduler path; stems only with
    # the radix cache on, on steps the scheduler serves
    assert ("disable_radix_cache" in c) == (sched and radix)
    assert all(c.get("disable_radix_cache") is False and op.get("logprob") is None
               for op in case.ops if "stem" in op)
    # the drain threshold only where the release has a LoRADrainer (0.5.12+: 0.5.10 - 0.5.11's ServerArgs has none)
    assert ("lora_drain_wait_threshold" in c) == (sched and drainer)
    # the scheduler's knobs and the requests' rounds are drawn only where SGLang's scheduler is driven, and a
    # step served by it gives each request a token count and an arrival round (serving.py)
    assert ("max_running_requests" in c) == sched
    for op in case.ops:
        if op["op"] == "step" and sched and op.get("logprob") is None:
            assert len(op["new"]) == len(op["arrive"]) == len(op["reqs"]) and min(op["new"]) >= 1
        elif op["op"] == "step":
            assert "new" not in op and "arrive" not in op
    # input logprobs are asked only where SGLang's LogitsProcessor is driven, of extend steps, one start per
    # request within its tokens (runner.check_case refuses anything else)
    assert ("logprob_chunk" in c) == logprobs
    for op in case.ops:
        if op.get("logprob") is not None:
            assert logprobs and op["mode"] == "extend"
            assert all(0 <= s <= n for s, n in zip(op["logprob"], op["lens"], strict=True))


@FAST
@given(st.data(), st.booleans(), st.booleans())
def test_moe_cases_fit_where_sglang_aligns_without_compiled_code(data, sched, moe):
    """A MoE case (moe.py) targets both expert projections, draws no decode graph, and no forward of it holds more
    tokens than SGLang's Triton / naive alignments take (the runner refuses a larger one as an invalid case)."""
    sparse = import_module("fuzzrunner.targets.sglang_engine.moe")
    backends = ("triton", "csgmv", "torch_native", "triton_v2")
    case = data.draw(cases.sglang_engine_cases((), max_ops=8, device="cpu", scheduler=sched, moe=moe,
                                               backends=backends))
    c = case.config
    assert set(features_of(partial(cases.features, scheduler=sched), case)) <= set(cases.feature_space(
        backends=backends, scheduler=sched, moe=moe))
    if "moe" not in c:
        return
    assert moe and {"gate_up_proj", "down_proj"} <= set(c["target_modules"]) and c["graph_bs"] == 0
    # triton_v2 pairs only with the CUDA-only MoeLoraRunner; virtual experts over a shared factor align compiled
    assert c["backend"] != "triton_v2" and not (c["moe"]["shared_outer"] and c["moe"]["virtual"])
    assert c["dtype"] == ("float16" if c["moe"]["virtual"] else "float32")
    for op in case.ops:
        if op["op"] == "step":
            n = len(op["reqs"])
            assert sparse.fits(c, max(n, sum(op.get("lens", [1] * n)))), (c["moe"], op)


def test_a_campaigns_generation_draws_every_moe_layout():
    """Generated as a campaign generates them (one Hypothesis run of 77 cases, the sweep's seed 0; most of its cases
    are its mutator's copies of one draw onto another of the same strategy), the MoE cases take each expert layout
    (moe.py): drawn as two booleans, virtual experts needed them to differ and the copies made them equal (0 of the
    63 MoE cases of seeds 0 and 1000003 had virtual experts; docs/sglang.md's clean MoE campaign never reached
    moe.virtual_experts=on)."""
    from hypothesis import Phase, Verbosity
    from hypothesis import seed as hseed
    layouts: list = []
    strategy = cases.sglang_engine_cases((), max_ops=8, device="cpu", moe=True, logprobs=True, frontend=True,
                                         scheduler=True, backends=("triton", "csgmv", "torch_native"))

    # the three seeds docs/sglang.md counts over ("MoE LoRA"): the mutator clumps one run's MoE cases (seed 0 alone
    # gave 3 MoE cases of 77 once the small KV pool's draws came after the scheduler cases', 2026-12-07)
    for s in (0, 1000003, 2000006):
        @settings(max_examples=77, deadline=None, database=None, phases=[Phase.generate], verbosity=Verbosity.quiet,
                  suppress_health_check=list(HealthCheck))
        @hseed(s)
        @given(strategy)
        def run(case):
            m = case.config.get("moe")
            if m:
                layouts.append("virtual" if m["virtual"] else "shared-outer" if m["shared_outer"] else "per-expert")
        run()
    assert set(layouts) == set(cases.MOE_LAYOUTS), layouts


def test_the_moe_bounds_are_sglangs():
    """tokens * top_k <= 64 (moe_align_small_numel's SMALL_NUMEL_LIMIT) and * 8 <= experts * max_loras (the naive LoRA
    alignment's _SPARSITY_FACTOR)."""
    sparse = import_module("fuzzrunner.targets.sglang_engine.moe")
    c = {"moe": {"experts": 64, "top_k": 2}, "max_loras_per_batch": 2}
    assert sparse.max_tokens(c) == 8 and sparse.fits(c, 8) and not sparse.fits(c, 9)
    c = {"moe": {"experts": 128, "top_k": 1}, "max_loras_per_batch": 3}
    assert sparse.max_tokens(c) == 48 and sparse.fits(c, 48) and not sparse.fits(c, 49)
    c = {"moe": {"experts": 128, "top_k": 2}, "max_loras_per_batch": 3}
    assert sparse.max_tokens(c) == 24 and not sparse.fits(c, 33)


def test_the_logprob_chunk_knob_is_set_under_both_names_and_restored():
    batch = import_module("fuzzrunner.targets.sglang_engine.batch")
    import os
    names = [n for pair in batch.CHUNK_ENV for n in pair]
    before = {n: os.environ.get(n) for n in names}
    with batch.logprob_env(2):
        assert [os.environ[n] for n in names] == ["1", "2", "1", "2"]
    with batch.logprob_env(0):
        assert os.environ["SGLANG_ENABLE_LOGPROB_CHUNK"] == os.environ["SGLANG_ENABLE_LOGITS_PROCESSER_CHUNK"] == "0"
    with batch.logprob_env(None):
        assert {n: os.environ.get(n) for n in names} == before
    assert {n: os.environ.get(n) for n in names} == before


def test_input_logprob_token_ids_are_the_next_tokens_from_each_start():
    batch = import_module("fuzzrunner.targets.sglang_engine.batch")
    # two requests [10 11 12] from 0, [20 21] from 2 (none asked): 11, 12, then 0 after the first's last token
    assert batch.input_logprob_token_ids([10, 11, 12, 20, 21], [3, 2], [0, 2]) == [11, 12, 0]
    assert batch.input_logprob_token_ids([10, 11, 12, 20, 21], [3, 2], [2, 1]) == [0, 0]


def _api(**kw):
    base = dict(version="x", manager_params=frozenset({"tp_size", "tp_rank"}))
    return api.EngineAPI(**(base | kw))


def test_the_generation_follows_what_the_release_has():
    assert _api().generation == "e0"
    assert _api(fetch=True).generation == "e1"
    assert _api(fetch=True, runtime_context=True).generation == "e2"
    assert _api(fetch=True, runtime_context=True, fixture=print,
                manager_params=frozenset({"server_args"})).generation == "e3"


def test_server_args_keep_only_the_knobs_the_release_has():
    a = _api(server_fields=frozenset({"lora_backend", "max_loras_per_batch"}))
    got = a.server_args(dict, lora_backend="csgmv", max_loras_per_batch=2, max_lora_chunk_size=16)
    assert got == {"lora_backend": "csgmv", "max_loras_per_batch": 2}


def test_a_sweep_row_of_an_engine_finding_shows_its_program():
    case = {"target": "sglang_engine", "config": {"backend": "triton", "max_loras_per_batch": 2,
                                                  "eviction_policy": "fifo", "graph_bs": 2,
                                                  "target_modules": ["qkv_proj"]},
            "ops": [{"op": "load", "name": "a0"}, {"op": "step", "reqs": ["a0", None], "mode": "decode"},
                    {"op": "unload", "name": "a0"}, {"op": "load", "name": "a0", "v": 1}]}
    assert sweep._ops(case) == ("triton L=2 fifo graph≤2 [qkv_proj]: load(a0) → step[a0, -](decode) → unload(a0) "
                                "→ load(a0, v1)")
    # the LogitsProcessor's knobs: the logprob passes' chunk and each request's logprob start
    lp = {"target": "sglang_engine", "config": dict(case["config"], logprob_chunk=2),
          "ops": [{"op": "step", "reqs": ["a0", None], "mode": "extend", "lens": [3, 1], "logprob": [0, 1]}]}
    assert sweep._ops(lp) == ("triton L=2 fifo graph≤2 logprob-chunk 2 [qkv_proj]: "
                              "step[a0, -](extend [3, 1] logprob [0, 1])")
    target_error = {"signature": {"tool": "target", "kind": "crash"}, "case": case}
    assert sweep.category(target_error) == "target"


def test_engine_findings_are_triaged_by_what_the_release_has(tmp_path, monkeypatch):
    site = import_module("fuzzrunner.targets.sglang_lora.site")
    old, new = tmp_path / "old" / "site", tmp_path / "new" / "site"
    for tree, pool, kernel in ((old, "class LoRAMemoryPool: ...", "w_tile = tl.load(w_ptrs)"),
                               (new, "def remove_lora(self, uid): ...", "n_mask = n_offset < N")):
        (tree / "sglang/srt/lora/triton_ops").mkdir(parents=True)
        (tree / "sglang/srt/lora/mem_pool.py").write_text(pool)
        (tree / "sglang/srt/lora/triton_ops/sgemm_lora_b.py").write_text(kernel)
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    case = {"target": "sglang_engine", "config": {"backend": "triton"}, "ops": []}
    unload = {"signature": {"tool": "state", "kind": "state-violation", "tensor": "unload"}, "case": case}
    numeric = {"signature": {"tool": "numeric", "kind": "numeric-mismatch", "tensor": "step.logits"}, "case": case}
    # a graph replay's base-model row that the unmasked lanes of the row before it wrote into (0.5.5, graph_bs 4)
    base_row = {"signature": {"tool": "state", "kind": "state-violation", "tensor": "base-rows"}, "case": case}
    # --max-loaded-loras' eviction inside a load (the adapter-management API) unloads through the same path
    evicted = {"signature": {"tool": "state", "kind": "state-violation", "tensor": "load"}, "case": case,
               "message": "op 4 (load): load: 'a2' still maps to pool slot 1 (uid_to_buffer_id)"}
    assert [sweep.category(f, "old") for f in (unload, numeric, base_row, evicted)] == \
        ["#21380", "n-mask", "n-mask", "#21380"]
    assert [sweep.category(f, "new") for f in (unload, numeric, base_row, evicted)] == ["untriaged"] * 4


def test_engine_findings_of_release_bugs_are_triaged_by_the_release_files(tmp_path, monkeypatch):
    """#14177 (a read of the triton backend's graph seg_indptr), #31910 (lm_head LoRA's logprob passes), #18649
    (lm_head LoRA routed over unpruned rows), #28371 (a csgmv graph's frozen grid), emb-unzeroed (an adapter without embedding
    LoRA reads the slot's never-written embedding buffers: 0.5.6.post2 - 0.5.9), csgmv-embedding (0.5.8's csgmv
    backend has no run_lora_a_embedding): each only where the release's files have the cause."""
    site = import_module("fuzzrunner.targets.sglang_lora.site")
    alloc = "        def init_embedding_buffer(\n" + "\n" * 8 + "            buffer[m] = torch.empty(shape)\n"
    for v, pool, chunked in (("old", alloc, "class ChunkedSgmvLoRABackend: ..."),
                             ("new", alloc + "        # " + sweep.EMBEDDING_ZEROED + "\n",
                              "    def run_lora_a_embedding(self): ...")):
        lora = tmp_path / v / "site" / "sglang" / "srt" / "lora"
        (lora / "backend").mkdir(parents=True)
        (lora / "triton_ops").mkdir()
        (lora / "mem_pool.py").write_text(pool)
        (lora / "backend" / "chunked_backend.py").write_text(chunked)
        (lora / "backend" / "triton_backend.py").write_text(
            "seg_indptr = torch.empty(bs + 1)\n" + ("            " + sweep.LM_HEAD_PASSES_DROPPED + "\n" if v == "old" else ""))
        (lora / "triton_ops" / "sgemm_lora_a.py").write_text("seg_start = tl.load(seg_indptr + batch_id)\n")
        (lora / "layers.py").write_text("class ParallelLMHeadWithLoRA: ...\n"
                                        + ("" if v == "old" else "    lm_head_batch_info = None\n"))
        (lora / "triton_ops" / "chunked_sgmv_shrink.py").write_text(
            "grid = (cdiv(N, BLOCK_N), num_segments)\n" if v == "old" else "segment_grid = weight_indices.shape[0]\n")
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))

    def finding(backend, graph_bs=0, **sig):
        return {"signature": {"tool": "shadow", "kind": "uninitialized-read"} | sig,
                "case": {"target": "sglang_engine", "config": {"backend": backend, "graph_bs": graph_bs}, "ops": []}}
    seg = finding("triton", tensor="torch.empty@triton_backend.py:1", kernel="_sgemm_lora_a_kernel",
                  location="triton_ops/sgemm_lora_a.py:1")
    emb = finding("triton", tensor="torch.empty@mem_pool.py:10", kernel="_embedding_lora_a_kernel",
                  location="triton_ops/embedding_lora_a.py:94")
    crash = finding("csgmv", tool="python", kind="crash", kernel="AttributeError",
                    location="triton_ops/chunked_sgmv_expand.py:163")
    # a csgmv decode graph replays the capture's segment count (#28371): a mismatch with graphs, not without
    frozen = finding("csgmv", graph_bs=4, tool="numeric", kind="numeric-mismatch", tensor="step.logits")
    eager = finding("csgmv", graph_bs=0, tool="numeric", kind="numeric-mismatch", tensor="step.logits")
    # lm_head LoRA's input-logprob passes on triton: None.append in _prepare_lm_head_batch_info (#31910)
    passes = finding("triton", tool="python", kind="crash", kernel="AttributeError", location="triton_backend.py:343")
    # lm_head LoRA routed over every token while the LogitsProcessor keeps the last ones (#18649): the shrink reads
    # past its input x and writes past its output
    unpruned = [finding("triton", tool="shadow", kind="out-of-bounds", kernel="_sgemm_lora_a_kernel", tensor=t,
                        location=loc) for t, loc in (("_sgemm_lora_a_kernel:x", "triton_ops/sgemm_lora_a.py:90"),
                                                     ("torch.empty@triton_ops/sgemm_lora_a.py:147",
                                                      "triton_ops/sgemm_lora_a.py:111"))]
    # and the expand reads past the shrink's output (0.5.8, the logprob seed: sgemm_lora_b.py:92, the x load)
    unpruned.append(finding("triton", tool="shadow", kind="out-of-bounds", kernel="_sgemm_lora_b_kernel",
                            tensor="torch.empty@triton_ops/sgemm_lora_a.py:147", location="triton_ops/sgemm_lora_b.py:92"))
    # csgmv the same (0.5.9's fault-free campaign through the scheduler path, eighth stint: untriaged before): its
    # chunked shrink reads past x and writes past its output, the expand reads past the shrink's output
    unpruned += [finding("csgmv", tool="shadow", kind="out-of-bounds", kernel=k, tensor=t, location=loc)
                 for k, t, loc in (("_chunked_lora_shrink_kernel", "_chunked_lora_shrink_kernel:x",
                                    "triton_ops/chunked_sgmv_shrink.py:96"),
                                   ("_chunked_lora_shrink_kernel", "torch.empty@triton_ops/chunked_sgmv_shrink.py:157",
                                    "triton_ops/chunked_sgmv_shrink.py:119"),
                                   ("_chunked_lora_expand_kernel", "torch.empty@triton_ops/chunked_sgmv_shrink.py:157",
                                    "triton_ops/chunked_sgmv_expand.py:114"))]
    assert [sweep.category(f, "old") for f in (seg, emb, crash, frozen, eager, passes, *unpruned)] == \
        ["#14177", "emb-unzeroed", "csgmv-embedding", "#28371", "untriaged", "#31910"] + ["#18649"] * 6
    assert [sweep.category(f, "new") for f in (emb, crash, frozen, passes, *unpruned)] == ["untriaged"] * 10


def test_the_engine_target_takes_its_device_from_the_run_not_the_environment():
    """Issue 45 item 1: a target's device is the run's (``cases(..., device=)``, ``ctx.device``); the engine is
    imported the same for every device and fitted to a case's at its run (targets/sglang_engine/__init__.py)."""
    from pathlib import Path
    folder = Path(__file__).resolve().parents[2] / "targets" / "sglang_engine"
    for f in sorted(folder.glob("*.py")):
        text = f.read_text(encoding="utf-8")
        for needle in ("FUZZRUNNER_DEVICE", "FUZZRUNNER_SHADOW", "device_type("):
            assert needle not in text, f"{f.name} reads {needle}"


@FAST
@given(st.data(), st.sampled_from([("triton", "csgmv"), ("triton", "csgmv", "torch_native"),
                                   ("triton", "csgmv", "torch_native", "triton_v2")]))
def test_drawn_cases_use_only_the_releases_drivable_backends(data, backends):
    """``--lora-backend`` is drawn from what the release ships that runs without compiled code (backends.py):
    torch_native from 0.5.6.post1, triton_v2 in 0.5.23; each a declared feature of that release only."""
    case = data.draw(cases.sglang_engine_cases((), max_ops=4, device="cpu", backends=backends))
    assert case.config["backend"] in backends
    space = set(cases.feature_space(backends=backends))
    assert set(features_of(cases.features, case)) <= space
    assert {f"backend={b}" for b in backends} <= space


def test_the_drivable_backends_keep_the_release_registrys_and_leave_out_compiled_ones():
    backends = import_module("fuzzrunner.targets.sglang_engine.backends")
    registry = ["triton", "csgmv", "triton_v2", "ascend", "torch_native", "uno_cublas"]  # 0.5.23's, in its order
    import unittest.mock as mock
    with mock.patch.object(backends, "shipped", lambda: tuple(registry)):
        assert backends.drivable() == ("triton", "csgmv", "torch_native", "triton_v2")
        line = backends.describe()
    assert "not drawn: ascend" in line and "uno_cublas" in line
    with mock.patch.object(backends, "shipped", lambda: ("triton", "csgmv")):  # 0.5.5 - 0.5.7
        assert backends.drivable() == ("triton", "csgmv")


def test_the_backend_faults_are_refused_where_the_release_lacks_their_component():
    faults = import_module("fuzzrunner.targets.sglang_engine.backend_faults")
    import types
    old = types.SimpleNamespace(version="0.5.7", backends=("triton", "csgmv"))
    assert set(faults.unavailable(old)) == set(faults.FAULTS)
    mid = types.SimpleNamespace(version="0.5.16", backends=("triton", "csgmv", "torch_native"))
    assert set(faults.unavailable(mid)) == {"nolora_graph_for_adapters", "skip_inactive_from_first_request",
                                            "v2_expand_rank_past_bridge"}
    assert "triton_v2" in faults.unavailable(mid)["v2_expand_rank_past_bridge"]
    assert "triton_v2" in faults.unavailable(mid)["nolora_graph_for_adapters"]


def test_a_backend_fault_is_refused_where_the_drawn_backends_leave_out_the_one_it_needs():
    """A campaign of ``FUZZRUNNER_SGLANG_BACKENDS=triton`` with --fault torch_native_first_segment_slot drew no
    torch_native case and ended with "0 findings", exit 0; the fault is refused as one the release lacks is, for
    every backend fault (each names its backend once: ``NEEDS``) and every subset of the release's backends."""
    import itertools
    import types
    import unittest.mock as mock
    faults = import_module("fuzzrunner.targets.sglang_engine.backend_faults")
    variants = import_module("fuzzrunner.targets.sglang_engine.variants")
    assert set(faults.NEEDS) == set(faults.FAULTS)  # a new backend fault must say which backend it needs
    new = types.SimpleNamespace(version="0.5.23", backends=("triton", "csgmv", "torch_native", "triton_v2"))
    with mock.patch.object(variants, "recorded_for_skipping_backends", lambda: True):
        assert faults.unavailable(new) == faults.unavailable(new, new.backends) == {}
        for n in range(1, len(new.backends) + 1):
            for drawn in itertools.combinations(new.backends, n):
                refused = faults.unavailable(new, drawn)
                assert set(refused) == {f for f, b in faults.NEEDS.items() if b not in drawn}
                for f, why in refused.items():
                    assert f"needs the {faults.NEEDS[f]} backend, which FUZZRUNNER_SGLANG_BACKENDS leaves out" in why


def test_the_starvation_bound_is_the_steps_serial_work():
    """serving.work: each request's prefill chunks (one more for a piece that shares a round's chunk budget) and
    its decode steps; a request that finishes with its prefill has none."""
    serving = import_module("fuzzrunner.targets.sglang_engine.serving")
    assert serving.work([3], [1], 1 << 30) == 2
    assert serving.work([5, 1], [3, 1], 2) == (3 + 1) + (1 + 1) + 2
    assert serving.work([4, 4], [2, 2], 4) == 2 + 2 + 2


def test_a_drain_that_never_started_and_one_that_never_ended_are_two_findings():
    """The drain check's problem carries what the drainer did as its own check label (``step.drain[...]``): the
    sixth pass replayed SG2's seed, then SG1's, and both were ``state-violation of step``, so SG1's was filed under
    SG2's finding and its verdict read "no" on releases that have it."""
    import types
    serving = import_module("fuzzrunner.targets.sglang_engine.serving")

    def step(draining: dict, while_draining: dict) -> list:
        s = object.__new__(serving._Step)
        s.server = types.SimpleNamespace(sc=types.SimpleNamespace(lora_drainer=types.SimpleNamespace(
            max_wait_time_secs=1.0)), rounds=40)
        s.start, s.new, s.names = 0, [12, 12, 1] + [12] * 8, [None, "a0", "a1"] + ["a0"] * 8
        s.resolved = {i: n for i, n in enumerate(s.names)}
        s.queued = {i: 0 for i in range(3)} | {i: 2 + i for i in range(3, 11)}
        s.admitted = {0: 0, 1: 0, 2: 35} | {i: 3 + i for i in range(3, 11)}
        s.finished = {0: 13, 1: 13, 2: 36} | {i: 16 + i for i in range(3, 11)}
        s.decodes, s.draining, s.while_draining = list(range(1, 40)), draining, while_draining
        return s._check_drain()
    never_started = step({}, {})
    never_ended = step({("a0", "a1"): 3}, {"a0": list(range(3, 11))})
    slow = step({("a0", "a1"): 3}, {})
    assert [how for how, _ in never_started + never_ended + slow] == ["not started", "kept admitting", "slow"]
    assert "no running adapter was marked draining" in never_started[0][1]
    assert "'a0' was marked draining for it at round 3 and admitted 8 more" in never_ended[0][1]


def _drainer_releases(tmp_path, monkeypatch, files: dict) -> None:
    site = import_module("fuzzrunner.targets.sglang_lora.site")
    for v, drainer in files.items():
        (tmp_path / v / "site/sglang/srt/lora").mkdir(parents=True)
        (tmp_path / v / "site/sglang/srt/lora/lora_drainer.py").write_text(drainer)
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))


DRAIN_WAIT = ("op 3 (step): step: request 2 ('a1') waited 9 decode rounds past the drain threshold (1 rounds; "
              "from round 2 to 16) for its adapter's slot, above 7 (1 adapter(s) waiting x (ceil(1.2 x 5) + 1)): ")


def _drain_finding(pinned: bool, message: str) -> dict:
    config = {"backend": "triton", "adapters": {"p": {"r": 2, "pinned": pinned}, "a1": {"r": 2}}}
    return {"signature": {"tool": "state", "kind": "state-violation", "tensor": "step"}, "message": message,
            "case": {"target": "sglang_engine", "config": config, "ops": []}}


def test_a_drain_bound_violation_with_a_pinned_adapter_is_sg1_where_the_drainer_counts_running_adapters(
        tmp_path, monkeypatch):
    _drainer_releases(tmp_path, monkeypatch, {
        # the releases of SG1 (0.5.12 - 0.5.23) all have SG2's line too: "no running adapter was marked draining
        # for it" must not read as SG2's "'a0' was marked draining for it at round 3 and admitted ..." (it did)
        "old": "        if len(running_adapter_ids) < self.max_loras_per_batch:\n"
               "            <= stats.max_remaining_tokens * DRAIN_SCHEDULE_TOLERANCE\n",
        "new": "        elif all(self.can_fit(running_adapter_ids | {a}) for a in starving):\n"})
    message = DRAIN_WAIT + "no running adapter was marked draining for it"

    def finding(pinned):
        return _drain_finding(pinned, message)
    assert sweep.category(finding(True), "old") == "SG1"
    assert sweep.category(finding(False), "old") == "untriaged"  # no pin: not SG1's mechanism
    assert sweep.category(finding(True), "new") == "untriaged"   # a release with the fix
    # the base model's request: SG1's fix would not admit it either (the drainer drains for no None adapter)
    base = _drain_finding(True, message.replace("('a1')", "(None)"))
    assert sweep.category(base, "old") == "untriaged"



def test_sglang_backends_env_narrows_the_drawn_backends_and_refuses_one_not_driven(monkeypatch):
    import pytest

    from fuzzrunner.errors import HarnessError
    engine = import_module("fuzzrunner.targets.sglang_engine")
    shipped = ("triton", "csgmv", "torch_native", "triton_v2")
    monkeypatch.delenv("FUZZRUNNER_SGLANG_BACKENDS", raising=False)
    assert engine.drawn_backends(shipped) == shipped
    monkeypatch.setenv("FUZZRUNNER_SGLANG_BACKENDS", " triton_v2 ,")
    assert engine.drawn_backends(shipped) == ("triton_v2",)
    monkeypatch.setenv("FUZZRUNNER_SGLANG_BACKENDS", "triton_v3")
    with pytest.raises(HarnessError, match=r"^FUZZRUNNER_SGLANG_BACKENDS='triton_v3': triton_v3 is not a backend "
                                           r"this SGLang drives here; name some of triton, csgmv, torch_native, "):
        engine.drawn_backends(shipped)


def test_sglang_backends_env_leaves_out_the_seed_cases_of_the_other_backends(monkeypatch):
    """With ``FUZZRUNNER_SGLANG_BACKENDS=csgmv`` the campaign replayed every seed case (triton's and torch_native's
    too) and reported their findings; the docs say cases draw only the named backends. Every shipped seed is left
    out exactly when its backend is not drawn, for every subset of the backends, and the replay says how many in
    one line (engine/corpus_replay.py, the target's ``skip_seed``)."""
    import functools
    import itertools
    import types

    from fuzzrunner.corpus import load_any
    from fuzzrunner.engine import corpus_replay
    from fuzzrunner.target import Target
    engine = import_module("fuzzrunner.targets.sglang_engine")
    seeds_dir = engine.__path__[0] + "/seeds"
    seeds = {p: load_any(p)[0].config["backend"] for p in Target("t", "", None, print, seeds=seeds_dir).seed_files()}
    assert set(seeds.values()) >= {"triton", "csgmv", "torch_native"}
    shipped = ("triton", "csgmv", "torch_native", "triton_v2")
    for n in range(1, len(shipped) + 1):
        for drawn in itertools.combinations(shipped, n):
            monkeypatch.setenv("FUZZRUNNER_SGLANG_BACKENDS", ",".join(drawn))
            t = Target("sglang_engine", "", None, print, seeds=seeds_dir,
                       skip_seed=functools.partial(engine.seed_left_out, drawn=drawn))
            shard = types.SimpleNamespace(target=t, faults=(), result=types.SimpleNamespace(warnings=[]),
                                          emit=lambda e: None)
            kept = corpus_replay._seed_entries(shard, bad=lambda *a: None)
            assert {p for p, _, _ in kept} == {p for p, b in seeds.items() if b in drawn}
            out = len(seeds) - len(kept)
            assert shard.result.warnings == ([f"{out} seed case{'s' if out != 1 else ''} of 'sglang_engine' left "
                                              f"out of {len(seeds)}: their backend is not one "
                                              f"FUZZRUNNER_SGLANG_BACKENDS={','.join(drawn)!r} draws"]
                                             if out else [])


def test_sglang_backends_env_leaves_out_the_users_corpus_cases_of_the_other_backends(monkeypatch, tmp_path):
    """The user's own corpus (``--corpus``: its findings and cases) went around ``FUZZRUNNER_SGLANG_BACKENDS``: with
    ``=csgmv`` a saved triton case or finding was replayed and reported, though the target's own seeds were left
    out. Every saved case and finding is left out exactly when its backend is not drawn, for every subset of the
    backends, said in one line with the count and why; the kept ones all run (engine/corpus_replay.py)."""
    import functools
    import itertools
    import types

    from fuzzrunner.corpus import Corpus, load_any
    from fuzzrunner.engine import corpus_replay
    from fuzzrunner.finding import Finding
    from fuzzrunner.target import Target
    from fuzzrunner.violation import Violation
    engine = import_module("fuzzrunner.targets.sglang_engine")
    corpus = Corpus(tmp_path / "corpus")
    saved = {}  # {path: backend}: each shipped seed as the user's case, and as a finding
    for path in Target("t", "", None, print, seeds=engine.__path__[0] + "/seeds").seed_files():
        case = load_any(path)[0]
        name = path.rsplit("/", 1)[1].removesuffix(".json")
        saved[str(corpus.save_case(case, name))] = case.config["backend"]
        bug = Violation("numeric", "numeric-mismatch", "", f"{name}.py:1", name, "wrong rows", {"op_index": 0})
        saved[str(corpus.save_finding("sglang_engine", Finding.of(bug, [], case, target_spec="sglang_engine")))] = \
            case.config["backend"]
    shipped = ("triton", "csgmv", "torch_native", "triton_v2")
    for n in range(1, len(shipped) + 1):
        for drawn in itertools.combinations(shipped, n):
            monkeypatch.setenv("FUZZRUNNER_SGLANG_BACKENDS", ",".join(drawn))
            shard = types.SimpleNamespace(
                index=0, corpus=corpus, target_spec="sglang_engine", faults=(),
                target=Target("sglang_engine", "", None, print, skip_seed=functools.partial(engine.seed_left_out,
                                                                                            drawn=drawn)),
                result=types.SimpleNamespace(warnings=[], replayed=[], quarantined=[], unsupported=[]),
                emit=lambda e: None, execute=lambda case: [])
            corpus_replay.replay_corpus(shard)
            kept = {p for p, b in saved.items() if b in drawn}
            assert sorted(p for p, _, _ in shard.result.replayed) == sorted(kept)
            out = len(saved) - len(kept)
            assert shard.result.warnings == ([f"{out} case{'s' if out != 1 else ''} of 'sglang_engine' in the corpus "
                                              f"{corpus.root} left out of {len(saved)}: their backend is not one "
                                              f"FUZZRUNNER_SGLANG_BACKENDS={','.join(drawn)!r} draws"]
                                             if out else [])
            assert not shard.result.quarantined


def test_a_wrong_row_is_triaged_by_the_path_its_label_names(tmp_path, monkeypatch):
    """A step's results are labelled with the backend and graph mode (``step.logits[torch_native, graph]``): a
    torch_native case with lm_head LoRA and decode graphs can show G1 (eager extend batches) and G2 (replayed decode
    batches); before, the triage went by the case's ``graph_bs`` alone and called both G1. Likewise #28371 is a
    csgmv *graph* replay's mismatch, not an eager batch's of a case that has graphs. Labels without a path (reports
    of the target before it named one) are triaged by the case, as before."""
    site = import_module("fuzzrunner.targets.sglang_lora.site")
    lora = tmp_path / "old" / "site" / "sglang" / "srt" / "lora"
    (lora / "backend").mkdir(parents=True)
    (lora / "torch_ops").mkdir()
    (lora / "triton_ops").mkdir()
    (lora / "backend" / "torch_backend.py").write_text("class TorchNativeLoRABackend: ...\n")
    (lora / "torch_ops" / "graph_lora_ops.py").write_text(sweep.GRAPH_MAX_RANK + "\n")
    (lora / "triton_ops" / "chunked_sgmv_shrink.py").write_text("grid = (cdiv(N, BLOCK_N), num_segments)\n")
    (lora / "triton_ops" / "sgemm_lora_b.py").write_text("n_mask = n_offset < N\n")
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))

    def triage(backend, tensor, kind="numeric-mismatch"):
        config = {"backend": backend, "graph_bs": 2, "target_modules": ["qkv_proj", "lm_head"]}
        return sweep.category({"signature": {"tool": "numeric", "kind": kind, "tensor": tensor},
                               "case": {"target": "sglang_engine", "config": config, "ops": []}}, "old")
    assert triage("torch_native", "step.logits[torch_native, eager]") == "torch-native-lm-head"
    assert triage("torch_native", "step.logits[torch_native, graph]") == "torch-native-graph-rank"
    assert triage("torch_native", "base-rows[torch_native, graph]", "state-violation") == "torch-native-graph-rank"
    assert triage("torch_native", "base-rows[torch_native, eager]", "state-violation") == "torch-native-lm-head"
    assert triage("csgmv", "step.logits[csgmv, graph]") == "#28371"
    assert triage("csgmv", "step.logits[csgmv, eager]") == "untriaged"
    assert triage("csgmv", "step.logits") == "#28371"  # an older report: by the case's graphs


def test_torch_native_crashes_of_releases_before_its_fixes_are_triaged_by_their_files(tmp_path, monkeypatch):
    """The fifth sweep's two untriaged crashes on 0.5.7's torch_native: prepare_lora_batch's copy of the per-run slot
    table into the first bs rows (``#20564``: a batch with fewer runs of equal adapters than requests) and embedding
    LoRA on a torch_native backend without ``run_lora_a_embedding`` (None into ``sgemm_lora_b_fwd``); each only where
    the release's torch_backend.py has the cause."""
    site = import_module("fuzzrunner.targets.sglang_lora.site")
    for v, text in (("old", "torch.unique_consecutive(x)\n" + sweep.TORCH_NATIVE_RUNS_BY_REQUEST + ")\n"),
                    ("new", "    def run_lora_a_embedding(self): ...\nweight_indices[:num_segments].copy_(x)\n")):
        (tmp_path / v / "site" / "sglang" / "srt" / "lora" / "backend").mkdir(parents=True)
        (tmp_path / v / "site" / "sglang" / "srt" / "lora" / "backend" / "torch_backend.py").write_text(text)
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))

    def crash(location, kernel, modules):
        return {"signature": {"tool": "python", "kind": "crash", "kernel": kernel, "location": location},
                "case": {"target": "sglang_engine", "ops": [],
                         "config": {"backend": "torch_native", "graph_bs": 0, "target_modules": modules}}}
    runs = crash("torch_backend.py:264", "RuntimeError", ["qkv_proj"])
    emb = crash("torch_ops/lora_ops.py:57", "AttributeError", ["embed_tokens"])
    no_emb = crash("torch_ops/lora_ops.py:57", "AttributeError", ["qkv_proj"])
    emb_backend = crash("torch_backend.py:55", "AttributeError", ["embed_tokens"])  # 0.5.6.post2: the backend's x.shape
    assert [sweep.category(f, "old") for f in (runs, emb, no_emb, emb_backend)] == \
        ["#20564", "torch-native-embedding", "untriaged", "torch-native-embedding"]
    assert [sweep.category(f, "new") for f in (runs, emb)] == ["untriaged", "untriaged"]
    # 0.5.6.post1 - 0.5.6.post2 copy the same line, but their table is per request (no runs): not #20564 (the sweep's seed ran silent)
    assert not sweep._torch_native_runs_by_request(sweep.TORCH_NATIVE_RUNS_BY_REQUEST + ")\n")
    # 0.5.6.post1 - 0.5.6.post2's vLLM-derived ops: a slot's never-written rows read (#15187), and the whole batch's
    # segment lengths over the LogitsProcessor's pruned lm_head rows raising in repeat_interleave (G1's cause)
    (tmp_path / "old" / "site" / "sglang" / "srt" / "lora" / "torch_ops").mkdir()
    (tmp_path / "old" / "site" / "sglang" / "srt" / "lora" / "torch_ops" / "lora_ops.py").write_text(
        sweep.TORCH_NATIVE_V0_OPS + "x): ...\n")
    read = {"signature": {"tool": "shadow", "kind": "uninitialized-read", "kernel": "aten.index.Tensor",
                          "location": "torch_ops/lora_ops.py:72", "tensor": "torch.empty@mem_pool.py:213"},
            "case": runs["case"]}
    pruned = crash("torch_ops/lora_ops.py:58", "RuntimeError", ["lm_head"])
    assert [sweep.category(f, "old") for f in (read, pruned)] == ["#15187", "torch-native-lm-head"]
    assert sweep.category(read, "new") == "untriaged"


def test_a_drain_bound_violation_while_the_drained_adapter_admitted_requests_is_sg2(tmp_path, monkeypatch):
    """SG2 (docs/findings/sg2-drain-budget-recomputed.md): the drain started, and the draining adapter kept admitting
    requests against the budget recomputed over all its running requests; pinned adapters or not."""
    _drainer_releases(tmp_path, monkeypatch, {
        "old": "            <= stats.max_remaining_tokens * DRAIN_SCHEDULE_TOLERANCE\n",
        "new": "            <= stats.drain_remaining_tokens * DRAIN_SCHEDULE_TOLERANCE\n"})
    extended = DRAIN_WAIT + "'a0' was marked draining for it at round 3 and admitted 7 more of its requests while " \
                            "draining (requests [4, 6, 8])"
    for pinned in (False, True):
        assert sweep.category(_drain_finding(pinned, extended), "old") == "SG2"
        assert sweep.category(_drain_finding(pinned, extended), "new") == "untriaged"  # the patched drainer
    # a drain that admitted nothing and still took too long: not SG2's mechanism
    slow = extended.replace("admitted 7 more", "admitted 0 more")
    assert sweep.category(_drain_finding(False, slow), "old") == "untriaged"


def test_the_docs_count_of_declared_features_on_the_pinned_release_is_the_targets():
    """The CHANGELOG said 45 declared features for ``sglang_engine`` on 0.5.23 where ``doctor --engines`` said 46 (the
    stream steps' ``step=stream`` came after it; a new user's trial). The count here is the target's, on what the
    pinned release drives (``doctor --engines`` on 0.5.23: all six modules, the four backends, the adapter-management
    API, the LogitsProcessor, the scheduler and its result processing); each place the docs give it must say it."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    pinned = import_module("fuzzrunner.targets.sglang_lora.site").PINNED
    # MoE LoRA and the radix cache too: 0.5.23 drives both (the count left MoE's 9 features out, so the docs said 50
    # where a campaign declared 59, then 62 with the radix knob)
    n = len(cases.feature_space(api.ALL_MODULES, frontend=True, logprobs=True,
                                backends=("triton", "csgmv", "torch_native", "triton_v2"), scheduler=True, moe=True,
                                radix=True, results=True))
    changelog = " ".join((root / "CHANGELOG.md").read_text().split())
    sglang_md = " ".join((root / "docs" / "sglang.md").read_text().split())
    assert f"{n} for `sglang_engine` on {pinned}" in changelog, n
    assert f"{n} on {pinned} since triton_v2 and torch_native are drawn" in sglang_md, n


@FAST
@given(st.data(), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_each_steps_path_is_a_feature_named_as_the_runner_takes_it(data, sched, front, logprobs, results):
    """No report said whether SGLang's scheduler path ran (new-user trial): each step's path is a coverage feature
    (``path=scheduler``, ``path=tokenizer-manager``, ``path=direct``), from the one decision the runner takes
    (``step_path``: ``Session.step`` dispatches by it), and each path a release can take is declared, so one no case
    took reads "never reached". Where the scheduler's result processing is driven (``results``: results.py), steps
    asking input logprobs take the scheduler path too."""
    import types

    from fuzzrunner.targets.sglang_engine import runner
    results = results and sched
    case = data.draw(cases.sglang_engine_cases((), max_ops=8, device="cpu", frontend=front, logprobs=logprobs,
                                               scheduler=sched, results=results))
    space = set(cases.feature_space(frontend=front, logprobs=logprobs, scheduler=sched, results=results))
    reached = set(features_of(partial(cases.features, scheduler=sched, frontend=front, results=results), case))
    assert reached <= space
    taken = []
    session = object.__new__(runner.Session)
    session.server = types.SimpleNamespace(results_why="" if results else "not driven") if sched else None
    session.front = object() if front else None
    session._served_step = lambda op: taken.append("scheduler")
    session._front_step = lambda op: taken.append("tokenizer-manager")
    session._batch = lambda *a: taken.append("direct")
    session.refs, session.mgr, session.c = {}, type("M", (), {"validate_lora_batch": lambda s, ids: True})(), {}
    for op in case.ops:
        if op["op"] == "step":
            session.step({**op, "reqs": [None] * len(op["reqs"])})  # (the direct path checks its adapters first)
    assert {f"path={p}" for p in taken} == {f for f in reached if f.startswith("path=")}
    assert {f for f in space if f.startswith("path=")} == {f"path={p}" for p in cases.paths(sched, front, logprobs,
                                                                                             results)}
    assert ("path=scheduler" in space) == sched
    if results:  # every step takes SGLang's scheduler, input logprobs included
        assert set(taken) <= {"scheduler"}


def test_a_virtual_experts_wrong_row_with_gated_expert_lora_is_27274_where_the_halves_are_not_paired(tmp_path,
                                                                                                     monkeypatch):
    """The sixth pass's one finding outside the known bugs (0.5.22, after 19 examples): a float16 MoE case with
    --lora-use-virtual-experts, whose adapter has LoRA on the experts' gate and up projections, off by up to 4.4 on
    its rows. 0.5.11 - 0.5.22's virtual-expert path contracts only the gated A's first (gate's) half for both output
    halves (described by sgl-project/sglang#27274); 0.5.23 pairs them (``a_output_slices``)."""
    site = import_module("fuzzrunner.targets.sglang_lora.site")
    for v, runners in (("old", "if lora_info.lora_use_virtual_experts:\n"),
                       ("new", "if lora_info.lora_use_virtual_experts:\n    a_output_slices=2\n")):
        (tmp_path / v / "site/sglang/srt/lora").mkdir(parents=True)
        (tmp_path / v / "site/sglang/srt/lora/lora_moe_runners.py").write_text(runners)
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))

    def finding(virtual: bool, modules: list) -> dict:
        config = {"backend": "triton", "dtype": "float16", "target_modules": ["gate_up_proj", "down_proj"],
                  "adapters": {"a0": {"r": 2, "modules": modules}},
                  "moe": {"experts": 64, "top_k": 1, "shared_outer": False, "virtual": virtual}}
        return {"signature": {"tool": "numeric", "kind": "numeric-mismatch", "tensor": "step.experts[triton, eager]",
                              "kernel": "step", "location": "float64 reference"}, "message": "",
                "case": {"target": "sglang_engine", "config": config, "ops": []}}
    gated = finding(True, ["gate_proj", "up_proj", "down_proj"])
    assert sweep.category(gated, "old") == "#27274"
    assert sweep.category(gated, "new") == "untriaged"  # the release pairs the halves: not this bug
    assert sweep.category(finding(False, ["gate_proj", "up_proj"]), "old") == "untriaged"  # per-expert layout
    assert sweep.category(finding(True, ["down_proj"]), "old") == "untriaged"  # no gated expert LoRA
