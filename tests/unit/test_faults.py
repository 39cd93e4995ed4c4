"""Each fault in ``runner/faults.py`` shows its symptom, deterministically, once the
``torch.empty`` metadata is poisoned; with the fault off the same sequence is correct.

Poisons here are *valid but wrong* slots (the last slot, holding an adapter), so a bad
read is a wrong number, not a crash: on the CPU an out-of-range index in an interpreted
Triton load is a raw host read that can kill the process. The one out-of-range poison,
the real #43139 crash, runs in a subprocess.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fuzzrunner.kernels.torch_ref import tolerance
from fuzzrunner.runner import DUMMY_KINDS, Faults, ModelRunner, ReferenceModel, Request, RunnerConfig
from fuzzrunner.runner.reference_model import adapter_of

REPO = Path(__file__).resolve().parents[2]
MAX_LORAS = 2
POISON_SLOT = MAX_LORAS - 1  # valid, and it holds adapter 2 once adapters are active


def req(adapter_id, *token_ids):
    return Request(adapter_id, tuple(token_ids))


def poison(runner: ModelRunner, slot: int) -> None:
    """Fill every ``torch.empty`` LoRA buffer as if the allocator handed back ``slot``s."""
    p = runner.punica
    for meta in (p.token_meta, p.prompt_meta):
        for t in (meta.token_lora_mapping, meta.token_indices_sorted_by_lora_ids, meta.active_lora_ids):
            t.fill_(slot)
    p.embeddings_indices.fill_(slot * runner.config.vocab_size)


def make(device, fault: str, faulty: bool):
    """A poisoned runner with adapters 1 and 2 already in slots 0 and 1, no mapping programmed."""
    config = RunnerConfig(max_loras=MAX_LORAS)
    runner = ModelRunner(config, device=device, faults=Faults.from_names([fault] if faulty else []))
    runner.add_adapter(1, 8)
    runner.add_adapter(2, 8)
    runner.adapters.activate([1, 2])  # weights in the slots, so a poisoned slot reads real numbers
    poison(runner, POISON_SLOT)
    return runner, ReferenceModel(config)


def close(runner, actual: torch.Tensor, expected: torch.Tensor) -> bool:
    rtol, atol = tolerance(getattr(torch, runner.config.dtype))
    return torch.allclose(actual.cpu().double(), expected, rtol=rtol, atol=atol)


def matches_reference(runner, ref, out) -> bool:
    reg = runner.adapters.registered
    h, logits = ref.forward(out.input_ids, [adapter_of(reg, a) for a in out.token_adapters],
                            out.logits_rows, [adapter_of(reg, a) for a in out.row_adapters])
    return close(runner, out.hidden, h) and close(runner, out.logits, logits)


def matches_no_adapter(runner, ref, out) -> bool:
    h, logits = ref.forward(out.input_ids, [None] * len(out.input_ids), out.logits_rows,
                            [None] * len(out.logits_rows))
    return close(runner, out.hidden, h) and close(runner, out.logits, logits)


def record_bodies(runner) -> list:
    """Keep each forward's full hidden states, padded rows included (StepOutput drops them)."""
    seen, body = [], runner.model.body

    def recording_body(input_ids):
        hidden = body(input_ids)
        seen.append(hidden.detach().clone())
        return hidden

    runner.model.body = recording_body
    return seen


FAULTY = pytest.mark.parametrize("faulty", [False, True], ids=["fault-off", "fault-on"])


# -- dummy_run_skips_mapping -------------------------------------------------------------------
@FAULTY
@pytest.mark.parametrize("kind", DUMMY_KINDS)
def test_dummy_run_skips_mapping_reads_poisoned_metadata(device, kind, faulty):
    runner, ref = make(device, "dummy_run_skips_mapping", faulty)
    out = runner.dummy_run(4, kind)
    # bgmv reads the poisoned token_lora_mapping and applies adapter 2's gate layer.
    assert matches_no_adapter(runner, ref, out) != faulty


@FAULTY
def test_dummy_run_skips_mapping_reads_the_last_steps_metadata(device, faulty):
    """A DP-idle dummy run after a real LoRA step (docs/background.md, vLLM 3.2: execute_dummy_batch)."""
    runner, ref = make(device, "dummy_run_skips_mapping", faulty)
    out = runner.execute_model([req(1, 1, 2, 3), req(0, 4, 5), req(2, 6, 7, 8)])
    assert matches_reference(runner, ref, out)
    out = runner.dummy_run(8, "dp_idle")  # same size: the stale rows stay inside the batch
    assert matches_no_adapter(runner, ref, out) != faulty


CRASH_SCRIPT = """
import sys
import fuzzrunner
from fuzzrunner.runner import Faults, ModelRunner, RunnerConfig
runner = ModelRunner(RunnerConfig(max_loras=2), faults=Faults.from_names(sys.argv[1:]))
p = runner.punica
for meta in (p.token_meta, p.prompt_meta):
    for t in (meta.token_lora_mapping, meta.token_indices_sorted_by_lora_ids, meta.active_lora_ids):
        t.fill_(0x7F7F7F7F)
p.embeddings_indices.fill_(0x7F7F7F7F)
out = runner.dummy_run(1, "profile")
print("SURVIVED", out.hidden.sum().item(), flush=True)  # .item() waits for a GPU
"""


@FAULTY
def test_dummy_run_skips_mapping_dies_on_out_of_range_poison(faulty):
    """The #43139 crash: the profile run indexes the LoRA embedding table with garbage."""
    args = ["dummy_run_skips_mapping"] if faulty else []
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    report = f"rc={done.returncode}\n{done.stdout}\n{done.stderr[-2000:]}"
    if faulty:
        assert done.returncode != 0 and "SURVIVED" not in done.stdout, report
    else:
        assert done.returncode == 0 and "SURVIVED" in done.stdout, report


# -- padding_not_mapped ------------------------------------------------------------------------
@FAULTY
@pytest.mark.parametrize("history", ["poisoned", "after-8-tokens"])
def test_padding_not_mapped_leaves_padded_slots_stale(device, history, faulty):
    runner, ref = make(device, "padding_not_mapped", faulty)
    bodies = record_bodies(runner)
    if history == "after-8-tokens":
        runner.execute_model([req(1, 1, 2, 3, 4), req(2, 5, 6, 7, 8)])  # token 3: adapter 1, slot 0
        stale = runner.adapters.lora_index_to_id.index(1)
    else:
        stale = POISON_SLOT
    out = runner.execute_model([req(2, 9, 10), req(0, 11)])  # 3 tokens, padded to 4
    assert out.num_tokens_after_padding == 4
    assert matches_reference(runner, ref, out)  # the real rows are right either way
    s2 = runner.adapters.lora_index_to_id.index(2)
    read = runner.punica.token_meta.token_lora_mapping[:4].tolist()
    assert read == [s2, s2, -1, stale if faulty else -1]
    # The padded token's hidden row: no adapter when mapped, the stale slot's gate layer when not.
    ids = runner.input_ids[:4].tolist()
    reg = runner.adapters.registered
    expected, _ = ref.forward(ids, [reg[2], reg[2], None, None], [1, 2], [reg[2], None])
    hidden = bodies[-1]
    assert close(runner, hidden[:3], expected[:3])
    assert close(runner, hidden[3:], expected[3:]) != faulty


# -- stale_after_all_no_lora -------------------------------------------------------------------
@FAULTY
@pytest.mark.parametrize("history", ["poisoned", "after-lora-step"])
def test_stale_after_all_no_lora_applies_old_adapters(device, history, faulty):
    runner, ref = make(device, "stale_after_all_no_lora", faulty)
    if history == "after-lora-step":
        out = runner.execute_model([req(1, 1, 2, 3, 4), req(2, 5, 6, 7, 8)])
        assert matches_reference(runner, ref, out)
    out = runner.execute_model([req(0, 1, 2, 3, 4), req(0, 5, 6, 7, 8)])
    assert matches_reference(runner, ref, out) != faulty
    assert runner.punica.token_meta.no_lora_flag_cpu.item()  # the flag was right; bgmv ignored it


# -- graph_freezes_active_loras ----------------------------------------------------------------
@FAULTY
def test_graph_freezes_active_loras_skips_adapters_on_replay(device, faulty):
    runner, ref = make(device, "graph_freezes_active_loras", faulty)
    runner.capture(8)
    out = runner.replay([req(1, 1, 2, 3), req(2, 4, 5, 6), req(0, 7, 8)])
    assert out.graph_size == 8
    assert matches_reference(runner, ref, out) != faulty
    # One adapter and no base token is one active id: a grid of 1 covers it, no symptom.
    out = runner.replay([req(1, 1, 2, 3, 4, 5, 6, 7, 8)])
    assert out.graph_size == 8 and matches_reference(runner, ref, out)


@pytest.mark.parametrize("faulty", [False, True])
def test_mapping_cache_ignores_slot_changes_reads_the_old_slot(device, faulty):
    runner, ref = make(device, "mapping_cache_ignores_slot_changes", faulty)  # 1 in slot 0, 2 in slot 1
    assert matches_reference(runner, ref, runner.execute_model([req(2, 1, 2)]))
    runner.remove_adapter(1)            # slot 0 free
    runner.add_adapter(2, 4)            # re-added (new weights): slot 1 freed too
    out = runner.execute_model([req(2, 1, 2)])  # the same mapping; 2 now lands in slot 0
    assert runner.adapters.lora_index_to_id[0] == 2
    assert matches_reference(runner, ref, out) != faulty


def test_faults_are_off_by_default():
    assert Faults().enabled() == []
    assert Faults.names() == ["dummy_run_skips_mapping", "padding_not_mapped", "stale_after_all_no_lora",
                              "graph_freezes_active_loras", "mapping_cache_ignores_slot_changes"]
