"""The corpus owns its layout: where a finding's repro script goes (``Corpus.repro_path``, written by
``repro.save_repros``), which files are the regression set the pytest plugin collects
(``Corpus.regression_files``), which folder a file sits in (``section_of``). The CLI and the plugin
derived these themselves."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from fuzzrunner.case import Case
from fuzzrunner.corpus import CASES, FINDINGS, Corpus, section_of
from fuzzrunner.finding import Finding
from fuzzrunner.violation import Violation

CASE = Case("reference_runner", {"max_loras": 1}, ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))


def _finding(tensor="token_lora_mapping") -> Finding:
    v = Violation("shadow", "uninitialized-read", "_lora_shrink_kernel", "fuzzrunner/runner/punica.py:103", tensor,
                  f"{tensor}[0]: never written", {"op_index": 0})
    return Finding.of(v, [], CASE)


def test_a_repro_script_is_named_as_its_finding_file(tmp_path):
    f = _finding()
    assert Corpus(tmp_path).repro_path("reference_runner", f.id) == tmp_path / "repro" / "reference_runner" / \
        f"{f.id}.py"
    planted = Corpus(tmp_path, faults=("b_fault", "a fault"))  # sorted, joined, made safe
    assert planted.repro_path("my/runner", f.id) == tmp_path / "repro" / "my_runner" / f"a_fault_b_fault.{f.id}.py"
    assert planted.finding_path("my/runner", f.id).name == f"a_fault_b_fault.{f.id}.json"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_save_repros_writes_each_finding_s_script_and_loses_only_a_failed_one(tmp_path):
    good, blocked = _finding(), _finding("lora_token_start_loc")
    result = SimpleNamespace(target="reference_runner", faults=("dummy_run_skips_mapping",),
                             findings=[blocked, good])
    corpus = Corpus(tmp_path, faults=result.faults)
    corpus.repro_path(result.target, blocked.id).parent.mkdir(parents=True)
    os.mkfifo(corpus.repro_path(result.target, blocked.id))  # refused in a folder of ours, never written through
    from fuzzrunner.repro import save_repros
    warnings = save_repros(result, tmp_path)
    assert len(warnings) == 1 and warnings[0].startswith(f"no repro for {blocked.id}: ")
    assert blocked.repro is None
    assert good.repro == str(corpus.repro_path(result.target, good.id)) and os.path.isfile(good.repro)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_the_regression_set_is_findings_and_cases_of_every_target(tmp_path):
    corpus = Corpus(tmp_path)
    kept = [corpus.save_finding("reference_runner", _finding()), corpus.save_finding("mine", _finding()),
            corpus.save_case(CASE, "warm")]
    Corpus(tmp_path, expected=True).save_finding("reference_runner", _finding("x"))  # not regressions:
    corpus.set_aside("mine", _finding("y"))                                           # expected/, flaky/,
    (tmp_path / "repro" / "t").mkdir(parents=True)                                    # repro/, hypothesis/
    (tmp_path / "repro" / "t" / "a.json").write_text("{}")
    (tmp_path / "hypothesis" / "t").mkdir(parents=True)
    (tmp_path / "hypothesis" / "t" / "b.json").write_text("{}")
    broken = tmp_path / CASES / "reference_runner" / "broken.json"
    broken.write_text("{not json")  # listed: its item says it cannot read it
    fifo = tmp_path / FINDINGS / "mine" / "pipe.json"
    os.mkfifo(fifo)
    skipped = []
    listed = corpus.regression_files(on_skip=lambda path, e: skipped.append(path))
    assert sorted(listed) == sorted([*kept, broken])
    assert skipped == [fifo]
    assert {section_of(p) for p in listed} == {FINDINGS, CASES}
