"""torch.compile'd code under the shadow oracle: the compiled graph runs with its ops checked, and
neither the oracle's stance nor its graphs outlive the case."""

import warnings

import torch
from torch._dynamo import eval_frame

from fuzzrunner.oracles.shadow import ShadowOracle, compiled


def _run(program):
    o = ShadowOracle(check_triton=False)
    o.start()
    o.begin_op(0, {"op": "step"})
    try:
        out = program()
    finally:
        vs = o.finish()
    return vs, out


def _counting_backend(calls):
    def backend(gm, example_inputs):
        calls.append(gm)
        return lambda *args: [r + 100 for r in gm.forward(*args)]  # marks results made by this backend
    return backend


def test_the_compiled_branch_runs_checked_and_the_users_backend_comes_back():
    calls: list = []

    @torch.compile(backend=_counting_backend(calls), fullgraph=True)
    def f(buf):
        if torch.compiler.is_compiling():
            return buf[:3].sum()
        return buf[:2].sum()

    buf = torch.zeros(4)
    assert float(f(buf)) == 100.0 and len(calls) == 1
    prior = eval_frame._stance
    vs, out = _run(lambda: f(torch.empty(4).index_fill_(0, torch.tensor([0, 1]), 1.0)))
    assert float(out) == 2.0  # the eager backend's graph (not the user's +100), the unwritten byte read as 0
    assert [v.kind for v in vs] == ["uninitialized-read"]
    assert vs[0].location.startswith("test_shadow_compiled.py:")  # the user's line, not generated code
    assert eval_frame._stance is prior and not compiled.visible()
    assert float(f(buf)) == 100.0 and len(calls) == 1  # the user's graph again, not recompiled


def test_a_users_own_stance_is_left_alone(monkeypatch):
    monkeypatch.setattr(compiled, "_warned", False)
    with torch.compiler.set_stance("force_eager"):
        stance = eval_frame._stance
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            _run(lambda: torch.zeros(2).sum())
        assert eval_frame._stance is stance
    assert any("runs eagerly under the shadow oracle" in str(w.message) for w in seen)


def test_the_walk_for_live_storages_passes_over_fake_tensors():
    import numpy as np
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fuzzrunner.oracles.shadow.triton_hook import live_storages
    with FakeTensorMode():
        fake = torch.empty(4)  # what Dynamo's tracing leaves behind: a tensor with no real memory
    real = torch.zeros(4)
    found = live_storages(np.array([real.data_ptr()], dtype=np.uint64))
    assert fake is not None and any(st.data_ptr() == real.untyped_storage().data_ptr() for st, _ in found)
