"""Issue 23: a stale or uninitialized read of a per-step buffer names the op that should have written
it (the dummy-run path that forgot), not only the line that read it; the summary, the repro header
and the HTML show it, and the triggering op."""

from pathlib import Path

import pytest

from fuzzrunner import Case, replay
from fuzzrunner.finding import Finding, group, render
from fuzzrunner.repro import repro_script

TARGET = str(Path(__file__).parents[1] / "integration" / "renamable_target.py") + ":TARGET"


def _head(*ops):
    case = Case("renamable", {"max_tokens": 8}, ops)
    [(head, others)] = group(replay(case, target=TARGET, oracles=["shadow"]))
    return Finding.of(head, others, case)


@pytest.mark.parametrize("ops, why", [
    (({"op": "step", "slots": [1, 2, 3]}, {"op": "dummy_run", "num_tokens": 2}),
     "op 1 (dummy_run) never wrote slot_of_token[0]; last written in op 0 (step)"),
    (({"op": "dummy_run", "num_tokens": 2},),
     "op 0 (dummy_run) never wrote slot_of_token[0]; never written by any op"),
])
def test_a_per_step_buffer_read_unwritten_names_the_op_that_did_not_write_it(ops, why):
    f = _head(*ops)
    assert f.violation.details["unwritten_by"] == why
    assert why in render(f).splitlines()[2]
    assert f"#   {why}" in repro_script(f)


def test_the_html_report_shows_it(tmp_path):
    from fuzzrunner.report.html import _findings
    f = _head({"op": "dummy_run", "num_tokens": 1})
    html = _findings({"findings": [f.to_dict()], "replayed": [], "examples": 1}, tmp_path)
    assert "op 0 (dummy_run) never wrote slot_of_token[0]" in html
