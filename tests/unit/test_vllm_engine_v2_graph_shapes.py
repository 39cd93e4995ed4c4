"""``vllm_engine``'s V2 graph component where a release has no V2 runner graph manager, or one without LoRA capture
cases (targets/vllm_engine/v2_graphs.py, v2_graph_faults.py): the refusals and the reasons, without a vLLM."""

from types import SimpleNamespace

import pytest

from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidCase
from targets.vllm_engine import v2_graph_faults
from targets.vllm_engine.v2_graphs import V2GraphSession


def test_a_graph_case_on_a_release_without_a_v2_graph_manager_is_refused_with_the_reason():
    """vLLM 0.12 - 0.14 (no V2 runner LoraState: the target is refused there before any case) or a carried tree
    whose graph manager does not import: one line naming the release, the module and the fix."""
    case = Case("vllm_engine", {"cudagraph_mode": "FULL"}, (), ())
    with pytest.raises(InvalidCase) as e:
        V2GraphSession(case, None, {"v2_graphs": None, "api": SimpleNamespace(version="0.14.0")})
    msg = str(e.value)
    assert "'FULL'" in msg and "0.14.0" in msg and "cudagraph_mode 'NONE'" in msg and "\n" not in msg


@pytest.mark.parametrize("shape", ["descriptors", "sizes"])
def test_the_lora_dispatch_fault_is_unavailable_before_lora_capture_cases_saying_why(shape):
    """0.15 - 0.23 key their graphs on the batch's shape alone: graph_dispatch_ignores_lora would plant the release's
    own behaviour, so it is not offered there (the reason names #35536)."""
    why = v2_graph_faults.unavailable({"v2_graphs": SimpleNamespace(shape=shape)})
    assert set(why) == {"graph_dispatch_ignores_lora"} and "#35536" in why["graph_dispatch_ignores_lora"]
    assert v2_graph_faults.unavailable({"v2_graphs": SimpleNamespace(shape="lora_cases")}) == {}
    assert set(v2_graph_faults.unavailable({"v2_graphs": None})) == set(v2_graph_faults.FAULTS)
