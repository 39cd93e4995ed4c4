"""``sglang_engine``'s seeds and the sweep's verdict table (targets/sglang_engine/sweep.py), without SGLang."""

import json
from importlib import import_module
from pathlib import Path

from fuzzrunner.case import Case

esweep = import_module("fuzzrunner.targets.sglang_engine.sweep")
runner = import_module("fuzzrunner.targets.sglang_engine.runner")
site = import_module("fuzzrunner.targets.sglang_lora.site")
SEEDS = Path(__file__).resolve().parents[2] / "targets" / "sglang_engine" / "seeds"


def test_every_known_bug_has_a_well_formed_seed_and_every_seed_a_bug():
    assert sorted(p.stem for p in SEEDS.glob("*.json")) == sorted(esweep.SEEDS.values())
    for p in SEEDS.glob("*.json"):
        d = json.loads(p.read_text())
        assert d["target"] == "sglang_engine" and d["faults"] == []
        runner.check_case(Case("sglang_engine", d["config"], tuple(d["ops"]), ()))  # raises InvalidCase if not


def test_every_bug_a_campaign_labels_known_has_a_column_of_the_verdict_table():
    """The sixth pass found SG2 and #15187 labelled by campaigns (known.py) but without a column (no seed): a
    release's verdict on them was read off the findings rows, or not at all."""
    known = import_module("fuzzrunner.targets.sglang_engine.known")
    assert sorted(known.BUGS) == sorted(esweep.KNOWN)


def test_a_refused_seeds_cell_says_what_the_release_lacks():
    """The fifth pass's cells cut the target's refusal at its first ':' (``n/a (refused:
    lora_drain_wait_threshold=1.0)``) and dropped the release's reason the scheduler path gives."""
    sched = ("/x/seeds/s.json: the scheduler path is not driven on SGLang 0.5.9; a case with arrival rounds, tokens "
             "to generate or a drain threshold needs it (the scheduler path is driven on SGLang 0.5.10 - 0.5.23 "
             "only: this release lacks sglang.srt.observability.req_time_stats).")
    assert esweep.refusal(sched) == ("the scheduler path is not driven on SGLang 0.5.9: lacks "
                                     "sglang.srt.observability.req_time_stats")
    assert esweep.refusal("lora_drain_wait_threshold=1.0: SGLang 0.5.11 has no LoRADrainer "
                          "(--lora-drain-wait-threshold: 0.5.12+); leave it 0 or out.") == \
        "lora_drain_wait_threshold=1.0: SGLang 0.5.11 has no LoRADrainer"
    assert esweep.refusal("target modules ['embed_tokens']: SGLang 0.5.5's LoRA pool has no buffers for them (it "
                          "has qkv_proj); draw --lora-target-modules from those.") == \
        "target modules ['embed_tokens']: SGLang 0.5.5's LoRA pool has no buffers for them"


def _tree(tmp_path, v, buggy: bool) -> None:
    """A release tree whose files have every known bug (``buggy``) or none."""
    lora = tmp_path / v / "site" / "sglang" / "srt" / "lora"
    (lora / "backend").mkdir(parents=True)
    (lora / "triton_ops").mkdir()
    sweep = esweep.lora_sweep
    (lora / "mem_pool.py").write_text("def get_embedding_lora_A_shape(self): ...\n" + (
        "" if buggy else f"def remove_lora(self, uid): ...\n# {sweep.EMBEDDING_ZEROED}\n"))
    (lora / "layers.py").write_text("class VocabParallelEmbeddingWithLoRA: ...\nclass ParallelLMHeadWithLoRA: ...\n"
                                    + ("" if buggy else "lm_head_batch_info = None\n"))
    (lora / "backend" / "triton_backend.py").write_text(
        "seg_indptr=torch.empty(max_bs_in_cuda_graph + 1)\n" + sweep.LM_HEAD_PASSES_DROPPED + "x)\n" if buggy else "")
    (lora / "backend" / "chunked_backend.py").write_text("" if buggy else "def run_lora_a_embedding(self): ...\n")
    (lora / "triton_ops" / "chunked_sgmv_shrink.py").write_text("" if buggy else "segment_grid = 1\n")
    (lora / "triton_ops" / "sgemm_lora_b.py").write_text("" if buggy else "n_mask = n_offset < N\n")
    (lora / "torch_ops").mkdir()
    (lora / "backend" / "torch_backend.py").write_text("class TorchNativeLoRABackend: ...\n" + (
        "torch.unique_consecutive(x)\n" + sweep.TORCH_NATIVE_RUNS_BY_REQUEST + ")\n" if buggy else  # #20564; torch-native-embedding, G1 below
        "    def run_lora_a_embedding(self): ...\n    lm_head_batch_info = None\n"))  # G1: no pruned routing
    (lora / "torch_ops" / "graph_lora_ops.py").write_text(sweep.GRAPH_MAX_RANK + "\n" if buggy else "")  # G2
    (lora / "lora_drainer.py").write_text(sweep.DRAINER_FULL_CHECK + "\n" + sweep.DRAIN_BUDGET_RECOMPUTED + "\n"
                                          if buggy else "")  # SG1, SG2
    (lora / "torch_ops" / "lora_ops.py").write_text(sweep.TORCH_NATIVE_V0_OPS + "\n" if buggy else "")  # #15187
    (lora / "lora_moe_runners.py").write_text("lora_use_virtual_experts = True\n" + (
        "" if buggy else sweep.VIRTUAL_GATED_PAIRED + "=2\n"))  # #27274
    managers = tmp_path / v / "site" / "sglang" / "srt" / "managers"
    managers.mkdir(parents=True)
    (managers / "scheduler.py").write_text(  # #16687, #25865; #27597 (with the manager's assertion)
        f"# {sweep.BASE_NEVER_CHECKED}\n{sweep.RUNNING_ONLY}\n" if buggy else
        f"{sweep.RUNNING_ONLY}\n{sweep.STAGED_COUNTED}\n# {sweep.FINISHED_FILTERED}\n")
    (lora / "lora_manager.py").write_text(f"# {sweep.LORA_REFS_ASSERT}\n")
    # #24638: Req.__init__ concatenates the user's key and the lora_id (every 0.5.x); a fix would keep them apart
    (managers / "schedule_batch.py").write_text(
        "        extra_key = (extra_key or \"\") + lora_id\n" if buggy else "        extra_key = (extra_key, lora_id)\n")


def _report(out: Path, v: str, findings: list, replayed: list, refused: dict) -> None:
    run = {"generated": 7, "examples": 7, "duration_s": 12.0, "findings": findings,
           "replayed": [{"path": f"/x/targets/sglang_engine/seeds/{s}.json", "id": None, "still_failing": True}
                        for s in replayed],
           "quarantined": [{"path": f"/x/targets/sglang_engine/seeds/{s}.json", "moved_to": None,
                            "why": f"/x/seeds/{s}.json: {why}; draw them"} for s, why in refused.items()]}
    (out / f"{v}.json").write_text(json.dumps({"runs": [run]}))


def test_each_release_gets_a_verdict_per_known_bug_checked_against_its_source(tmp_path, monkeypatch):
    """yes where a finding is triaged as the bug; no where its seed ran silent; n/a with the seed's refusal; and
    a verdict the release's files contradict is marked (a seed that no longer reproduces its bug: a wrong verdict)."""
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    _tree(tmp_path, "old", buggy=True)
    _tree(tmp_path, "new", buggy=False)
    unload = {"signature": {"tool": "state", "kind": "state-violation", "tensor": "unload"},
              "case": {"target": "sglang_engine", "config": {"backend": "triton"}, "ops": []},
              "first_found_after_examples": 1}
    seeds = list(esweep.SEEDS.values())
    emb = esweep.SEEDS["emb-unzeroed"]
    _report(tmp_path, "old", [unload], [s for s in seeds if s != emb],
            {emb: "target modules ['embed_tokens']: SGLang old's LoRA pool has no buffers for them"})
    _report(tmp_path, "new", [unload], seeds, {})
    cells = {v: esweep.row(tmp_path, v).split(" | ")[2:2 + len(esweep.KNOWN)] for v in ("old", "new")}
    old, new = (dict(zip(esweep.KNOWN, cells[v])) for v in ("old", "new"))
    assert old["#21380"] == "**yes**"
    assert old["#28371"] == "no (source: present)"  # the seed ran silent on a release that has the bug
    # the seed cannot run where the release's files have the bug: a gap of the target, marked
    assert old["emb-unzeroed"] == ("n/a (refused: target modules ['embed_tokens']: SGLang old's LoRA pool has no "
                                   "buffers for them) (source: present)")
    assert all(new[b] == "no" for b in esweep.KNOWN)  # the same state violation, on a release with the fix:
    assert esweep.row(tmp_path, "new").endswith("| untriaged | – |")  # not #21380, left to triage
    assert esweep.row(tmp_path, "missing").startswith("| missing | – |")
    assert all(esweep.present(b, "old") for b in esweep.KNOWN)
    assert not any(esweep.present(b, "new") for b in esweep.KNOWN)
    assert esweep.present("#21380", "unset") is None
    # a release whose pool has no embedding buffers (0.5.5: its layers.py has the embedding layer class already)
    # has neither embedding bug
    (tmp_path / "old/site/sglang/srt/lora/mem_pool.py").write_text("class LoRAMemoryPool: ...\n")
    assert not esweep.present("emb-unzeroed", "old") and not esweep.present("csgmv-embedding", "old")
    assert dict(zip(esweep.KNOWN, esweep.row(tmp_path, "old").split(" | ")[2:]))["emb-unzeroed"] == (
        "n/a (refused: target modules ['embed_tokens']: SGLang old's LoRA pool has no buffers for them)")


def test_a_release_that_publishes_placement_gets_the_schedulers_publish_and_its_group_calls(monkeypatch):
    """0.5.21's engine refused every case (a target error): its ``initialize_model_parallel`` reads the widths from
    the runtime context (no ``tensor_model_parallel_size``), ``initialize_dp_attention`` takes no ``model_config``,
    and rank reads need the launcher's placement, which its scheduler publishes with ``SpawnRanks``. Releases of
    either form (0.5.20's, 0.5.21's) are set up the way their own scheduler and model runner do it."""
    import sys
    import types
    api = import_module("fuzzrunner.targets.sglang_engine.api")
    calls: list = []

    def fake(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, m)
    for n in ("sglang", "sglang.srt", "sglang.srt.configs"):
        fake(n)
    fake("sglang.srt.configs.model_config", ModelConfig=types.SimpleNamespace(from_server_args=lambda a: "mc"))
    shim = types.SimpleNamespace(set_global_server_args_for_scheduler=lambda a: calls.append(("shim", a)))

    def old_mp(tensor_model_parallel_size=1, expert_model_parallel_size=1):
        calls.append(("mp", tensor_model_parallel_size))

    def new_mp(backend=None, duplicate_tp_group=False):
        calls.append(("mp", None))
    for mp, dp, expect in ((old_mp, lambda server_args, model_config: calls.append(("dp", model_config)),
                            [("mp", 1), ("dp", "mc")]),
                           (new_mp, lambda server_args: calls.append(("dp", None)), [("mp", None), ("dp", None)])):
        calls.clear()
        fake("sglang.srt.distributed", init_distributed_environment=lambda **kw: None, initialize_model_parallel=mp)
        fake("sglang.srt.layers")
        fake("sglang.srt.layers.dp_attention", initialize_dp_attention=dp)
        api.EngineAPI(version="x", manager_params=frozenset())._init_distributed("args", "cpu")
        assert calls == expect
    monkeypatch.delitem(sys.modules, "sglang.srt.runtime_context", raising=False)
    api._scheduler_publish(shim)("args")  # 0.5.14 - 0.5.20: the legacy shim (a runtime context without SpawnRanks)
    assert calls[-1] == ("shim", "args")
    fake("sglang.srt.runtime_context", SpawnRanks=lambda **kw: ("ranks", kw),
         publish=lambda a, *, role, ranks=None: calls.append(("publish", role, ranks)))
    calls.clear()
    api._scheduler_publish(shim)("args")
    assert calls == [("publish", "scheduler", ("ranks", {"world_rank": 0, "gpu_id": 0}))]


def test_a_campaign_that_ran_no_case_is_not_a_clean_release(tmp_path, monkeypatch):
    """0.5.23's first campaign of the fourth pass spent its whole 240 s budget importing the engine (load 17): its
    report has no case, and its rows read "none" (no finding), as a release that ran clean would."""
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    _tree(tmp_path, "new", buggy=False)
    (tmp_path / "new.json").write_text(json.dumps({"runs": [{"generated": 0, "examples": 0, "duration_s": 7.0,
                                                             "findings": [], "replayed": [], "quarantined": []}]}))
    row = esweep.row(tmp_path, "new")
    assert "**no case ran**" in row and "seed not run" in row
    assert "**no case ran**" in esweep.lora_sweep.rows(tmp_path, ["new"])[2]
    _report(tmp_path, "new", [], list(esweep.SEEDS.values()), {})  # seeds replayed, nothing found: clean
    assert "no case ran" not in esweep.row(tmp_path, "new") + esweep.lora_sweep.rows(tmp_path, ["new"])[2]


def test_a_finding_reproduces_every_bug_its_violations_are_triaged_as(tmp_path, monkeypatch):
    """0.5.6.post2's #18649 seed was filed under its first violation, an n-mask read of sgemm_lora_b; the shrink's
    reads past the LogitsProcessor's kept rows (#18649) came as the finding's other violations, and the verdict said
    "no (source: present)" for #18649."""
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    _tree(tmp_path, "old", buggy=True)
    (tmp_path / "old/site/sglang/srt/lora/triton_ops/sgemm_lora_b.py").write_text("w_tile = tl.load(w_ptrs)\n")
    nmask = {"tool": "shadow", "kind": "uninitialized-read", "kernel": "_sgemm_lora_b_kernel",
             "location": "triton_ops/sgemm_lora_b.py:1", "tensor": "torch.empty@mem_pool.py:233"}
    rows = {"tool": "shadow", "kind": "out-of-bounds", "kernel": "_sgemm_lora_a_kernel",
            "location": "triton_ops/sgemm_lora_a.py:90", "tensor": "_sgemm_lora_a_kernel:x"}
    f = {"signature": nmask, "violation": dict(nmask), "others": [dict(rows, message="x")],
         "case": {"target": "sglang_engine", "config": {"backend": "triton"}, "ops": []},
         "first_found_after_examples": 5}
    _report(tmp_path, "old", [f], list(esweep.SEEDS.values()), {})
    cells = dict(zip(esweep.KNOWN, esweep.row(tmp_path, "old").split(" | ")[2:2 + len(esweep.KNOWN)]))
    assert cells["n-mask"] == "**yes**" and cells["#18649"] == "**yes**"


def test_a_seed_the_budget_never_reached_reads_budget_ran_out_not_no(tmp_path, monkeypatch):
    """The fourth pass's 0.5.13 (240 s, all of it the start-up under load 17) had no seed run: its cells said
    "– (seed not run)" like a release never swept, and a campaign that ran some seeds before its budget ended had
    the rest read the same; the verdict names the budget (distinct from "no": the seed ran and found nothing)."""
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    _tree(tmp_path, "old", buggy=True)
    seeds = list(esweep.SEEDS.values())
    _report(tmp_path, "old", [], seeds[:2], {})
    report = json.loads((tmp_path / "old.json").read_text())
    report["runs"][0]["stop_reason"] = "budget"
    (tmp_path / "old.json").write_text(json.dumps(report))
    cells = esweep.verdicts(tmp_path, "old")
    assert [cells[b] for b in esweep.KNOWN[:2]] == ["no (source: present)"] * 2
    assert {cells[b] for b in esweep.KNOWN[2:]} == {"**budget ran out** (seed not run)"}
    report["runs"][0]["stop_reason"] = "max-examples"  # not the budget: nothing to say why
    (tmp_path / "old.json").write_text(json.dumps(report))
    assert esweep.verdicts(tmp_path, "old")[esweep.KNOWN[2]] == "– (seed not run)"
    # no report at all: the row says why, from the release's log (a set-up that failed)
    (tmp_path / "gone.log").write_text("== set-up\nsglang_setup: sglang gone still misses modules after 30 installs.\n")
    assert "no report: sglang_setup: sglang gone still misses modules" in esweep.row(tmp_path, "gone")


def test_each_known_bugs_release_range_is_read_from_the_sweep_beside_its_files(tmp_path, monkeypatch):
    """The ranges table: per bug, the releases (in order, consecutive ones as a span) where the sweep found it,
    where its seed ran silent, where it was refused, not reached, and where the release's files have the bug."""
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    versions = ["a1", "a2", "a3", "a4"]
    unload = {"signature": {"tool": "state", "kind": "state-violation", "tensor": "unload"},
              "case": {"target": "sglang_engine", "config": {"backend": "triton"}, "ops": []}}
    seeds = list(esweep.SEEDS.values())
    for v, buggy in zip(versions, (True, True, False, True)):
        _tree(tmp_path, v, buggy=buggy)
    _report(tmp_path, "a1", [unload], seeds, {})
    _report(tmp_path, "a2", [unload], seeds, {})
    _report(tmp_path, "a3", [], seeds, {})  # a4: no report
    [line] = [ln for ln in esweep.ranges(tmp_path, versions) if ln.startswith("| #21380 ")]
    assert line == "| #21380 | a1 - a2 | a3 | none | a4 | a1 - a2, a4 |"
    assert esweep._spans(versions, {"a1", "a3", "a4"}) == "a1, a3 - a4"
    assert any(ln.startswith("| G1 (torch-native-lm-head) |") for ln in esweep.ranges(tmp_path, versions))


def test_a_seed_the_release_cannot_run_is_refused_not_run_silently():
    """SG1's seed (arrival rounds, tokens to generate, a drain threshold) on a release whose scheduler path is not
    driven went through the older admission loop, which drops those keys: it ran silent, a "no" beside a release that
    has the bug. And a torch_native seed on a release without that backend is refused before the engine is asked
    for it. Both are ``InvalidCase`` (the sweep's n/a), one line saying why."""
    import types

    import pytest

    from fuzzrunner.errors import InvalidCase
    sg1 = json.loads((SEEDS / "drainer_pinned_slots_sg1.json").read_text())
    g1 = json.loads((SEEDS / "torch_native_lm_head_g1.json").read_text())
    eng = types.SimpleNamespace(version="0.5.x", scheduler=None, scheduler_why="the release's Scheduler lacks f",
                                api=types.SimpleNamespace(backends=("triton", "csgmv")))
    ctx = types.SimpleNamespace(device="cpu")
    with pytest.raises(InvalidCase, match="backend 'torch_native' is not drivable on SGLang 0.5.x"):
        runner.Session(Case("sglang_engine", g1["config"], tuple(g1["ops"]), ()), ctx, eng, "/nonexistent")
    with pytest.raises(InvalidCase, match="the scheduler path is not driven on SGLang 0.5.x.*lacks f"):
        runner.Session(Case("sglang_engine", sg1["config"], tuple(sg1["ops"]), ()), ctx, eng, "/nonexistent")
    assert runner._served(Case("sglang_engine", g1["config"], tuple(g1["ops"]), ())) is False


def _pool(tmp_path, v: str, text: str) -> None:
    lora = tmp_path / v / "site" / "sglang" / "srt" / "lora"
    lora.mkdir(parents=True, exist_ok=True)
    (lora / "mem_pool.py").write_text(text)


def test_a_wrong_row_with_adapters_split_over_embed_tokens_and_lm_head_is_g3_where_the_pool_zeroes_only_in_else(
        tmp_path, monkeypatch):
    """G3 (docs/findings/sglang-g3-partial-embedding-unzeroed.md): the fault-free triton_v2 campaign's finding (a1
    with embed_tokens only, after a0 with lm_head, in the same slot) was untriaged. It is G3 where the release's pool
    zeroes the embedding / lm_head buffers only in the ``else`` of ``if lora_adapter.embedding_layers`` (0.5.10 -
    0.5.23) or never (0.5.6.post2 - 0.5.9); not where it zeroes them before loading (the patch) or has none, nor in a
    case whose adapters cannot leave each other a module (each has both, or neither, or the server targets one)."""
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    zeroed, shape = f"# {esweep.lora_sweep.EMBEDDING_ZEROED}\n", "def get_embedding_lora_A_shape(self): ...\n"
    _pool(tmp_path, "buggy", shape + "if lora_adapter.embedding_layers:\n    load()\nelse:\n    " + zeroed)
    _pool(tmp_path, "fixed", shape + zeroed + "for k in self.lm_head_A_buffer: zero()\nif lora_adapter.embedding_layers:\n")
    _pool(tmp_path, "never", shape)  # 0.5.6.post2 - 0.5.9: nothing zeroed (emb-unzeroed's wider form)
    _pool(tmp_path, "none", "class LoRAMemoryPool: ...\n")  # 0.5.5: no embedding buffers

    def triage(version, modules, kind="numeric-mismatch", targets=("down_proj", "embed_tokens", "lm_head")):
        sig = {"tool": "numeric", "kind": kind, "kernel": "step", "location": "float64 reference",
               "tensor": "step.logits"}
        config = {"backend": "triton_v2", "target_modules": list(targets),
                  "adapters": {f"a{i}": {"r": 4, "modules": m} for i, m in enumerate(modules)}}
        return esweep.lora_sweep.category({"signature": sig, "case": {"target": "sglang_engine", "config": config}},
                                          version)
    split = (["lm_head"], ["embed_tokens"])
    assert triage("buggy", split) == "embedding-partial-unzeroed"
    assert triage("buggy", (["down_proj", "embed_tokens", "lm_head"], ["embed_tokens"])) == \
        "embedding-partial-unzeroed"  # the campaign's: a1 gets a0's lm_head
    assert triage("fixed", split) == "untriaged"
    assert triage("never", split) == "embedding-partial-unzeroed"
    assert triage("none", split) == "untriaged"
    assert [esweep.present("embedding-partial-unzeroed", v) for v in ("buggy", "fixed", "never", "none")] == \
        [True, False, True, False]
    assert triage("buggy", (["embed_tokens", "lm_head"], ["down_proj"])) == "untriaged"  # zeroed by the else
    assert triage("buggy", (["lm_head"], ["lm_head", "down_proj"])) == "untriaged"  # nothing to leave
    assert triage("buggy", split, targets=("embed_tokens",)) == "untriaged"
    assert triage("buggy", split, kind="uninitialized-read") == "untriaged"


def test_the_paths_column_says_what_the_campaign_drove_from_its_declared_features():
    """MoE LoRA (0.5.18+) and the scheduler path (0.5.10+; its drainer 0.5.12+) are driven per release as the target
    finds them: the verdict table reads which from the campaign's declared features, with how many MoE cases ran
    by layout (the sixth pass: a sweep that drew no MoE case on a release that has it would say 0, not nothing)."""
    def run(declared, features, cases=20):
        return {"coverage": {"declared": declared, "features": features, "cases": cases}}
    assert esweep.paths(run(["step=decode"], {})) == "no scheduler; no MoE"
    assert esweep.paths(run(["step=stream"], {})) == "scheduler; no MoE"
    moe = ["step=stream", "drain=on", "moe=on", "moe.virtual_experts=on", "moe.shared_outer=on"]
    assert esweep.paths(run(moe, {"moe=on": 4, "moe.virtual_experts=on": 1, "moe.shared_outer=on": 2})) == \
        "scheduler + drainer; MoE 4 of 20 cases (shared-outer 2, virtual 1)"
    assert esweep.paths(run(moe, {})) == "scheduler + drainer; MoE 0 of 20 cases (shared-outer 0, virtual 0)"


def _run_sweep_script(tmp_path, *args) -> list[str]:
    """scripts/sglang_sweep.sh in a copy of the repository's layout whose set-up and Python only record their
    arguments: the ``fuzzrunner fuzz`` command line it runs for one release."""
    import shutil
    import subprocess
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "scripts").mkdir(parents=True)
    shutil.copy(root / "scripts" / "sglang_sweep.sh", tmp_path / "scripts")
    (tmp_path / "scripts" / "sglang_setup.sh").write_text("exit 0\n")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    python = tmp_path / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\n')
    python.chmod(0o755)
    subprocess.run(["bash", str(tmp_path / "scripts" / "sglang_sweep.sh"), *args, "0.5.23"], check=True,
                   capture_output=True, text=True, timeout=60)
    return [c for c in (tmp_path / "calls").read_text().splitlines() if " fuzz " in f" {c} "]


def test_the_engine_sweep_gives_a_case_minutes_before_calling_it_a_timeout(tmp_path):
    """The sixth pass's 0.5.23 campaign had a MoE case (minutes a step in Triton's interpreter on a loaded machine)
    killed at fuzzrunner's 120 s default: a timeout "finding" of the sweep's own making. sglang_sweep.sh gives
    sglang_engine cases 900 s unless --case-timeout says otherwise, and leaves the other target at fuzzrunner's."""
    (engine,) = _run_sweep_script(tmp_path / "a", "--target", "sglang_engine", "--out", str(tmp_path / "a/out"))
    assert "--case-timeout 900" in engine
    (asked,) = _run_sweep_script(tmp_path / "b", "--target", "sglang_engine", "--case-timeout", "42", "--out",
                                 str(tmp_path / "b/out"))
    assert "--case-timeout 42" in asked
    (lora,) = _run_sweep_script(tmp_path / "c", "--target", "sglang_lora", "--out", str(tmp_path / "c/out"))
    assert "--case-timeout" not in lora


def test_a_batch_of_more_adapters_than_slots_is_16687_or_25865_by_the_releases_admission_lines(tmp_path, monkeypatch):
    """The reach audit (docs/reach.md) replayed #16687 (0.5.7) and #25865 (0.5.8 - 0.5.12.post1) through the scheduler
    path, and a campaign would have called them untriaged: a batch of more adapters than slots is #16687 where the
    release's admission lets a base-model request through unchecked, #25865 where it counts the running batch's
    adapters only and the case has a chunked prefill (the staged request not counted), else untriaged."""
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    sweep = esweep.lora_sweep
    for v, text in (("v7", f"# {sweep.BASE_NEVER_CHECKED}\n"), ("v12", f"{sweep.RUNNING_ONLY}\n"),
                    ("v13", f"{sweep.RUNNING_ONLY}\n{sweep.STAGED_COUNTED}\n")):
        managers = tmp_path / v / "site" / "sglang" / "srt" / "managers"
        managers.mkdir(parents=True)
        (managers / "scheduler.py").write_text(text)
        (managers.parent / "lora").mkdir()
        (managers.parent / "lora" / "mem_pool.py").write_text("class LoRAMemoryPool: ...\n")  # a set-up tree

    def triage(version, chunk=3, message="the scheduler made an extend batch of 3 adapters (base included) for 2 "
                                         "slots: requests [0, 1, 2]"):
        sig = {"tool": "state", "kind": "state-violation", "tensor": "step"}
        f = {"signature": sig, "message": message,
             "case": {"target": "sglang_engine", "config": {"backend": "csgmv", "chunked_prefill_size": chunk}}}
        return sweep.category(f, version)
    assert triage("v7") == "#16687"
    assert triage("v12") == "#25865" and triage("v12", chunk=None) == "untriaged"
    assert triage("v13") == "untriaged"
    assert triage("v12", message="a pool handed out more than it has") == "untriaged"
    assert [esweep.present(b, v) for b in ("#16687", "#25865") for v in ("v7", "v12", "v13")] == \
        [True, False, False, False, True, False]


def test_the_admission_seeds_meet_no_memory_error_first():
    """The sweep's #25865 column would read "no (source: present)" on 0.5.8 - 0.5.9 though the seed shows the bug:
    its triton case also met n-mask (sgemm_lora_b's unmasked lanes, 0.5.5 - 0.5.9), fuzzrunner files an op's
    violations under the op's memory error, and that finding merged into n-mask's smaller seed, which kept its own
    violations (``finding.merge``; a 0.5.9 campaign of the two seeds: one finding, the admission violation gone). An
    admission seed runs csgmv, whose kernels have no memory error there, as #16687's does (docs/sglang.md, Sweep)."""
    for bug in ("#16687", "#25865"):
        d = json.loads((SEEDS / f"{esweep.SEEDS[bug]}.json").read_text())
        assert d["config"]["backend"] == "csgmv" and d["config"]["graph_bs"] == 0  # #28371 needs a decode graph
