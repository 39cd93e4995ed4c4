"""The vocabulary registry: every registered name resolves, and a new oracle needs only a spec."""

import pytest

from fuzzrunner import names, settings
from fuzzrunner.case import Case
from fuzzrunner.context import Context
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.execute import run_case
from fuzzrunner.oracles.base import Oracle
from fuzzrunner.target import load_target
from fuzzrunner.violation import Violation


@pytest.mark.parametrize("name", sorted(names.ORACLES))
def test_every_registered_oracle_resolves_to_an_oracle(name):
    for context in (Context.of("cpu"), Context.of("cpu", shadow="device")):
        assert isinstance(names.ORACLES[name].make(context), Oracle)
    for tool in names.ORACLES[name].not_under:
        assert tool in names.SANITIZER_TOOLS
    for device in names.ORACLES[name].default_on:
        assert device in names.DEVICES


def test_every_profile_and_kind_is_defined_once():
    assert set(names.PROFILES) == set(settings.PROFILES)
    assert set(names.crash_kinds()) == {"crash", "timeout"} <= set(names.KINDS)
    for kind in names.KINDS.values():
        assert kind.name and kind.family and kind.priority >= 0


def test_the_sanitizer_forbids_poison_and_invariants_under_initcheck():
    assert names.effective_oracles(None, "cuda", "initcheck") == ("numeric", "state")
    assert names.effective_oracles(["shadow", "poison"], "cpu", "none") == ("shadow", "poison")
    with pytest.raises(InvalidArgument, match="unknown oracle 'posion'"):
        names.effective_oracles(["posion"], "cpu")


class _CountsOps(Oracle):
    """A third-party oracle: one violation per op whose name it was told to flag."""

    name = "counts"

    def __init__(self):
        self.seen = []

    def begin_op(self, index, op):
        self.seen.append((index, op["op"]))

    def finish(self):
        return [Violation("counts", "invariant-violation", op, "", "", f"op {i} is {op}", {"op_index": i})
                for i, op in self.seen if op == "dummy_run"]


def test_a_registered_oracle_runs_without_touching_any_other_file(monkeypatch):
    monkeypatch.setitem(names.ORACLES, "counts", names.OracleSpec("counts", f"{__name__}:_CountsOps"))
    case = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
                ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))
    violations = run_case(case, load_target("reference_runner"), oracles=("counts",))
    assert [(v.tool, v.kernel) for v in violations] == [("counts", "dummy_run")]


# -- a new kind and a new tool: one registry entry each (issue 25) ------------------------------

class _RaceOracle(Oracle):
    """A plug-in oracle reporting a kind of its own: a read racing a write, at an element of one op."""

    name = "racer"

    def __init__(self):
        self.ops = []

    def begin_op(self, index, op):
        self.ops.append((index, op["op"]))

    def finish(self):
        return [Violation("racer", "racy-read", "lora_shrink", "fuzzrunner/runner/punica.py:10", "token_lora_mapping",
                          f"op {i}: token_lora_mapping[0] read while op {i} wrote it",
                          {"op_index": i, "element": "[0]"})
                for i, op in self.ops if op == "dummy_run"]


def test_a_new_violation_kind_and_its_oracle_are_one_registry_entry_each(monkeypatch, tmp_path):
    """The kind's flags carry its policy everywhere: grouping (a located memory error heads its op, the
    numeric difference of that op joins it), the text, the HTML badge's colour, the JSON report
    (schema-checked) and the repro script; no other file names it."""
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.finding import Finding, group, render
    from fuzzrunner.report import build_report, html_text, json_text
    from fuzzrunner.repro import repro_script
    monkeypatch.setitem(names.KINDS, "racy-read", names.Kind("racy-read", 0, "racy-read", memory=True,
                                                              colour="#123456"))
    monkeypatch.setitem(names.ORACLES, "racer", names.OracleSpec("racer", f"{__name__}:_RaceOracle"))
    case = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
                ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))
    violations = run_case(case, load_target("reference_runner"), oracles=("racer",))
    numeric = Violation("numeric", "numeric-mismatch", "lora_shrink", "", "hidden", "off", {"op_index": 0})
    (head, others), = group([*violations, numeric])
    assert head.kind == "racy-read" and others == [numeric]
    finding = Finding(head.signature, case, head, others, first_found_after_examples=1)
    assert "racy-read of token_lora_mapping" in render(finding)
    result = CampaignResult("reference_runner", settings.profile("ci"), 0, (), examples=1, duration_s=1.0,
                            findings=[finding])
    assert 'background:#123456' in html_text(result)
    import json
    from pathlib import Path

    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed: case files and reports go unchecked here")
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json").read_text())
    jsonschema.validate(json.loads(json_text(result)), schema)
    assert build_report([result])["runs"][0]["findings"][0]["signature"]["kind"] == "racy-read"
    script = repro_script(finding)
    assert f'v.signature.matches("{finding.id}")' in script and 'oracles=["racer"]' in script


def test_a_new_tool_is_one_registry_entry_and_its_flags_decide_the_repro(monkeypatch):
    """A checker registered as a sanitizer replays under compute-sanitizer on a GPU; one registered as
    reporting process deaths replays its crash isolated; an unregistered one gets no special policy."""
    from fuzzrunner.finding import Finding
    from fuzzrunner.repro import repro_script
    case = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
                ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))

    def script(tool, kind):
        v = Violation(tool, kind, "lora_shrink", "", "t", "bad", {"op_index": 0})
        return repro_script(Finding(v.signature, case, v, []))
    monkeypatch.setitem(names.TOOLS, "my-sanitizer", names.Tool("my-sanitizer", sanitizer=True))
    monkeypatch.setitem(names.TOOLS, "my-watchdog", names.Tool("my-watchdog", process_death=True))
    assert 'device="cuda"' in script("my-sanitizer", "out-of-bounds")
    assert "isolated=True" in script("my-watchdog", "crash")
    assert 'device="cuda"' not in script("unregistered", "out-of-bounds")
    assert names.tool("unregistered") == names.Tool("unregistered")
