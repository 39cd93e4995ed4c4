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


def _fake_vllm(monkeypatch, manager: type, dp_funcs: dict) -> None:
    """Fake vLLM modules in the shape one release's V2-runner graph pieces have (what ``find`` imports)."""
    import sys
    from types import ModuleType
    mods = {}
    for name in ("vllm", "vllm.config", "vllm.v1", "vllm.v1.worker", "vllm.v1.worker.gpu",
                 "vllm.v1.worker.gpu.cudagraph_utils", "vllm.v1.worker.gpu.dp_utils", "vllm.v1.worker.gpu.lora_utils",
                 "vllm.v1.worker.utils"):
        mods[name] = ModuleType(name)
        monkeypatch.setitem(sys.modules, name, mods[name])
    mods["vllm.config"].CUDAGraphMode = object
    cg = mods["vllm.v1.worker.gpu.cudagraph_utils"]
    cg.BatchExecutionDescriptor, cg.CudaGraphManager = tuple, manager
    cg.ModelCudaGraphManager = type("ModelCudaGraphManager", (manager,), {})
    vars(mods["vllm.v1.worker.gpu.dp_utils"]).update(dp_funcs)
    for parent, child in (("vllm.v1.worker.gpu", "cudagraph_utils"), ("vllm.v1.worker.gpu", "dp_utils"),
                          ("vllm.v1.worker.gpu", "lora_utils")):
        setattr(mods[parent], child, mods[f"{parent}.{child}"])


def test_0_18_s_graphs_dispatched_by_the_manager_itself_are_driven(monkeypatch):
    """0.18 - 0.19: ``BatchExecutionDescriptor`` graphs, dispatched by ``CudaGraphManager.dispatch(num_reqs,
    num_tokens, uniform_token_count)`` (``execute_model`` syncs across data-parallel ranks only when there are several;
    ``dispatch_cg_and_sync_dp`` came in 0.20). ``find`` knew only the 0.20+ function: 0.18 and 0.19 got no V2 graph
    cases ("no V2 runner graph manager of a known shape"), W1 unchecked there."""
    from targets.vllm_engine import v2_graphs

    class Manager:
        def dispatch(self, num_reqs, num_tokens, uniform_token_count):
            return ("desc", num_reqs, num_tokens, uniform_token_count)
    _fake_vllm(monkeypatch, Manager, {"sync_cudagraph_and_dp_padding": lambda *a: None})
    g = v2_graphs.find()
    assert g is not None and g.shape == "descriptors", v2_graphs.MISSING
    assert g.dispatch(Manager(), 2, 5, None, 1, 0) == (("desc", 2, 5, None), None)
    with pytest.raises(ValueError, match="dp_size 2"):
        g.dispatch(Manager(), 2, 5, None, 2, 0)


def test_0_15_s_size_keyed_graph_manager_is_refused_saying_why(monkeypatch):
    """0.15 - 0.16: ``CudaGraphManager.get_cudagraph_size`` / ``run`` (no descriptors, no runtime mode): a shape the
    target does not drive; ``find`` says so and the target runs without V2 graph cases."""
    from targets.vllm_engine import v2_graphs

    class Manager:
        def get_cudagraph_size(self, *a):
            return None
    _fake_vllm(monkeypatch, Manager, {})
    import sys
    monkeypatch.delattr(sys.modules["vllm.v1.worker.gpu.cudagraph_utils"], "BatchExecutionDescriptor")
    assert v2_graphs.find() is None and "no V2 runner graph manager of a known shape" in v2_graphs.MISSING[0]
