"""Triton's interpreter on every Triton the project accepts, and the tool's limits kept apart from bugs.

The GPU image has Triton 3.6.0 with numpy 2.5: there the interpreter could not run a kernel with a
runtime-bounded ``range()`` loop (vLLM's ``mm_k``), and that failure was reported as a crash of
the user's correct runner. ``scripts/test.sh`` runs this file on Triton 3.6 too (the floor run).
"""

import os
import textwrap
import traceback
from contextlib import contextmanager

import pytest
import torch
import triton
import triton.language as tl

from fuzzrunner import _env, triton_compat
from fuzzrunner.execute import crash_violation

pytestmark = pytest.mark.skipif(not _env.interpreted(), reason="the interpreter runs on the CPU only")


@contextmanager
def _unrepaired(repair: str, owner: str, attr: str, skip_why: str):
    """The interpreter's ``owner.attr`` (``owner`` "" for the interpreter module, else a class of it) as Triton
    ships it, for the block, where ``repair`` was applied; the test is skipped where it was not."""
    from triton.runtime import interpreter
    triton_compat.apply()
    if repair not in triton_compat.applied():
        pytest.skip(f"Triton {triton.__version__}'s interpreter {skip_why}")
    target = getattr(interpreter, owner) if owner else interpreter
    repaired = getattr(target, attr)
    setattr(target, attr, repaired.__wrapped__)
    try:
        yield
    finally:
        setattr(target, attr, repaired)


@triton.jit
def _sum_blocks(x_ptr, y_ptr, n_ptr, BLOCK: tl.constexpr):
    K = tl.load(n_ptr)  # a bound known only when the kernel runs, as vLLM's mm_k has
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, tl.cdiv(K, BLOCK)):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < K, other=0.0)
    tl.store(y_ptr + tl.arange(0, BLOCK), acc)


def _launch() -> torch.Tensor:
    x, y = torch.arange(100, dtype=torch.float32), torch.zeros(16)
    _sum_blocks[(1,)](x, y, torch.tensor([100], dtype=torch.int32), BLOCK=16)
    return y


def test_a_runtime_bounded_range_loop_runs_in_the_interpreter():
    triton_compat.apply()
    y = _launch()
    expected = torch.stack([torch.arange(100, dtype=torch.float32)[j::16].sum() for j in range(16)])
    assert torch.equal(y, expected)


def test_without_the_repair_triton_3_6_fails_as_a_tool_limitation_never_a_crash():
    with _unrepaired("index-of-1-element-block", "", "_patch_lang_tensor", "needs no repair here"):
        with pytest.raises(Exception) as raised:
            _launch()
    v = crash_violation(raised.value, 0)
    assert v.kind == "tool-limitation" and v.tool == "fuzzrunner"
    assert f"Triton {triton.__version__}" in v.message and "test_triton_compat.py:" in v.location
    assert v.kernel == "_sum_blocks"


def _raise_through(tmp_path, inner: str, exc: str):
    """An exception raised in a file at ``inner`` (a path under tmp_path), wrapped as Triton's
    interpreter wraps what its machinery raises."""
    path = tmp_path / inner
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"def machinery():\n    raise {exc}\n")
    kernel = tmp_path / "my_kernel.py"
    kernel.write_text(textwrap.dedent(f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("m", {str(path)!r})
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        class InterpreterError(Exception):
            pass
        def my_kernel():
            m.machinery()
        def launch():
            try:
                my_kernel()
            except Exception as e:
                raise InterpreterError(repr(e)) from e
    """))
    ns: dict = {}
    exec(compile(kernel.read_text(), str(kernel), "exec"), ns)
    try:
        ns["launch"]()
    except Exception as e:
        return e
    raise AssertionError("nothing raised")


def test_what_the_interpreter_machinery_raises_is_a_limitation_what_the_kernel_raises_is_a_crash(tmp_path):
    limit = crash_violation(_raise_through(tmp_path, os.path.join("triton", "runtime", "interpreter.py"),
                                           "TypeError('only 0-dimensional arrays')"), 2)
    assert limit.kind == "tool-limitation" and limit.kernel == "my_kernel" and "my_kernel.py:" in limit.location
    assert limit.details["op_index"] == 2 and "numpy" in limit.details
    # an assert of the kernel (tl.device_assert) is its semantics, wherever the interpreter raises it
    assert crash_violation(_raise_through(tmp_path, os.path.join("triton", "runtime", "interpreter.py"),
                                          "AssertionError('device assert')"), 0).kind == "crash"
    # the kernel's own code, and Triton's language checks, are the kernel's
    assert crash_violation(_raise_through(tmp_path, "elsewhere.py", "TypeError('x')"), 0).kind == "crash"
    assert crash_violation(_raise_through(tmp_path, os.path.join("triton", "language", "semantic.py"),
                                          "ValueError('incompatible shapes')"), 0).kind == "crash"


def test_an_op_error_raised_through_an_oracle_hook_stays_the_runners_crash():
    from fuzzrunner.oracles.shadow import ShadowOracle
    oracle = ShadowOracle()
    oracle.start()
    try:
        try:
            torch.ones(3) + torch.ones(4)  # the runner's bug: raised by the op the hook forwards to
        except RuntimeError as e:
            exc = e
    finally:
        oracle.finish()
    assert any("oracles" in f.filename for f in traceback.extract_tb(exc.__traceback__))
    assert crash_violation(exc, 0).kind == "crash"


def test_doctor_says_what_this_interpreter_cannot_run():
    from fuzzrunner.doctor import interpreter_lines
    lines = interpreter_lines()
    assert lines[0].startswith(f"interpreter  Triton {triton.__version__} + numpy ")
    assert "runs every probed feature" in lines[0], lines  # with the repair where Triton 3.6 needs it


@pytest.mark.parametrize("mode", ["device", "cpu"])
def test_a_shadow_oracle_started_on_its_own_repairs_the_interpreter_first(monkeypatch, mode):
    """An oracle started outside ``run_case`` (a user's harness, the device mode's own check kernels) on an
    installation that needs the repair: its start applies it, so kernels run (the device mode's torch-side
    checks failed on the GPU image's Triton 3.6 with numpy 2.5 before)."""
    from triton.runtime import interpreter

    from fuzzrunner.oracles.shadow import ShadowOracle
    from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
    triton_compat.apply()
    if "index-of-1-element-block" not in triton_compat.applied():
        pytest.skip(f"Triton {triton.__version__}'s interpreter needs no repair here")
    monkeypatch.setattr(interpreter, "_patch_lang_tensor", interpreter._patch_lang_tensor.__wrapped__)
    monkeypatch.setattr(triton_compat, "_checked", False)
    monkeypatch.setattr(triton_compat, "_applied", [])
    oracle = GpuShadowOracle("cpu") if mode == "device" else ShadowOracle()
    oracle.start()
    try:
        y = _launch()
    finally:
        vs = oracle.finish()
    assert torch.equal(y, torch.stack([torch.arange(100, dtype=torch.float32)[j::16].sum() for j in range(16)]))
    assert [v.kind for v in vs] == []


@triton.jit
def _rank_masked_sum(x_ptr, r_ptr, y_ptr, RANK: tl.constexpr, BLOCK: tl.constexpr):
    rank = tl.load(r_ptr).to(tl.int32)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for k_begin in range(0, RANK, BLOCK):
        k_offsets = k_begin + tl.arange(0, BLOCK).to(tl.int64)
        # SGLang 0.5.23's _per_row_lora_b_kernel masks whole rank blocks so: a block & a scalar comparison
        acc += tl.load(x_ptr + k_offsets, mask=(k_offsets < RANK) & (k_begin < rank), other=0.0)
    tl.store(y_ptr + tl.arange(0, BLOCK), acc)


def _launch_rank_masked(rank: int) -> torch.Tensor:
    y = torch.zeros(4)
    _rank_masked_sum[(1,)](torch.arange(8, dtype=torch.float32), torch.tensor([rank], dtype=torch.int32), y,
                           RANK=8, BLOCK=4)
    return y


def test_a_mask_of_a_block_and_a_scalar_comparison_runs_in_the_interpreter():
    """Triton 3.9's interpreter splats the scalar comparison into int32 lanes and the masked load refused the mask
    ("mask has unsupported dtype"); compiled, the mask is i1. With the repair the kernel runs, block by block."""
    triton_compat.apply()
    assert torch.equal(_launch_rank_masked(3), torch.tensor([0.0, 1.0, 2.0, 3.0]))  # only the first block is live
    assert torch.equal(_launch_rank_masked(8), torch.tensor([4.0, 6.0, 8.0, 10.0]))


def test_without_the_splat_repair_the_mask_fails_as_a_tool_limitation():
    raised = None
    with _unrepaired("splat-of-a-truth-value", "InterpreterBuilder", "create_splat",
                     "splats truth values as truth values"):
        try:
            _launch_rank_masked(3)
        except Exception as e:  # noqa: BLE001 - the interpreter's refusal is the subject
            raised = e
    if raised is None:  # Triton 3.6 (the floor, the GPU image's) splats to int32 too, but its load takes that mask
        pytest.skip(f"Triton {triton.__version__}'s interpreter takes the int32 mask: the repair is harmless here")
    assert crash_violation(raised, 0).kind == "tool-limitation"


@triton.jit
def _bf16_dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r, c = tl.arange(0, N)[:, None], tl.arange(0, N)[None, :]
    a, b = tl.load(a_ptr + r * N + c), tl.load(b_ptr + r * N + c)
    # vLLM 0.21's _fused_moe_lora_kernel casts its float16 operands so before its dot
    tl.store(c_ptr + r * N + c, tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16)))


def _launch_bf16_dot() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(16, 16, generator=g).half() for _ in range(2))
    c = torch.zeros(16, 16)
    _bf16_dot[(1,)](a, b, c, N=16)
    return c, a.bfloat16().float() @ b.bfloat16().float()  # compiled: bfloat16 products, float32 sums


def test_a_dot_of_bfloat16_blocks_multiplies_their_values():
    """Triton 3.9's interpreter multiplied bfloat16 blocks' uint16 bit patterns (errors ~1e10): vLLM 0.21's MoE LoRA
    kernel's rows came out inf / nan on the CPU. With the repair: the compiled dot's values."""
    triton_compat.apply()
    c, expected = _launch_bf16_dot()
    assert torch.allclose(c, expected, rtol=1e-5, atol=1e-5), (c - expected).abs().max()


def test_without_the_bf16_dot_repair_the_dot_is_wrong_where_it_was_applied():
    with _unrepaired("dot-of-bfloat16", "InterpreterBuilder", "create_dot", "multiplies bfloat16 values"):
        c, expected = _launch_bf16_dot()
    assert not torch.allclose(c, expected, rtol=1e-2, atol=1e-2)


def test_without_the_bf16_rounding_repair_the_downcast_truncates_where_it_was_applied():
    """Compiled, ``.to(tl.bfloat16)`` rounds to nearest even; Triton 3.9's interpreter truncated (the dot above then
    erred by ~0.1)."""
    triton_compat.apply()
    if "bfloat16-downcast-rounds-to-nearest" not in triton_compat.applied():
        pytest.skip(f"Triton {triton.__version__}'s interpreter rounds its bfloat16 downcasts")
    c, expected = _launch_bf16_dot()
    assert torch.allclose(c, expected, rtol=1e-5, atol=1e-5)
    with _unrepaired("bfloat16-downcast-rounds-to-nearest", "InterpreterBuilder", "cast_impl",
                     "rounds its bfloat16 downcasts"):
        c, expected = _launch_bf16_dot()
    assert not torch.allclose(c, expected, rtol=1e-5, atol=1e-5)
