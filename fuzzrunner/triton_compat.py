"""Version-gated repairs of Triton's interpreter, applied before a case runs on the CPU.

Triton 3.6's interpreter converts a block to a Python index with ``int(self.handle.data)``
(``triton/runtime/interpreter.py``, ``_patch_lang_tensor``). Its scalars are 1-element arrays,
and numpy >= 2.4 refuses ``int()`` of an array with ``ndim > 0`` ("only 0-dimensional arrays
can be converted to Python scalars"). So every kernel with a runtime-bounded ``range()`` loop
(vLLM's ``mm_k``: ``for k in range(tl.cdiv(K, BLOCK_K * SPLIT_K))``) fails in the interpreter
on the GPU image (Triton 3.6.0 + numpy 2.5). Triton 3.9 squeezes the array first; this does the
same, and only where the installed interpreter still has the old line and numpy refuses it.

Triton 3.9's interpreter splats a truth value of a scalar comparison (``k_begin < rank``, a handle whose data is
bool but whose type is its operands': int32) into a block of int32 (``create_splat`` takes the numpy dtype from
the handle's type), so ``(k_offsets < RANK) & (k_begin < rank)`` is an int32 block and the masked load refuses it
("mask has unsupported dtype"): SGLang 0.5.23's ``_per_row_lora_b_kernel`` (``kernels/ops/lora/common/lora_b.py``)
masks its rank blocks so. Compiled, that mask is i1. The repair keeps a splat of bool data bool, where the
installed interpreter splats it to another dtype.

Triton 3.9's interpreter keeps a bfloat16 block as its uint16 bit patterns (numpy has no bfloat16) and its
``create_dot`` multiplies the operands' data as it finds it: a ``tl.dot`` of bfloat16 blocks multiplies the bit
patterns as integers (errors ~1e10; vLLM 0.21's ``_fused_moe_lora_kernel`` casts both operands to bfloat16 before
its dot, whatever the model's dtype). Compiled, the dot multiplies the bfloat16 values and accumulates in float32;
the repair widens bfloat16 operands to float32 (exact: a bfloat16 is the top half of a float32) where the installed
interpreter gets the dot of two bfloat16 ones wrong. Its cast of a float32 to bfloat16 (and of a float16, through
float32) truncates the mantissa; compiled, a downcast rounds to nearest even (``semantic.cast``'s default): the
second repair rounds so where the installed interpreter truncates.

Each repair is named, so ``fuzzrunner doctor`` can say which were applied.
"""

from __future__ import annotations

import inspect
import os

_BUGGY_INDEX = "int(self.handle.data))"
_applied: list[str] = []
_checked = False


def _numpy_refuses_1d_int() -> bool:
    import numpy as np
    try:
        int(np.zeros(1, dtype=np.int32))
    except TypeError:
        return True
    return False


def _index_repair_needed(interpreter) -> bool:
    fn = getattr(interpreter, "_patch_lang_tensor", None)
    if fn is None:
        return False
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return _BUGGY_INDEX in source and _numpy_refuses_1d_int()


def _repair_index(interpreter) -> None:
    original = interpreter._patch_lang_tensor

    def _patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        # as Triton 3.9 does: a 1-element block is a scalar index
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    _patch_lang_tensor.__wrapped__ = original  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = _patch_lang_tensor


def _splat_repair_needed(interpreter) -> bool:
    import numpy as np
    import triton.language as tl
    try:
        handle = interpreter.TensorHandle(np.array([True]), tl.int32)  # a comparison's result, as 3.9 types it
        out = interpreter.InterpreterBuilder.create_splat(None, tl.block_type(tl.int1, [2]), handle)
    except Exception:  # noqa: BLE001 - another interpreter: nothing to repair here
        return False
    return out.data.dtype != np.bool_


def _repair_splat(interpreter) -> None:
    import numpy as np
    original = interpreter.InterpreterBuilder.create_splat

    def create_splat(self, ret_ty, arg):
        out = original(self, ret_ty, arg)
        if arg.data.dtype == np.bool_ and out.data.dtype != np.bool_:  # a truth value stays one (i1, compiled)
            out.data = out.data.astype(np.bool_)
        return out

    create_splat.__wrapped__ = original  # type: ignore[attr-defined]
    interpreter.InterpreterBuilder.create_splat = create_splat


def _bf16_dot_repair_needed(interpreter) -> bool:
    import numpy as np
    import triton.language as tl
    one = np.full((1, 1), 0x3F80, dtype=np.uint16)  # bfloat16 1.0
    try:
        out = interpreter.InterpreterBuilder.create_dot(
            None, interpreter.TensorHandle(one, tl.bfloat16), interpreter.TensorHandle(one, tl.bfloat16),
            interpreter.TensorHandle(np.zeros((1, 1), dtype=np.float32), tl.float32), None, None)
    except Exception:  # noqa: BLE001 - another interpreter: nothing to repair here
        return False
    return float(np.asarray(out.data).reshape(-1)[0]) != 1.0


def _repair_bf16_dot(interpreter) -> None:
    import numpy as np
    import triton.language as tl
    original = interpreter.InterpreterBuilder.create_dot

    def widened(h):
        if h.dtype.scalar != tl.bfloat16:
            return h
        return interpreter.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)

    def create_dot(self, a, b, d, *args):
        return original(self, widened(a), widened(b), d, *args)

    create_dot.__wrapped__ = original  # type: ignore[attr-defined]
    interpreter.InterpreterBuilder.create_dot = create_dot


_BF16_PROBE = 1.0 + 0.75 / 128  # between two bfloat16 values (1 and 1 + 2^-7), nearer the upper one


def _bf16_cast_repair_needed(interpreter) -> bool:
    import numpy as np
    import triton.language as tl
    try:
        out = interpreter.InterpreterBuilder.cast_impl(
            None, interpreter.TensorHandle(np.array([_BF16_PROBE], dtype=np.float32), tl.float32), tl.bfloat16)
    except Exception:  # noqa: BLE001 - another interpreter: nothing to repair here
        return False
    return int(np.asarray(out.data).view(np.uint16)[0]) != 0x3F81


def _repair_bf16_cast(interpreter) -> None:
    import numpy as np
    import triton.language as tl
    original = interpreter.InterpreterBuilder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar != tl.float32 or dst_type.scalar != tl.bfloat16:
            return original(self, src, dst_type)
        bits = np.ascontiguousarray(src.data, dtype=np.float32).view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # to nearest, ties to even
        rounded = np.where(np.isnan(src.data), np.uint16(0x7FC0), rounded)
        return interpreter.TensorHandle(rounded, dst_type.scalar)

    cast_impl.__wrapped__ = original  # type: ignore[attr-defined]
    interpreter.InterpreterBuilder.cast_impl = cast_impl


# each repair's name (what ``applied`` reports), the probe that says this interpreter needs it, the repair
_REPAIRS = (("index-of-1-element-block", _index_repair_needed, _repair_index),
            ("splat-of-a-truth-value", _splat_repair_needed, _repair_splat),
            ("dot-of-bfloat16", _bf16_dot_repair_needed, _repair_bf16_dot),
            ("bfloat16-downcast-rounds-to-nearest", _bf16_cast_repair_needed, _repair_bf16_cast))


def apply() -> tuple[str, ...]:
    """Repair the interpreter where this installation needs it (idempotent); the repairs applied."""
    global _checked
    if _checked or os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return tuple(_applied)
    _checked = True
    try:
        from triton.runtime import interpreter
    except ImportError:
        return tuple(_applied)
    for name, needed, repair in _REPAIRS:
        if needed(interpreter):
            repair(interpreter)
            _applied.append(name)
    return tuple(_applied)


def applied() -> tuple[str, ...]:
    return tuple(_applied)
