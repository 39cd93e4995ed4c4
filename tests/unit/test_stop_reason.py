"""Why a campaign stopped is one enum (``StopReason``): the reports write the same strings as before, the
shards' reasons fold in one order, and no module compares or sets a stop reason as a string."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from fuzzrunner.engine.result import CampaignResult, StopReason, stop_text
from fuzzrunner.report import build_report, load_report, write_reports
from fuzzrunner.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_reports_write_the_strings_they_always_wrote():
    """Schema unchanged: docs/report.schema.json lists these, and every report before the enum carries them."""
    assert {r.value for r in StopReason} == {"max-examples", "budget", "interrupted", "write-error", "exhausted"}
    schema = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    listed = set(schema["$defs"]["run"]["properties"]["stop_reason"]["description"].split(", "))
    assert listed == {r.value for r in StopReason} | {"unknown"}
    assert stop_text(None) == "unknown" and all(stop_text(r) == r.value for r in StopReason)


@pytest.mark.parametrize("reason", [*StopReason, None])
def test_a_report_of_each_reason_writes_its_string_and_reads_back(tmp_path, reason):
    result = CampaignResult("reference_runner", Settings(), 1, (), stop_reason=reason)
    path = tmp_path / "r.json"
    write_reports(build_report([result]), json_path=path)
    [run] = load_report(path)["runs"]
    assert run["stop_reason"] == stop_text(reason)
    assert load_report(path)["summary"]["stop_reasons"] == [stop_text(reason)]


def test_each_reason_is_described():
    assert all(r.describe() and r.describe() != r.value for r in StopReason)


def test_the_shards_reasons_fold_to_the_most_telling():
    """Interrupted over a write error over the budget over max-examples over exhausted; a shard that said
    none (None) leaves the other's."""
    order = [StopReason.INTERRUPTED, StopReason.WRITE_ERROR, StopReason.BUDGET, StopReason.MAX_EXAMPLES,
             StopReason.EXHAUSTED]
    for i, first in enumerate(order):
        for later in order[i:]:
            assert StopReason.of_shards(first, later) is first and StopReason.of_shards(later, first) is first
        assert StopReason.of_shards(None, first) is first and StopReason.of_shards(first, None) is first
    assert StopReason.of_shards(None, None) is None and StopReason.of_shards() is None


def _string_stop_reasons(tree: ast.AST) -> list[int]:
    """Lines where a ``stop_reason`` is compared with, set to or given a string literal."""
    def stop(node) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "stop_reason") or \
            (isinstance(node, ast.Name) and node.id == "stop_reason")

    def text(node) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str)
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(stop, sides)) and any(map(text, sides)):
                lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(map(stop, targets)) and node.value is not None and text(node.value):
                lines.append(node.lineno)
        elif isinstance(node, ast.keyword) and node.arg == "stop_reason" and text(node.value):
            lines.append(node.value.lineno)
    return lines


def test_no_module_compares_or_sets_a_stop_reason_as_a_string():
    found = {str(p.relative_to(ROOT)): lines for folder in ("fuzzrunner", "targets") for p in (ROOT / folder).rglob("*.py")
             if (lines := _string_stop_reasons(ast.parse(p.read_text())))}
    assert found == {}


def test_the_check_sees_each_way_of_writing_one():
    planted = ('if r.stop_reason == "interrupted": pass\nx.stop_reason = "budget"\n'
               'CampaignResult(stop_reason="budget")\nok = r.stop_reason is StopReason.BUDGET\n')
    assert sorted(_string_stop_reasons(ast.parse(planted))) == [1, 2, 3]
