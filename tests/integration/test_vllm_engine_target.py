"""The ``vllm_engine`` target: vLLM's LoRA adapter manager, LoRA layers and V2-runner bookkeeping (docs/vllm.md).

Each planted fault has a minimal case its oracle must catch, and the same case without the fault must be
silent (both ways); the real vLLM bugs the target found have their cases too (docs/findings/). Needs a vLLM
set up (``scripts/setup.sh`` sets up the pinned one); without one every test is skipped with the reason.
"""

import json
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.target import _import_object

ROOT = Path(__file__).resolve().parents[2]
AVAILABLE, REASON = _import_object("targets.vllm_lora:vllm_available")()
needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vllm_engine: {REASON}")

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head"]
CONFIG = {"max_loras": 2, "max_cpu_loras": 3, "max_lora_rank": 8, "lora_dtype": "auto", "fully_sharded_loras": False,
          "specialize_active_lora": False, "target_modules": None, "max_num_seqs": 4, "max_num_batched_tokens": 8,
          "num_speculative_tokens": 1, "hidden": 16, "vocab": 32, "layout": {"qkv": "merged", "gate_up": "fused"},
          "seed": 0, "layers": ["qkv_proj", "lm_head"],
          "adapters": {"1": {"rank": 8, "alpha": 16, "rslora": False, "targets": ALL, "seed": 1},
                       "2": {"rank": 2, "alpha": 8, "rslora": True, "targets": ["q_proj", "lm_head"], "seed": 2},
                       "3": {"rank": 4, "alpha": 8, "rslora": False, "targets": ["q_proj", "v_proj"], "seed": 3},
                       "4": {"rank": 4, "alpha": 16, "rslora": False, "targets": ALL, "seed": 4}}}


def req(rid, lora, tokens=1, drafts=0, logprobs=False):
    return {"id": rid, "lora": lora, "tokens": tokens, "drafts": drafts, "prompt_logprobs": logprobs}


def step(*reqs, finish=(), pad=0, seed=0):
    return {"op": "step", "finish": list(finish), "reqs": list(reqs), "pad": pad, "seed": seed}


def _run(ops, faults=(), **config):
    from fuzzrunner.execute import run_case
    from fuzzrunner.target import load_target
    case = Case("vllm_engine", {**CONFIG, **config}, tuple(ops), tuple(faults))
    return run_case(case, load_target("vllm_engine"))


def _found():
    from targets.vllm_engine import load_engine
    return load_engine()


# every op kind, fault-free: adapters added, pinned, evicted under max_cpu_loras, removed while in use, requests
# finished and their indices reused, drafts, padding, a dummy run before any adapter collides with its ids
FAULT_FREE = [{"op": "dummy_run", "num_tokens": 3, "reqs": 2, "pad": 1, "seed": 0},
              {"op": "add", "id": 3},
              step(req("a", 1, 3), req("b", 0, 2), req("c", 3, 1), pad=2, seed=1),
              {"op": "pin", "id": 1},
              step(req("a", 1, 2, drafts=1), req("d", 4, 2), finish=["b", "c"], seed=2),
              {"op": "remove", "id": 4},
              step(req("a", 1, 1), req("d", 4, 1), req("e", 0, 3), seed=3),
              {"op": "add", "id": 2},
              step(req("f", 2, 2), req("g", 0, 1), finish=["a", "d", "e"], seed=4)]


def fault_free() -> list:
    """FAULT_FREE; where this vLLM maps one lm_head row per request (up to 0.33: a real bug, tested below),
    without draft tokens."""
    if _found()["make_lora_inputs_takes_num_logits"]:
        return FAULT_FREE
    return [dict(op, reqs=[dict(r, drafts=0) for r in op["reqs"]]) if op["op"] == "step" else op for op in FAULT_FREE]


@needs_vllm
def test_fault_free_ops_are_silent_on_every_layer():
    layers = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head"]
    assert _run(fault_free(), layers=layers) == []
    assert _run(fault_free(), layers=layers, layout={"qkv": "fused", "gate_up": "merged"},
                adapters={k: dict(v, targets=["qkv_proj", "gate_proj", "embed_tokens"])
                          for k, v in CONFIG["adapters"].items()}) == []


@needs_vllm
@pytest.mark.parametrize("knobs", [
    {"fully_sharded_loras": True, "specialize_active_lora": True, "lora_dtype": "float16", "max_lora_rank": 16,
     "max_cpu_loras": 2},
    {"target_modules": ["q_proj", "o_proj", "embed_tokens"]}])
def test_fault_free_ops_are_silent_under_each_lora_knob(knobs):
    assert _run(fault_free(), **{**knobs, "layers": ["qkv_proj", "o_proj", "embed_tokens", "lm_head"]}) == []


def _kinds(violations) -> set:
    return {(v.kind, v.tensor) for v in violations}


# (fault, ops, config, what the oracle must say: kind, tensor prefix): the smallest case each fault shows in; without it, silent
SWAP = [{"op": "add", "id": 2}, step(req("a", 1, 2), seed=1),
        {"op": "remove", "id": 2}, {"op": "remove", "id": 1}, {"op": "add", "id": 1}, {"op": "add", "id": 2},
        step(req("a", 1, 2), seed=2)]
FAULT_CASES = {
    "mapping_cache_ignores_slots": (SWAP, {}, ("numeric-mismatch", "step.qkv_proj.adapter_rows")),
    "set_lora_keeps_old_weights": ([step(req("a", 1, 2)), step(req("b", 3, 2), finish=["a"])],
                                   {"max_loras": 1, "max_cpu_loras": 1},
                                   ("numeric-mismatch", "step.qkv_proj.adapter_rows")),
    "activation_keeps_missing_modules": ([step(req("a", 1, 2)), step(req("b", 2, 2), finish=["a"])],
                                         {"max_loras": 1, "max_cpu_loras": 1, "layers": ["o_proj"]},
                                         ("numeric-mismatch", "step.o_proj.adapter_rows")),
    "lru_activation_skips_touch": ([{"op": "add", "id": 1}, {"op": "add", "id": 2}, step(req("a", 1), req("b", 3))],
                                   {}, ("crash", "")),
    "remove_keeps_slot": ([{"op": "add", "id": 1}, {"op": "remove", "id": 1}, step(req("a", 2))],
                          {"max_loras": 1, "max_cpu_loras": 1}, ("crash", "")),
    "lora_state_keeps_finished_adapter": ([step(req("a", 1, 2)), step(req("b", 0, 2), finish=["a"])], {},
                                          ("numeric-mismatch", "step.qkv_proj.base_rows")),
    "logits_mapping_per_request": ([step(req("a", 1, 2), req("b", 0, 1)), step(req("a", 1, 2, drafts=1), req("b", 0))],
                                   {}, ("numeric-mismatch", "step.logits.")),
    # base-model requests only: vLLM's P1 (prompt rows under the sampled rows' mapping) cannot show
    "prompt_token_ids_unshifted": ([step(req("a", 0, 3, logprobs=True), req("b", 0, 1), seed=1)],
                                   {"layers": ["lm_head"]}, ("numeric-mismatch", "step.prompt_logprobs.token_ids")),
}
# a new request's prompt longer than its first step: a chunked prefill, the prompt's last chunk one token
CHUNKED = [step(dict(req("a", 0, 3, logprobs=True), prompt=5), req("b", 0, 2), seed=1),
           step(req("a", 0, 1), req("b", 0, 1), seed=2), step(req("a", 0, 1), seed=3), step(req("a", 0, 1), seed=4)]


@needs_vllm
@pytest.mark.parametrize("fault", sorted(FAULT_CASES))
def test_each_planted_fault_is_caught_and_its_case_is_silent_without_it(fault):
    from targets.vllm_engine import faults
    ops, config, (kind, tensor) = FAULT_CASES[fault]
    why = faults.unavailable(_found()).get(fault)
    if why:
        pytest.skip(f"{fault}: {why}")
    found = _run(ops, (fault,), **config)
    assert any(v.kind == kind and v.tensor.startswith(tensor) for v in found), _kinds(found)
    assert _run(ops, **config) == []


@needs_vllm
def test_a_planted_fault_is_restored_after_its_case():
    from vllm.lora.model_manager import LoRAModelManager
    before = LoRAModelManager.__dict__["set_adapter_mapping"]
    _run(SWAP, ("mapping_cache_ignores_slots",))
    assert LoRAModelManager.__dict__["set_adapter_mapping"] is before


# -- real vLLM bugs the target found (docs/findings/) -------------------------------------------------------
@needs_vllm
def test_spec_decode_logits_rows_get_their_requests_adapter_where_vllm_maps_one_per_row():
    """V2 runner: ``make_lora_inputs`` maps one lm_head row per request up to 0.33 (fixed in 0.34: ``num_logits``)."""
    ops = FAULT_CASES["logits_mapping_per_request"][0]
    found = _run(ops)
    if _found()["make_lora_inputs_takes_num_logits"]:
        assert found == []
    else:
        assert any(k == "numeric-mismatch" and t.startswith("step.logits.") for k, t in _kinds(found)), found


@needs_vllm
def test_prompt_logprobs_logits_take_the_sampled_rows_mapping():
    """P1, V2 runner (0.15 - 0.34): vLLM's own PromptLogprobsWorker.compute_prompt_logprobs takes the logits of every
    scheduled row under the mapping made for the sampled rows (vllm-project/vllm#53842, open)."""
    found = _run([step(req("a", 1, 3, logprobs=True), req("b", 0, 2), req("c", 2, 1), seed=1)], layers=["lm_head"])
    assert ("numeric-mismatch", "step.prompt_logits[0].adapter_rows") in _kinds(found)


@needs_vllm
def test_a_chunked_prompt_gets_its_prompt_logprobs_once_complete_but_where_vllm_skips_a_one_token_last_chunk():
    """The worker's output against the specification over a chunked prefill (prompt_logprobs.py): silent where vLLM
    returns them (0.21 and later); L1 where its worker skips a prompt whose last chunk is its last token (0.17:
    ``computed_prefill < prompt_lens - 1``, fixed upstream by #41411): the logprobs of the earlier chunks are lost."""
    from targets.vllm_engine import known_flags
    found = _run(CHUNKED, layers=["lm_head"])
    if not known_flags(_found())["drops_last_chunk"]:
        assert found == []
        return
    assert _kinds(found) == {("state-violation", "step.prompt_logprobs")}, found
    assert "the worker returned none" in found[0].message


@needs_vllm
def test_a_runtime_dummy_run_evicts_a_real_adapter_holding_a_warmup_id_and_fails_to_load_it():
    """docs/findings/e1-dummy-run-evicts-real-adapter.md: ids 1..max_loras, real adapter 1 older than 3."""
    ops = [{"op": "add", "id": 1}, {"op": "add", "id": 3}, {"op": "dummy_run", "num_tokens": 2, "reqs": 1}]
    found = _run(ops, max_cpu_loras=2)
    assert [v.kernel for v in found] == ["LoRAAdapterNotFoundError"], found
    assert "warmup_1" in found[0].message and "/not/a/real/path" in found[0].message
    assert _run(ops, max_cpu_loras=4) == []  # room for every dummy adapter: nothing evicted


@needs_vllm
def test_a_runtime_dummy_run_beside_a_pinned_adapter_activates_more_dummies_than_free_slots():
    """docs/findings/e1-dummy-run-evicts-real-adapter.md, its second form: max_loras dummies, max_loras - 1 slots."""
    ops = [{"op": "add", "id": 4}, {"op": "pin", "id": 4}, {"op": "dummy_run", "num_tokens": 2, "reqs": 1}]
    found = _run(ops)
    assert [(v.kernel, v.details["op_index"]) for v in found] == [("KeyError", 2)], found
    assert _run(ops[:1] + ops[2:]) == []  # not pinned: the dummies evict it, and nothing asks for it


@needs_vllm
def test_lora_on_lm_head_alone_makes_an_empty_dummy_adapter_and_the_profile_run_fails():
    """docs/findings/e2-lm-head-only-target-modules.md: the warm-up's dummy adapter has no weights at all."""
    found = _run([step(req("a", 1))], target_modules=["lm_head"])
    assert [v.kernel for v in found] == ["RuntimeError"] and "StopIteration" in found[0].message, found
    assert _run([step(req("a", 1))], target_modules=["lm_head", "o_proj"]) == []


@needs_vllm
@pytest.mark.slow  # two fresh processes importing vLLM: ~1.5 min on 2 cores
def test_the_standalone_e1_e2_repro_fails_on_the_pinned_vllm_and_passes_with_the_fix():
    """docs/findings/repro_e1_e2_dummy_adapters.py needs nothing of ours: vLLM's tree on PYTHONPATH."""
    import os
    import subprocess
    import sys

    from targets.vllm_lora import patching, site
    tree = list(site.site_dirs(site.PINNED))

    def run(paths):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FUZZRUNNER_", "PYTHONPATH"))}
        return subprocess.run([sys.executable, str(ROOT / "docs" / "findings" / "repro_e1_e2_dummy_adapters.py"),
                               "--device", "cpu"], capture_output=True, text=True, timeout=900, cwd=str(ROOT / "docs"),
                              env=dict(env, PYTHONPATH=os.pathsep.join(map(str, paths))))
    r = run(tree)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "E1 first form: max_cpu_loras = 2: BUG: LoRAAdapterNotFoundError" in r.stdout, r.stdout
    assert "E2: target_modules = [lm_head]: BUG: RuntimeError: generator raised StopIteration" in r.stdout, r.stdout
    assert "control: E1 first form, max_cpu_loras = 4: ok" in r.stdout, r.stdout
    fixed = patching.apply(ROOT / "docs" / "findings" / "e1_e2_dummy_adapters.patch", tree[0], site.CACHE)
    r = run([fixed, *tree])
    assert r.returncode == 0 and r.stdout.count(": ok") == 4, r.stdout + r.stderr


def triaged(finding: dict) -> bool:
    """The real vLLM bugs above (known or reported), as a fault-free campaign reports them."""
    from targets.vllm_engine import known_flags
    from targets.vllm_engine.known import known_id
    return known_id(finding, **known_flags(_found())) is not None


def _fuzz(tmp_path, capsys, *args) -> tuple[int, str, dict]:
    from fuzzrunner.cli import main
    code = main(["fuzz", "--target", "vllm_engine", *args, "--corpus", str(tmp_path / "c"),
                 "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr()
    report = tmp_path / "r.json"
    run = json.loads(report.read_text())["runs"][0] if report.exists() else {}
    return code, out.out + out.err, run


@needs_vllm
def test_cli_short_fault_free_campaign_finds_nothing_untriaged(tmp_path, capsys):
    code, out, run = _fuzz(tmp_path, capsys, "--max-examples", "20", "--seed", "1", "--no-shrink")
    assert code in (0, 1), out
    assert [f["signature"] for f in run["findings"] if not triaged(f)] == []
    # the report and the summary name the vLLM that ran (release and tree), as vllm_lora's do
    assert run["code_under_test"]["engine"] == "vllm" and run["code_under_test"]["release"] == _found()["api"].version
    assert f"code under test: vllm {run['code_under_test']['release']}" in out, out


@needs_vllm
@pytest.mark.slow  # two fresh processes importing a patched vLLM: ~2 min on 2 cores
def test_p1_is_silent_with_its_fix_and_the_shifted_prompt_rows_fault_is_caught_there(tmp_path):
    """docs/findings/p1_prompt_logprobs_mapping.patch (the worker maps each prompt-logprobs chunk's rows to their
    requests' adapters before its logits): P1's case is silent; with the planted ``prompt_lora_rows_shifted`` (that
    mapping off by one row) it fails again, as a finding that is not P1."""
    import os
    import subprocess
    import sys
    case = json.loads((ROOT / "docs" / "findings" / "cases" / "p1_prompt_logprobs_mapping.json").read_text())
    version = _found()["api"].version
    patch = {"0.34.0": "p1_prompt_logprobs_mapping.patch", "0.33.0": "p1_prompt_logprobs_mapping_on_0.33.patch"}
    if version not in patch:
        pytest.skip(f"no P1 fix for vLLM {version} here (0.33.0, 0.34.0)")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FUZZRUNNER_VLLM_VERSION": version,
           "FUZZRUNNER_VLLM_PATCH": str(ROOT / "docs" / "findings" / patch[version])}
    for faults, code in (([], 0), (["prompt_lora_rows_shifted"], 1)):
        path = tmp_path / f"p1_{len(faults)}.json"
        path.write_text(json.dumps(dict(case, faults=faults)))
        r = subprocess.run([sys.executable, "-m", "fuzzrunner", "replay", str(path)], capture_output=True, text=True,
                           env=env, cwd=ROOT, timeout=900)
        assert r.returncode == code, r.stdout + r.stderr
        assert ("prompt_logits" in r.stdout) == bool(faults), r.stdout


@needs_vllm
@pytest.mark.slow  # a campaign until the fault's finding: ~5-10 min on the shared 2-core machine
def test_the_planted_prompt_token_ids_fault_is_found_from_scratch_and_not_labelled_known(tmp_path, capsys):
    """Seed 0, at most 300 examples (found after 65 on 0.34.0): a finding of the worker's output oracle that the
    campaign does not label as a known vLLM bug."""
    code, out, run = _fuzz(tmp_path, capsys, "--fault", "prompt_token_ids_unshifted", "--max-examples", "300",
                           "--seed", "0", "--no-shrink", "--budget", "3000", "--workers", "1")
    mine = [f for f in run["findings"] if f["violation"]["tensor"].startswith("step.prompt_logprobs")]
    assert code == 1 and mine, out
    assert all(not (f["triage"] or {}).get("known") for f in mine), mine
