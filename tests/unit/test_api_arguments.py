"""Issue 47 item 15, the library's front door: a string where several names are expected was iterated
per character (``faults="dummy_run_skips_mapping"`` -> ``unknown fault 'd'``); ``fuzz(123)`` was an
AttributeError; ``targets`` and ``doctor`` imported every engine; campaigns without a corpus left
``fuzzrunner-hypothesis-<uid>`` in TMPDIR; "1 cases". One name is one item, everywhere
(``arguments.several``); every other wrong type is one ``InvalidArgument`` line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import fuzzrunner
from fuzzrunner import api
from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.settings import Settings
from fuzzrunner.target import Target, load_target

ROOT = Path(__file__).resolve().parents[2]


def _no_campaign(monkeypatch) -> list:
    """fuzz() up to the campaign: what it would run with, recorded instead."""
    calls: list = []
    monkeypatch.setattr(api, "run_campaign", lambda spec, settings, **kw: calls.append((spec, settings, kw)))
    return calls


def test_one_fault_name_is_one_fault_not_its_letters(monkeypatch):
    calls = _no_campaign(monkeypatch)
    fuzzrunner.fuzz("reference_runner", faults="dummy_run_skips_mapping")
    assert calls[0][2]["faults"] == ("dummy_run_skips_mapping",)
    target = load_target("reference_runner")
    assert target.check_faults("dummy_run_skips_mapping") == ("dummy_run_skips_mapping",)
    with pytest.raises(InvalidArgument, match="unknown fault 'dummy_run_skips_mappin' for target"):
        target.check_faults("dummy_run_skips_mappin")


def test_one_oracle_name_is_one_oracle_in_settings_replay_and_run_case():
    assert Settings(oracles="shadow").oracles == ("shadow",)
    assert Settings(oracles=["shadow", "numeric"]).oracles == ("shadow", "numeric")
    with pytest.raises(InvalidArgument, match="unknown oracle 'shadw'"):
        Settings(oracles="shadw")
    case = Case("reference_runner", {"max_loras": 1}, (), ())
    target = load_target("reference_runner")
    assert fuzzrunner.replay(case, target=target, oracles="invariants", device="cpu") == []


def test_a_targets_fields_of_several_names_take_one_as_one():
    t = Target("t", "", lambda *a, **k: None, lambda case, ctx: None, faults="planted", feature_space="f",
               details="one line", own_code=Path("adapter.py"))
    assert (t.faults, t.feature_space, t.details, t.own_code) == (("planted",), ("f",), ("one line",),
                                                                   ("adapter.py",))


@pytest.mark.parametrize("call, says", [
    (lambda: fuzzrunner.fuzz(123), "fuzz(target)=123 is int: pass a built-in target's name, a 'FILE.py:OBJ' or "
                                   "'package.module:OBJ' spec, or a fuzzrunner.Target."),
    (lambda: fuzzrunner.fuzz("reference_runner", faults=5), "faults=5 must be a name or a list of them (strings), "
                                                            "not int."),
    (lambda: fuzzrunner.fuzz("reference_runner", faults=[b"x"]), "faults: item 0 is bytes (b'x'); each must be a "
                                                                 "name (a string)."),
    (lambda: fuzzrunner.fuzz("reference_runner", corpus=7), "fuzz(corpus)=7 is int: pass a path (str or "
                                                           "os.PathLike), or None for no corpus."),
    (lambda: fuzzrunner.fuzz("reference_runner", on_event="print"), "fuzz(on_event)='print' is str: pass a "
                                                                   "function of one event, or None."),
    (lambda: fuzzrunner.fuzz("reference_runner", profile=1), "fuzz(profile)=1 is int: pass a string, or None."),
    (lambda: fuzzrunner.replay(3), "replay(case)=3 is int: pass a fuzzrunner.Case or a path (str or os.PathLike) "
                                   "of a case or finding file."),
    (lambda: fuzzrunner.replay("x.json", target=4), "replay(target)=4 is int: pass a built-in target's name, a "
                                                    "'FILE.py:OBJ' or 'package.module:OBJ' spec, or a "
                                                    "fuzzrunner.Target, or None for the one recorded."),
    (lambda: fuzzrunner.replay("x.json", oracles=1), "oracles=1 must be a name or a list of them (strings), "
                                                     "not int."),
    (lambda: Settings(oracles={"shadow": 1}), "oracles={'shadow': 1} must be a name or a list of them (strings), "
                                              "not dict.")])
def test_a_wrong_type_at_the_front_door_is_one_line_naming_the_argument(monkeypatch, call, says):
    _no_campaign(monkeypatch)
    with pytest.raises(InvalidArgument) as e:
        call()
    assert str(e.value) == says


# -- targets and doctor: no engine imported ----------------------------------------------------------

def test_targets_imports_no_target_and_no_engine():
    code = ("import sys; from fuzzrunner.cli import main; code = main(['targets']); "
            "print(code, sorted(m for m in ('torch', 'triton', 'vllm', 'sglang') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    lines = out.stdout.splitlines()
    assert lines[-1] == "0 []", out.stdout + out.stderr
    listed = {line.split()[0]: line for line in lines if line and not line.startswith(("Your own", "0 "))}
    assert set(listed) == set(fuzzrunner.target.BUILTIN)
    assert "the reference model runner driven by op sequences" in listed["reference_runner"]


def test_each_targets_one_liner_says_what_it_drives_from_its_own_declaration():
    """`fuzzrunner targets` said nothing of the scheduler path sglang_engine drives, nor of vllm_engine's MoE layer and
    V1 runner (new-user trial): each built-in target declares what it drives (``DRIVES`` in its module, read without
    importing it), and its one-liner names every part of that declaration."""
    from fuzzrunner import catalog
    for name, spec in fuzzrunner.target.BUILTIN.items():
        drives = catalog.declared_drives(spec)
        assert drives, f"{name}: its module declares no DRIVES"
        line = catalog.about(name).description
        assert all(part in line for part in drives), (name, line)
    sglang, vllm = catalog.about("sglang_engine").description, catalog.about("vllm_engine").description
    assert "scheduler path" in sglang and "direct path" in sglang and "MoE" in sglang, sglang
    assert "V1 model runner" in vllm and "FusedMoEWithLoRA" in vllm and "V2 model runner" in vllm, vllm


def test_vllm_engines_one_liner_names_the_moe_layer_of_every_adapter_format_it_draws():
    """`fuzzrunner targets` named FusedMoEWithLoRA only, after vllm_engine began to drive FusedMoE3DWithLoRA (half the
    MoE cases of a CPU campaign, "format": "3d"; new-user trial): the layer of each format the cases draw
    (``moe.FORMATS``) is named in the declaration the one-liner is made of."""
    from fuzzrunner import catalog
    from targets.vllm_engine import moe
    line = catalog.about("vllm_engine").description
    assert set(moe.LAYERS) == set(moe.FORMATS)
    for fmt, layer in moe.LAYERS.items():
        assert re.search(rf"\b{layer}\b", line), (fmt, layer, line)


def test_the_engine_targets_one_liners_name_what_they_began_to_drive():
    """`fuzzrunner targets` said nothing of sglang_engine's radix cache nor of SGLang's own result processing, and
    said vllm_engine's 3D MoE layer ran in "half the MoE cases of a CPU campaign" after GPU campaigns began to draw
    it (``moe.DEVICES_3D`` gained cuda; new-user trial)."""
    from fuzzrunner import catalog
    from targets.vllm_engine import moe
    sglang, vllm = catalog.about("sglang_engine").description, catalog.about("vllm_engine").description
    assert "radix cache" in sglang and "process_batch_result" in sglang, sglang
    if "cuda" in moe.DEVICES_3D:
        assert "of a CPU campaign" not in vllm and "on a GPU" in vllm, vllm


@pytest.mark.parametrize("declared, says", [
    ('DRIVES = ("its pool", "its scheduler")', "a user runner; drives its pool; its scheduler"),
    ("DRIVES = tuple(x for x in 'ab')", "a user runner"),  # not literals: the description alone, never a failure
    ('DRIVES = ("ok", 3)', "a user runner"),
    ("", "a user runner"),
])
def test_a_plugin_targets_one_liner_takes_its_declaration_too(tmp_path, monkeypatch, declared, says):
    from fuzzrunner import catalog
    (tmp_path / "user_runner_target.py").write_text(f'"""Target ``mine``: a user runner."""\n{declared}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(fuzzrunner.target.BUILTIN, "mine", "user_runner_target:TARGET")
    assert catalog.about("mine").description == says


def test_every_engine_target_has_a_cheap_availability_check():
    """A built-in target that tests someone else's code names the check that says, without importing it,
    whether that code is here: without one, `targets` would list it as available where it is not."""
    from fuzzrunner import catalog
    assert set(fuzzrunner.target.BUILTIN) == set(catalog.AVAILABILITY) | set(catalog.OURS)
    for name in catalog.AVAILABILITY:
        about = catalog.about(name)
        assert (about.unavailable is None) != (about.engine == ""), about
        assert about.description and "``" not in about.description


def test_doctor_says_where_an_engine_is_without_importing_it_unless_asked(monkeypatch):
    from fuzzrunner import doctor, target

    def load(name):
        raise AssertionError(f"doctor imported {name}")
    monkeypatch.setattr(target, "load_target", load)
    monkeypatch.setattr(target, "unavailable", load)
    monkeypatch.setattr("fuzzrunner.targets.vllm_lora.vllm_available", lambda: (True, "/trees/vllm/0.33.0"))
    [line] = doctor._target_lines("vllm_lora", engines=False)
    assert line.startswith("target       vllm_lora: set up (/trees/vllm/0.33.0), not imported") and \
        "--engines" in line
    monkeypatch.setattr("fuzzrunner.targets.vllm_lora.vllm_available", lambda: (False, "no tree"))
    assert doctor._target_lines("vllm_lora", engines=False) == ["target       vllm_lora: unavailable: no tree"]
    with pytest.raises(AssertionError, match="doctor imported vllm_lora"):
        doctor._target_lines("vllm_lora", engines=True)


# -- TMPDIR, counts ------------------------------------------------------------------------------------

def test_a_campaign_without_a_corpus_leaves_no_hypothesis_folder_in_tmpdir(tmp_path, monkeypatch):
    from hypothesis import configuration

    from fuzzrunner.engine.database import hypothesis_storage
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with hypothesis_storage(None):
        home = configuration.storage_directory("x", intent_to_write=True).path
        home.mkdir(parents=True, exist_ok=True)
        (home / "written").write_text("Hypothesis' cache")
        assert str(home).startswith(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_counts_are_printed_in_the_right_number():
    from fuzzrunner.cli import render
    from fuzzrunner.engine.result import CampaignResult

    r = CampaignResult("t", Settings(), 1, ())
    r.examples = r.generated = 1
    assert render._cases_text(r).startswith("1 case: 0 replayed (corpus and seeds), 1 generated (0 invalid)")
    assert render._nightly_line([r], {}, [], 0) == "nightly: t 1 case 0 findings: exit 0 (no finding)"
