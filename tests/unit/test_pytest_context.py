"""The pytest plugin resolves each run's context once (fuzzrunner/pytest_runtime.py): the GPU-skip probe's context
is the one the campaign and the corpus replays get, never a second resolution that could decide otherwise."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from fuzzrunner import context as context_module
from fuzzrunner import pytest_runtime


class _Stop(Exception):
    pass


@pytest.fixture()
def resolutions(monkeypatch):
    seen = []
    real = context_module.Context.resolve.__func__

    def counted(cls, settings, **kw):
        seen.append(real(cls, settings, **kw))
        return seen[-1]
    monkeypatch.setattr(context_module.Context, "resolve", classmethod(counted))
    return seen


def _state(tmp_path, device=None, sanitizer=None):
    return SimpleNamespace(sanitizer=sanitizer, device=device, from_command_line=set(), profile="dev", corpus=None,
                           config=SimpleNamespace(rootpath=tmp_path), replayer=None,
                           target_spec=lambda target, item: target)


def test_a_fuzz_test_s_campaign_gets_the_context_its_gpu_probe_resolved(tmp_path, monkeypatch, resolutions):
    import fuzzrunner
    got = {}

    def fuzz(spec, **kwargs):
        got.update(kwargs)
        raise _Stop
    monkeypatch.setattr(fuzzrunner, "fuzz", fuzz)
    item = SimpleNamespace(name="test_x", path=Path(tmp_path / "test_x.py"), user_properties=[])
    marker = SimpleNamespace(args=("reference_runner",), kwargs={"max_examples": 3, "device": "cpu"})
    with pytest.raises(_Stop):
        pytest_runtime.run_marked_campaign(item, marker, _state(tmp_path))
    assert len(resolutions) == 1 and got["context"] is resolutions[0]
    assert got["settings"].device == "cpu" and got["settings"].max_examples == 3


def test_the_corpus_replayer_gets_the_one_resolved_context(tmp_path, monkeypatch, resolutions):
    from fuzzrunner.engine import replay
    made = {}
    monkeypatch.setattr(replay, "Replayer", lambda settings, **kw: made.update(kw, settings=settings) or "R")
    assert pytest_runtime._replayer(_state(tmp_path, device="cpu")) == "R"
    assert len(resolutions) == 1 and made["context"] is resolutions[0] and made["inherit_gpu"]


def test_where_the_context_cannot_be_had_the_test_skips_saying_why(tmp_path, monkeypatch):
    monkeypatch.setattr(context_module._env, "cuda_present", lambda: False)
    item = SimpleNamespace(name="test_x", path=Path(tmp_path / "test_x.py"), user_properties=[])
    marker = SimpleNamespace(args=("reference_runner",), kwargs={"sanitizer": "memcheck"})
    with pytest.raises(pytest.skip.Exception, match="compute-sanitizer --tool memcheck needs a CUDA GPU"):
        pytest_runtime.run_marked_campaign(item, marker, _state(tmp_path))
    with pytest.raises(pytest.skip.Exception, match="device 'cuda' needs a CUDA GPU"):
        pytest_runtime._replayer(_state(tmp_path, device="cuda"))
