"""What the ``sglang_engine`` target changes on a GPU (targets/sglang_engine/boot.py ``fused_ops_on_torch``, runner.py
``compared_as``), found by the first GPU run of the target (2026-12-07, H100): every step crashed building SGLang's
JIT ``clamp_position``, and fault-free float32 logits were off by up to 0.0053 (TF32) against a 1e-4 tolerance."""

import sys
import types
from importlib import import_module
from pathlib import Path

import pytest
import torch

boot = import_module("targets.sglang_engine.boot")
runner = import_module("targets.sglang_engine.runner")
TREE = Path(__file__).resolve().parents[2] / ".cache" / "sglang" / "0.5.23" / "site" / "sglang"


@pytest.mark.parametrize("dtype, device, env, want", [
    (torch.float32, "cpu", None, torch.float32),      # the interpreter: IEEE float32
    (torch.float32, "cuda", None, torch.float16),     # tl.dot's default on a GPU: TF32, float16's mantissa
    (torch.float32, "cuda", "ieee", torch.float32),   # TRITON_F32_DEFAULT=ieee: IEEE again
    (torch.float32, "cuda", "IEEE", torch.float32),
    (torch.float32, "cuda", "tf32x3", torch.float16),
    (torch.float16, "cuda", None, torch.float16),     # half precision keeps its own
    (torch.bfloat16, "cpu", None, torch.bfloat16),
])
def test_float32_outputs_are_held_to_the_precision_the_kernels_compute_in(monkeypatch, dtype, device, env, want):
    if env is None:
        monkeypatch.delenv("TRITON_F32_DEFAULT", raising=False)
    else:
        monkeypatch.setenv("TRITON_F32_DEFAULT", env)
    assert runner.compared_as(dtype, device) is want


def _sglang_kernels(monkeypatch):
    """Stand-ins for the two SGLang modules the switch uses (their real names: checked against the tree below)."""
    chosen = []
    spec = types.ModuleType("sglang.kernels.spec")
    spec.KernelBackend = types.SimpleNamespace(TORCH="torch")
    fused = types.ModuleType("sglang.kernels.fused_op")
    fused.set_fused_op_backend = chosen.append
    for name, m in (("sglang", types.ModuleType("sglang")), ("sglang.kernels", types.ModuleType("sglang.kernels")),
                    ("sglang.kernels.spec", spec), ("sglang.kernels.fused_op", fused)):
        monkeypatch.setitem(sys.modules, name, m)
    return chosen


def test_on_a_gpu_sglangs_fused_ops_take_their_torch_backend_unless_the_user_chose(monkeypatch):
    chosen = _sglang_kernels(monkeypatch)
    monkeypatch.delenv(boot.FORCE_FUSED_OP_ENV, raising=False)
    assert boot.fused_ops_on_torch() and chosen == ["torch"]
    monkeypatch.setenv(boot.FORCE_FUSED_OP_ENV, "jit")  # the user's choice stands
    assert not boot.fused_ops_on_torch() and chosen == ["torch"]


def test_a_release_without_fused_ops_is_left_as_it_is(monkeypatch):
    monkeypatch.delenv(boot.FORCE_FUSED_OP_ENV, raising=False)
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sglang", None)
    assert boot.fused_ops_on_torch() is False


@pytest.mark.skipif(not TREE.is_dir(), reason="SGLang 0.5.23's tree is not set up (scripts/sglang_setup.sh 0.5.23)")
def test_the_switch_is_the_one_the_release_ships_and_no_lora_op_is_a_fused_op():
    fused = (TREE / "kernels" / "fused_op.py").read_text()
    assert "def set_fused_op_backend(" in fused and boot.FORCE_FUSED_OP_ENV in fused
    assert 'TORCH = "torch"' in (TREE / "kernels" / "spec.py").read_text()
    lora = [*(TREE / "srt" / "lora").rglob("*.py"), *(TREE / "kernels" / "ops" / "lora").rglob("*.py")]
    assert lora and not [f for f in lora if "BaseFusedOp" in f.read_text() or "register_fused_op" in f.read_text()]
