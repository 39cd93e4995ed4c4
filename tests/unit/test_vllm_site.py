"""Where the vLLM under test comes from (targets/vllm_lora/site.py) and vLLM's own import-time decisions that would
make it test nothing (api.py): no vLLM needed."""

from __future__ import annotations

import importlib.metadata
import sys
import types

import pytest

from fuzzrunner.errors import TargetUnavailable
from targets.vllm_lora import api, site, vllm_available


def _site(tmp_path, *, dist_info: str | None = None, version: str | None = "0.24.0"):
    (tmp_path / "vllm").mkdir()
    if version:
        (tmp_path / "vllm" / "_version.py").write_text(f"__version__ = version = '{version}'\n")
    if dist_info:
        (tmp_path / dist_info).mkdir(parents=True)
    return tmp_path


# vLLM 0.24 through a site copy that held vllm/ alone (no dist-info): vLLM's Triton check calls
# importlib.metadata.version("vllm"), which raised, and it switched Triton off in silence; the punica wrapper then
# never imported LoRAKernelMeta (NameError at punica_gpu.py:57) and the ops ran as plain Python.
def test_a_site_without_vllms_dist_info_is_refused_naming_the_release_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("FUZZRUNNER_VLLM_SITE", str(_site(tmp_path)))
    ok, why = vllm_available()
    assert not ok and "\n" not in why, why
    assert f"FUZZRUNNER_VLLM_SITE={str(tmp_path)!r} holds vllm/ but no vllm-*.dist-info" in why
    assert f"cp -al .cache/vllm/0.24.0/site/vllm-0.24.0.dist-info {tmp_path}/" in why


@pytest.mark.parametrize("where", ["vllm-0.24.0.dist-info", "deps/vllm-0.24.0.dist-info"])
def test_a_site_with_the_dist_info_in_it_or_its_deps_is_taken(tmp_path, monkeypatch, where):
    monkeypatch.setenv("FUZZRUNNER_VLLM_SITE", str(_site(tmp_path, dist_info=where)))
    assert site.explicit_site_problem() is None
    assert vllm_available()[0]


def test_a_site_without_vllm_is_refused_not_replaced_by_an_installed_one(tmp_path, monkeypatch):
    monkeypatch.setenv("FUZZRUNNER_VLLM_SITE", str(tmp_path))
    ok, why = vllm_available()
    assert not ok and "holds no vllm/ package" in why and "\n" not in why


def test_without_the_variable_nothing_is_asked_of_a_site(monkeypatch):
    monkeypatch.delenv("FUZZRUNNER_VLLM_SITE", raising=False)
    assert site.explicit_site_problem() is None


def _no_vllm_metadata(name):
    raise importlib.metadata.PackageNotFoundError(name)


@pytest.mark.parametrize("has_metadata, said", [
    (False, "no vllm-*.dist-info is on sys.path"),
    (True, "its Triton driver check failed"),
])
def test_vllm_switching_its_triton_off_is_refused_saying_why(monkeypatch, has_metadata, said):
    """The class: any reason vLLM's import decides HAS_TRITON=False (no metadata, no driver) leaves the target
    fuzzing no kernel; it is refused in one line, never run."""
    monkeypatch.setitem(sys.modules, "vllm.triton_utils", types.SimpleNamespace(HAS_TRITON=False))
    if not has_metadata:
        monkeypatch.setattr(importlib.metadata, "version", _no_vllm_metadata)
    else:
        monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.24.0")
    with pytest.raises(TargetUnavailable) as e:
        api._check_triton_on("0.24.0")
    msg = str(e.value)
    assert "\n" not in msg and "vLLM 0.24.0 switched its Triton off at import" in msg and said in msg, msg


def test_vllm_with_triton_on_passes(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm.triton_utils", types.SimpleNamespace(HAS_TRITON=True))
    api._check_triton_on("0.24.0")
