"""A patched vLLM and a copied vLLM tree on real releases (docs/vllm.md, "Fuzzing a patched vLLM"): what the
release sweep of 0.22.0 and 0.24.0 met. Each test needs its release set up under .cache/vllm (scripts/vllm_setup.sh
VERSION) and skips without it; patched copies go to a cache of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ROOT / ".cache" / "vllm"
FINDINGS = ROOT / "docs" / "findings"


def _needs(version: str):
    return pytest.mark.skipif(not (RELEASES / version / "ok").exists(),
                              reason=f"vLLM {version} is not set up (scripts/vllm_setup.sh {version})")


def _python(code: str, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    cache = tmp_path / "vllm-cache"  # the release trees linked in, the patched copies made here
    cache.mkdir(exist_ok=True)
    for tree in RELEASES.iterdir():
        if (tree / "ok").exists() and not (cache / tree.name).exists():
            (cache / tree.name).symlink_to(tree.resolve())
    base = {k: v for k, v in os.environ.items() if not k.startswith("FUZZRUNNER_VLLM")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**base, "PYTHONPATH": str(ROOT), "FUZZRUNNER_DEVICE": "cpu",
                               "FUZZRUNNER_VLLM_CACHE": str(cache), **env})


_LOAD_BOTH = """
import json
from fuzzrunner.errors import TargetUnavailable
from fuzzrunner.target import load_target
out = {}
for name in ("vllm_lora", "vllm_engine"):  # vllm_lora first: its check sees the files imported so far
    try:
        out[name] = load_target(name).code_under_test
    except TargetUnavailable as e:
        out[name] = str(e)
print(json.dumps(out))
"""


@_needs("0.22.0")
def test_a_patch_of_the_adapter_manager_is_taken_by_vllm_engine_and_refused_by_vllm_lora_naming_it(tmp_path):
    """0.22.0, #47725 back-ported (model_manager.py): the vllm_engine replay was refused, "which the vllm_lora target
    does not run": vllm_lora's guard judged a file only vllm_engine imports. Each target now judges its own files."""
    patch = FINDINGS / "mapping_cache_slot_layout_47725_on_0.22.patch"
    r = _python(_LOAD_BOTH, tmp_path, FUZZRUNNER_VLLM_VERSION="0.22.0", FUZZRUNNER_VLLM_PATCH=str(patch))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert isinstance(got["vllm_engine"], dict), got
    assert got["vllm_engine"]["patch"] == str(patch) and got["vllm_engine"]["release"] == "0.22.0"
    refusal = got["vllm_lora"]
    assert isinstance(refusal, str) and "\n" not in refusal, refusal
    assert "changes vllm/lora/model_manager.py, which the vllm_lora target does not run" in refusal
    assert "Fuzz a target that runs it (vllm_engine" in refusal


_LOAD_OPS = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from targets.vllm_lora import api, site
site.prepare_environment("cpu")
from fuzzrunner.errors import TargetUnavailable
try:
    a = api.load("cpu")
    print("LOADED", a.found)
except TargetUnavailable as e:
    print("REFUSED", e)
"""


def _load_ops(copy: Path, deps: Path) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FUZZRUNNER_VLLM")}
    r = subprocess.run([sys.executable, "-c", _LOAD_OPS, str(copy), str(deps)], capture_output=True, text=True,
                       timeout=600, cwd=ROOT, env={**base, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"})
    assert r.returncode == 0, r.stderr
    return r.stdout + r.stderr[-2000:]


@_needs("0.24.0")
def test_vllm_0_24_from_a_copy_without_its_dist_info_is_refused_not_run_without_triton(tmp_path):
    """0.24.0 through a copy of vllm/ alone: vLLM's Triton check read its own version from the (absent) dist-info,
    switched Triton off, and the target ran with the punica wrapper's LoRAKernelMeta undefined (NameError). The
    site check refuses such a copy before import (tests/unit/test_vllm_site.py); this is the guard behind it, for
    any reason vLLM switches Triton off."""
    release = RELEASES / "0.24.0" / "site"
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "vllm").symlink_to((release / "vllm").resolve(), target_is_directory=True)
    deps = (RELEASES / "0.24.0" / "deps").resolve()
    out = _load_ops(copy, deps)
    assert "REFUSED vLLM 0.24.0 switched its Triton off at import" in out, out
    assert "no vllm-*.dist-info is on sys.path" in out
    (copy / "vllm-0.24.0.dist-info").symlink_to((release / "vllm-0.24.0.dist-info").resolve(),
                                                target_is_directory=True)
    out = _load_ops(copy, deps)
    assert "LOADED" in out and "PunicaWrapperGPU.update_metadata" in out, out
