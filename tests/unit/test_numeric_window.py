"""Numeric findings carry expected and actual values around the worst element (details, text,
HTML, JUnit, repro), on the reference runner's planted fault that shows as a numeric mismatch."""

import json
import math

import pytest
import torch

from fuzzrunner import Case, _env, replay
from fuzzrunner.finding import Finding, render
from fuzzrunner.oracles.numeric import Comparison, mismatch, window
from fuzzrunner.repro import repro_script
from fuzzrunner.violation import window_lines

# One xdist group: under `--dist loadgroup` a module's ungrouped tests spread over both workers, each
# setting up the module's fixtures; grouped, `numeric` (a replay in a worker) is set up once per CI run.
pytestmark = [pytest.mark.skipif(_env.device_type() != "cpu", reason="replays a planted fault in-process; CPU only"),
              pytest.mark.xdist_group("numeric_window")]

# graph_freezes_active_loras: a graph captured with grid width 1 skips adapters at replay
# (tests/power/test_oracles_catch_faults.py): the numeric oracle sees wrong rows of `hidden`.
CFG = {"max_loras": 2, "capture_sizes": [1, 2, 4, 8]}
OPS = [{"op": "add_adapter", "adapter_id": 1, "rank": 4}, {"op": "add_adapter", "adapter_id": 2, "rank": 2},
       {"op": "capture", "size": 8},
       {"op": "replay", "requests": [{"adapter_id": a, "tokens": [1, 2]} for a in (0, 1, 2)]}]


@pytest.fixture(scope="module")
def numeric():
    case = Case("reference_runner", CFG, OPS, ["graph_freezes_active_loras"])
    [v] = [v for v in replay(case, oracles=["numeric"]) if v.tensor == "hidden"]
    return case, v


def test_the_planted_numeric_fault_carries_the_row_slice_around_its_worst_element(numeric):
    _, v = numeric
    d, w = v.details, v.details["window"]
    *lead, col = d["worst_index"]
    assert w["at"] == lead and w["worst"] == col
    assert w["start"] == max(0, col - 3) and w["stop"] - w["start"] == len(w["expected"]) == len(w["actual"])
    assert 1 < len(w["expected"]) <= 7
    k = col - w["start"]
    assert math.isclose(abs(w["actual"][k] - w["expected"][k]), d["worst_error"], rel_tol=1e-9)
    # no element of the window is off by more than the worst one, and the worst really is off
    assert all(abs(a - e) <= d["worst_error"] + 1e-12 for a, e in zip(w["actual"], w["expected"]))
    assert d["worst_error"] > 1e-3
    json.dumps(v.to_dict(), allow_nan=False)  # strict JSON: a report stays parseable everywhere


def test_text_junit_html_and_repro_show_expected_and_actual(numeric, tmp_path):
    from fuzzrunner.report import html_text, junit_text
    case, v = numeric
    f = Finding(v.signature, case, v, minimized=True)
    w = v.details["window"]
    text = render(f)
    k = w["worst"] - w["start"]
    assert f"[{w['expected'][k]:.6g}]" in text and f"[{w['actual'][k]:.6g}]" in text
    exp_line = next(line for line in text.splitlines() if "expected:" in line)
    assert len(exp_line.split()) == 1 + len(w["expected"])
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.settings import profile
    result = CampaignResult("reference_runner", profile("ci"), 0, (), examples=1, findings=[f])
    assert f"[{w['actual'][k]:.6g}]" in junit_text(result)
    assert 'class="window"' in html_text(result) and f"[{w['actual'][k]:.6g}]" in html_text(result)
    script = repro_script(f)
    assert "#     expected: " in script and "around the worst element" in script
    ns: dict = {}
    body = script.split("for v in found:\n", 1)[1].split("if found:", 1)[0]  # the printing loop, run here
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec("for v in found:\n" + body, {"found": [v], **ns})
    printed = out.getvalue()
    assert "around the worst element" in printed and f"{w['actual'][k]:.6g}" in printed


@pytest.mark.parametrize("shape,worst", [((9,), (8,)), ((2, 3, 12), (1, 2, 1)), ((4, 20), (3, 10))])
def test_the_window_is_the_last_dimension_clipped_at_the_edges(shape, worst):
    expected = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape)
    actual = expected.clone().float()
    actual[worst] += 5.0
    c = Comparison("out", actual, expected, torch.float32)
    rows, err, where = mismatch(c)
    assert where == worst and math.isclose(err, 5.0)
    w = window(c, where)
    col = worst[-1]
    assert (w["start"], w["stop"]) == (max(0, col - 3), min(shape[-1], col + 4))
    assert w["expected"] == expected[worst[:-1]][w["start"]:w["stop"]].tolist()
    assert w["actual"][col - w["start"]] == pytest.approx(w["expected"][col - w["start"]] + 5.0)


def test_non_finite_values_are_written_as_text_and_shape_mismatches_have_no_window():
    expected = torch.zeros(2, 4, dtype=torch.float64)
    actual = torch.zeros(2, 4)
    actual[1, 2] = float("nan")
    c = Comparison("out", actual, expected, torch.float32)
    w = window(c, mismatch(c)[2])
    assert w["actual"][2] == "nan" and json.dumps(w, allow_nan=False)
    assert "[nan]" in "\n".join(window_lines({"window": w}))
    assert mismatch(Comparison("out", torch.zeros(3), expected, torch.float32))[2] == ()
    assert window_lines({"rows": [1]}) == [] and window_lines({}) == []
