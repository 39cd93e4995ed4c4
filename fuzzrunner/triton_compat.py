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
    if _index_repair_needed(interpreter):
        _repair_index(interpreter)
        _applied.append("index-of-1-element-block")
    if _splat_repair_needed(interpreter):
        _repair_splat(interpreter)
        _applied.append("splat-of-a-truth-value")
    return tuple(_applied)


def applied() -> tuple[str, ...]:
    return tuple(_applied)
