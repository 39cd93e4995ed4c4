"""The hand-written repros under docs/findings/: exit 1 "bug reproduced", 0 "not reproduced", 2 "could not run"
(README, "Exit codes"; as fuzzrunner's own repro scripts). An engine that does not import or crashes is 2: before,
a traceback's exit 1 read as "bug reproduced". The SGLang ones run on their own (SG1 ran only after
``load_engine("cpu")`` in the same process), G1 has one (it had only a replay of its case).

In CI (``-m "not slow"``): every script's exit 2 on a crashing engine (cheap: the engine fails at import), and one
SGLang repro reproducing on the set-up tree (G1's); the other reproductions and every patched run are ``slow``."""

import os
import shutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "docs" / "findings"
SCRIPTS = sorted(p.name for p in FINDINGS.glob("*.py") if p.name != "sglang_site.py")
CRASH = 'raise RuntimeError("the engine crashed at import")\n'


def _run(script: str, *args, env=None, timeout=600):
    return subprocess.run([sys.executable, str(FINDINGS / script), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env=dict(os.environ, **(env or {})))


def test_every_repro_here_is_covered():
    assert set(SCRIPTS) == {"engine_v1_specialize_active_lora.py", "repro_e1_e2_dummy_adapters.py",
                            "repro_sg1_drainer_ignores_pinned_slots.py", "repro_sg2_drain_budget_recomputed.py",
                            "repro_sglang_g1_torch_native_lm_head.py", "repro_sglang_g2_torch_native_graph_rank.py",
                            "repro_sglang_g3_partial_embedding_unzeroed.py",
                            "repro_v1_specialize_active_lora.py", "validate_sg1_patch.py", "validate_sg2_patch.py"}, "a new repro: add it to the crash test below"


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_engine_that_crashes_is_could_not_run_exit_2_never_reproduced(tmp_path, script):
    for pkg in ("vllm", "sglang"):  # an engine whose import crashes, shadowing any installed one
        (tmp_path / "shadow" / pkg).mkdir(parents=True)
        (tmp_path / "shadow" / pkg / "__init__.py").write_text(CRASH)
    site = tmp_path / "site"  # a tree whose SGLang modules crash when loaded
    for f in ("sglang/__init__.py", "sglang/srt/server_args.py", "sglang/srt/lora/torch_ops/lora_ops.py",
              "sglang/srt/lora/torch_ops/graph_lora_ops.py"):
        (site / f).parent.mkdir(parents=True, exist_ok=True)
        (site / f).write_text(CRASH)
    args = [str(site)] if "sg1_drainer" in script or "sg2_drain" in script or "sglang_g" in script else \
        ["--device", "cpu"] if script == "repro_v1_specialize_active_lora.py" else []
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), str(ROOT)]), "FUZZRUNNER_SGLANG_SITE": str(site),
           "FUZZRUNNER_VLLM_SITE": str(tmp_path / "shadow")}
    r = _run(script, *args, env=env, timeout=300)
    assert r.returncode == 2, (script, r.returncode, r.stdout[-2000:], r.stderr[-2000:])


def _sglang_tree():
    ok, _ = import_module("fuzzrunner.targets.sglang_engine").engine_available()
    if not ok:
        pytest.skip("no SGLang tree with its engine's imports (scripts/sglang_setup.sh)")
    return import_module("fuzzrunner.targets.sglang_lora.site").site_dirs(
        import_module("fuzzrunner.targets.sglang_lora.site").wanted_version())[0]


# one standalone SGLang repro reproducing on the set-up tree stays in CI (G1's: they all import SGLang through
# sglang_site.py, 11-18 s each); SG1's, SG2's and G3's are slow, as every patched run (a tree copied and patched)
@pytest.mark.slow
def test_sg1_repro_runs_on_its_own_and_reproduces_on_the_set_up_release():
    _sglang_tree()
    r = _run("repro_sg1_drainer_ignores_pinned_slots.py")
    assert r.returncode == 1 and "was never admitted" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


@pytest.mark.slow
def test_sg2_repro_runs_on_its_own_and_reproduces_on_the_set_up_release():
    """SG2 (docs/findings/sg2-drain-budget-recomputed.md): 12-token requests keep the drained adapter admitting (1);
    11-token ones let the drain end (0)."""
    _sglang_tree()
    r = _run("repro_sg2_drain_budget_recomputed.py")
    assert r.returncode == 1 and "B not admitted" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


@pytest.mark.slow
def test_sg2_repro_passes_with_its_patch_and_below_the_tolerance():
    _sglang_tree()
    for args in (["--patched"], ["--new", "11"]):
        r = _run("repro_sg2_drain_budget_recomputed.py", *args)
        assert r.returncode == 0 and "B admitted" in r.stdout, (args, r.stdout[-2000:] + r.stderr[-3000:])


@pytest.mark.slow
def test_sg1_repro_passes_with_its_patch():
    _sglang_tree()
    r = _run("repro_sg1_drainer_ignores_pinned_slots.py", "--patched")
    assert r.returncode == 0 and "B admitted" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


def _patched_copy(tmp_path, patch: str) -> str:
    """A copy of the set-up SGLang tree with ``patch`` (of this folder) applied: the site folder to give a repro."""
    tree = _sglang_tree()
    shutil.copytree(tree / "sglang", tmp_path / "site" / "sglang")
    (tmp_path / "deps").symlink_to(tree.parent / "deps")
    patched = subprocess.run(["patch", "-s", "-p2", "-d", str(tmp_path / "site"), "-i", str(FINDINGS / patch)],
                             capture_output=True, text=True)
    if patched.returncode != 0:
        pytest.skip(f"the patch (against 0.5.23) does not apply here: {patched.stdout[-300:]}")
    return str(tmp_path / "site")


def test_g1_repro_reproduces_on_the_set_up_release():
    tree = _sglang_tree()
    r = _run("repro_sglang_g1_torch_native_lm_head.py", str(tree))
    assert r.returncode == 1 and "the base model's row got a0's delta" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


@pytest.mark.slow
def test_g1_repro_passes_on_a_copy_with_the_patch(tmp_path):
    r = _run("repro_sglang_g1_torch_native_lm_head.py", _patched_copy(tmp_path, "sglang_g1_torch_native_lm_head.patch"))
    assert r.returncode == 0 and "its own request's delta" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


@pytest.mark.slow
def test_g3_repro_reproduces_on_the_set_up_release():
    tree = _sglang_tree()
    r = _run("repro_sglang_g3_partial_embedding_unzeroed.py", str(tree))
    assert r.returncode == 1 and "G3 present" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


@pytest.mark.slow
def test_g3_repro_passes_on_a_copy_with_the_patch(tmp_path):
    r = _run("repro_sglang_g3_partial_embedding_unzeroed.py",
             _patched_copy(tmp_path, "sglang_g3_partial_embedding_unzeroed.patch"))
    assert r.returncode == 0 and "only the new adapter's weights" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
