"""Coverage features: declared by every built-in target, counted and merged, rarity for steering."""

import math
from collections import Counter
from importlib import import_module

import pytest
from fuzzrunner.targets.reference_runner import TARGET as REFERENCE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.coverage import Coverage, features_of, summary_line, table
from fuzzrunner.errors import HarnessError

kernel_cases = import_module("fuzzrunner.targets.lora_kernels.cases")
kernel_features = import_module("fuzzrunner.targets.lora_kernels.features")
vllm_cases = import_module("fuzzrunner.targets.vllm_lora.cases")  # no vLLM needed: these import none
vllm_features = import_module("fuzzrunner.targets.vllm_lora.features")


def test_a_broken_or_ill_typed_feature_function_is_a_harness_error_in_one_line():
    def broken(case):
        raise KeyError("config")
    with pytest.raises(HarnessError, match=r"target 't': features\(case\) failed: KeyError"):
        features_of(broken, None, "t")
    with pytest.raises(HarnessError, match="non-empty strings"):
        features_of(lambda c: ["ok", 3], None, "t")
    with pytest.raises(HarnessError, match="non-empty strings"):
        features_of(lambda c: ["a & b"], None, "t")
    assert features_of(lambda c: ["b", "a", "b"], None) == ("a", "b")
    assert features_of(None, None) == ()


def test_counts_pairs_merge_and_never_reached():
    a, b = Coverage(("x", "y", "z", "w")), Coverage(("x", "v"))
    a.add(("x", "y"))
    a.add(("x",))
    b.add(("v", "x", "y"))
    a.merge(b)
    assert a.cases == 3 and a.features == Counter({"x": 3, "y": 2, "v": 1})
    assert a.pairs == Counter({("x", "y"): 2, ("v", "x"): 1, ("v", "y"): 1})
    assert a.never_reached() == ["w", "z"]
    d = a.to_dict()
    assert d["never_reached"] == ["w", "z"] and ["x", "y", 2] in d["pairs"]
    assert Coverage.from_dict(d) == a


def test_rarity_is_highest_for_a_case_with_a_feature_or_pair_never_seen():
    c = Coverage()
    for _ in range(7):
        c.add(("x", "y"))
    c.add(("z",))
    assert c.rarity(("x", "y")) == -3.0                      # seen 7 times: -log2(8)
    assert c.rarity(("x", "z")) == 0.0                       # the pair x & z is new
    assert c.rarity(("z",)) == -1.0 > c.rarity(("x",))       # z is rarer than x
    assert c.rarity(("new",)) == 0.0
    assert c.rarity(()) == -math.log2(9)


def test_the_terminal_table_marks_declared_features_never_reached():
    c = Coverage(("x", "never"))
    c.add(("x", "extra"))
    lines = table(c.to_dict())
    assert any(line.startswith("never") and line.endswith("NEVER REACHED") for line in lines)
    assert any(line.startswith("extra") and "100.0%" in line for line in lines)
    assert "1 declared feature(s) never reached: never" in lines[-1]
    assert "all 2 declared features reached" in summary_line({**c.to_dict(), "never_reached": []})


def _case(ops, **config):
    return Case("reference_runner", {"max_loras": 2, "capture_sizes": [1, 2, 4, 8], **config}, tuple(ops))


def _step(*ids, op="step"):
    return {"op": op, "requests": [{"adapter_id": a, "tokens": [1, 2]} for a in ids]}


ADD1, ADD2 = {"op": "add_adapter", "adapter_id": 1, "rank": 1}, {"op": "add_adapter", "adapter_id": 2, "rank": 1}


def test_reference_runner_features_follow_slots_to_the_deep_state():
    deep = [ADD1, ADD2, _step(2, 1), _step(1), {"op": "remove_adapter", "adapter_id": 2}, ADD1, _step(1)]
    f = set(features_of(REFERENCE.features, _case(deep)))
    assert {"slots=moved-between-same-mappings", "mapping=repeated", "adapter=re-added", "slots=full",
            "batch_adapters=2", "op=remove_adapter", "max_loras=2"} <= f
    shallow = deep[:3] + deep[4:]  # without the one-adapter step, 1 stays in slot 1
    assert "slots=moved-between-same-mappings" not in features_of(REFERENCE.features, _case(shallow))
    evict = [ADD1, ADD2, {"op": "add_adapter", "adapter_id": 3, "rank": 1}, _step(1, 2), _step(3)]
    assert "slots=eviction" in features_of(REFERENCE.features, _case(evict))
    graph = [{"op": "capture", "size": 4}, _step(0, 0, 0, op="replay"), _step(0, op="replay"),
             {"op": "dummy_run", "num_tokens": 1, "kind": "dp_idle"}]
    assert {"replay=graph", "replay=eager-fallback", "batch=padded", "dummy=dp_idle"} <= \
        set(features_of(REFERENCE.features, _case(graph, capture_sizes=[2, 4])))


FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@FAST
@given(st.data())
def test_every_feature_a_built_in_target_reports_is_declared(data):
    for strategy, feats, space in (
            (REFERENCE.cases((), max_ops=8), REFERENCE.features, REFERENCE.feature_space),
            (kernel_cases.cases(()), kernel_features.features, kernel_features.FEATURE_SPACE),
            (vllm_cases.vllm_lora_cases(()), vllm_features.features, vllm_features.FEATURE_SPACE)):
        case = data.draw(strategy)
        assert set(features_of(feats, case)) <= set(space)


def test_vllm_lora_features_see_no_lora_after_lora_and_a_replay_wider_than_its_key():
    ops = ({"op": "step", "slots": [0, 1], "pad": 1}, {"op": "step", "slots": [-1, -1], "pad": 0},
           {"op": "capture", "size": 4, "key": 1}, {"op": "replay", "slots": [0, 1]})
    case = Case("vllm_lora", {"max_loras": 2, "dtype": "float16", "entry": "public"}, ops)
    f = set(vllm_features.features(case))
    assert {"step=padded", "step=no-lora-after-lora", "capture=lora-key", "replay=more-slots-than-key"} <= f
    assert f <= set(vllm_features.FEATURE_SPACE)


def _result_with_coverage(declared=("op=a", "op=b", "op=never")):
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.settings import Settings
    r = CampaignResult("counted", Settings(), 0, ())
    r.coverage = Coverage(declared, steering=True)
    for fs in (("op=a", "op=b"), ("op=a",), ("op=a", "op=extra")):
        r.coverage.add(fs)
    return r


def test_the_html_report_shows_counts_combinations_and_highlights_features_never_reached():
    from fuzzrunner.report import html_text
    page = html_text(_result_with_coverage())
    cov = page[page.index("<h3>Coverage</h3>"):]
    assert "3 valid cases run (replayed and generated), 3 features reached; steered towards rare features" in cov
    assert '<b>1 declared feature never reached:</b> <code>op=never</code>' in cov
    assert '<tr class=never><td class="mono">op=never</td><td class="num">0</td>' in cov
    assert '<td class="mono">op=a</td><td class="num">3</td><td class="num">100.0%</td>' in cov
    assert 'title="op=a &amp; op=b: 1 case(s)"' in cov and 'title="op=b &amp; op=extra: 0 case(s)"' in cov
    assert '<th class="v never">op=never</th>' in cov
    clean = html_text(_result_with_coverage(declared=("op=a",)))
    assert "All 1 declared features reached." in clean and "cov-never\"" not in clean


def test_the_cli_summary_says_how_many_declared_features_were_never_reached_and_steer_is_a_flag():
    import io

    from fuzzrunner.cli import parser, render
    out = io.StringIO()
    render._summary(_result_with_coverage(), out)
    assert ("coverage: 3 feature(s) reached over 3 valid case(s) (replayed and generated); 1 declared feature(s) "
            "never reached: op=never") in out.getvalue()
    parse = parser._parser().parse_args
    assert parser._settings(parse(["fuzz", "--target", "t", "--steer", "--device", "cpu"])).steer is True
    assert parser._settings(parse(["fuzz", "--target", "t", "--no-steer", "--profile", "dev"])).steer is False
    assert parser._settings(parse(["nightly", "--steer", "--device", "cpu"])).steer is True


def test_shards_coverage_adds_up_in_the_merged_campaign():
    from fuzzrunner.engine.result import CampaignResult
    from fuzzrunner.engine.sharding import Merger
    from fuzzrunner.settings import Settings
    merged = CampaignResult("counted", Settings(), 0, ())
    merger = Merger(2, None, merged)
    for _ in range(2):
        merger.done(_result_with_coverage())
    assert merged.coverage.cases == 6 and merged.coverage.features["op=a"] == 6
    assert merged.coverage.pairs[("op=a", "op=b")] == 2 and merged.coverage.never_reached() == ["op=never"]
