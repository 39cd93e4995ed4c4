"""``sglang_lora``'s cases, features and seeds, from their JSON alone (no SGLang needed)."""

import json
from importlib import import_module
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.coverage import features_of

cases = import_module("fuzzrunner.targets.sglang_lora.cases")
features = import_module("fuzzrunner.targets.sglang_lora.features")
runner = import_module("fuzzrunner.targets.sglang_lora.runner")
SEEDS = Path(cases.__file__).parent / "seeds"
FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@FAST
@given(st.data(), st.booleans())
def test_every_drawn_case_is_valid_and_reports_only_declared_features(data, idle):
    case = data.draw(cases.sglang_lora_cases((), idle=idle))
    runner.check(case)
    assert set(features_of(features.features, case)) <= set(features.FEATURE_SPACE)
    kinds = [op["op"] for op in case.ops]
    assert idle or "idle" not in kinds
    captured = []
    for op in case.ops:  # a replay always has a capture at least as large as its batch before it
        if op["op"] == "capture":
            captured.append(op["bs"])
        if op["op"] == "replay":
            assert any(bs >= len(op["uids"]) for bs in captured), case.ops


def test_the_seeds_are_the_known_bugs_minimal_cases_and_plant_no_fault():
    seeds = sorted(SEEDS.glob("*.json"))
    assert len(seeds) == 3
    for p in seeds:
        case = Case.from_dict(json.loads(p.read_text()))
        runner.check(case)
        assert case.faults == () and [op["op"] for op in case.ops][:2] == ["capture", "replay"]
