"""The shadow-memory oracle: uninitialized, stale and out-of-bounds accesses, on the CPU.

Triton kernels are checked through the interpreter hook (triton_hook.py), torch ops
through a dispatch mode (torch_hook.py); both feed one ``ShadowMemory``. Each op of a
case is an epoch: per-step buffers must be written in the epoch that reads them.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import numpy as np
import torch

from .. import _env, tracking
from ..violation import Violation
from .base import Oracle, ViolationLog, source_location
from .shadow_memory import BadAccess, ShadowMemory
from .torch_hook import TorchShadowMode
from .triton_hook import TritonHook, grid_idx, kernel_source_line

# Frames skipped when blaming a torch op on its caller: torch, Triton, and our own hooks.
_NOT_CALLERS = ("/torch/", "/triton/", "/fuzzrunner/oracles/", "/fuzzrunner/tracking.py", "/contextlib.py")


def _caller_line() -> tuple[str, int]:
    """The innermost frame outside torch and the oracles: the code that called the torch op."""
    f = sys._getframe(2)
    while f is not None:
        path = f.f_code.co_filename.replace("\\", "/")
        if not any(s in path for s in _NOT_CALLERS):
            return path, f.f_lineno
        f = f.f_back
    return "?", 0


class ShadowOracle(Oracle, tracking.Watcher):
    name = "shadow"

    def __init__(self, *, auto_track_empty: bool = True, check_triton: bool | None = None):
        self.auto_track_empty = auto_track_empty
        self.check_triton = _env.interpreted() if check_triton is None else check_triton
        self.memory = ShadowMemory()
        self.log = ViolationLog()
        self._mode: TorchShadowMode | None = None
        self._hook: TritonHook | None = None
        self._watch = None
        self._pause = 0
        self._dead: list = []
        self.op_index, self.op_name = -1, ""

    def _register(self, tensor: torch.Tensor, name: str, **kw):
        """Track ``tensor``'s storage until the storage dies (its memory may then be reused)."""
        st = tensor.untyped_storage()
        if st.nbytes() == 0:
            return None
        self._purge()
        alloc = self.memory.add(st.data_ptr(), st.nbytes(), name, itemsize=tensor.element_size(),
                                shape=tuple(tensor.shape), **kw)
        weakref.finalize(st, self._dead.append, alloc)
        return alloc

    def _purge(self) -> None:
        while self._dead:
            self.memory.remove(self._dead.pop())

    # -- protocol -----------------------------------------------------------------------
    def start(self) -> None:
        self._watch = tracking.watch(self)
        self._watch.__enter__()
        if self.check_triton:
            self._hook = TritonHook(self._kernel_read, self._kernel_write, self._launch, self._launch_end)
            self._hook.install()
        self._mode = TorchShadowMode(self)
        self._mode.__enter__()

    def begin_op(self, index: int, op: dict) -> None:
        self.op_index, self.op_name = index, op.get("op", "")
        self.memory.epoch = index + 1

    def observe(self, index: int, op: dict, result: Any) -> None:
        pass

    def finish(self) -> list[Violation]:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        if self._hook is not None:
            self._hook.uninstall()
            self._hook = None
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self._watch = None
        return self.log.violations()

    # -- tracking.Watcher ---------------------------------------------------------------
    def on_track(self, tensor, name: str, per_step: bool, initialized: bool) -> None:
        self._register(tensor, name, per_step=per_step, initialized=initialized)

    def on_carry_over(self, tensor) -> None:
        alloc = self.memory.at(tensor.untyped_storage().data_ptr())
        if alloc is not None:
            self.memory.carry_over(alloc)

    def on_kernel_launch(self, kernel: str, meta: dict) -> None:
        pass

    # -- torch side (TorchShadowMode's checker interface) -------------------------------
    def paused(self) -> bool:
        return self._pause > 0 or tracking.is_quiet()

    def is_tracked(self, t: torch.Tensor) -> bool:
        self._purge()
        try:
            return self.memory.at(t.untyped_storage().data_ptr()) is not None
        except RuntimeError:
            return False

    def torch_read(self, func, t: torch.Tensor, addrs: np.ndarray) -> None:
        if addrs.size == 0:
            return
        bad, _ = self.memory.check_read(addrs, t.element_size())
        if bad:
            path, line = _caller_line()
            for b in bad:
                self._report(b, str(func), source_location(path, line), {"torch_op": str(func)})

    def torch_write(self, func, t: torch.Tensor, addrs: np.ndarray) -> None:
        if addrs.size:
            self.memory.mark_write(addrs, t.element_size())

    def torch_oob(self, func, src: torch.Tensor, index: int, count: int, size: int) -> None:
        alloc = self.memory.at(src.untyped_storage().data_ptr())
        name = alloc.name if alloc else f"<{tuple(src.shape)} tensor>"
        path, line = _caller_line()
        self.log.add(Violation(
            "shadow", "out-of-bounds", str(func), source_location(path, line), name,
            f"{func} indexed row {index} of {name} (size {size} along the indexed dim); "
            f"{count} such index(es); redirected to row 0 so the case could go on",
            {"index": index, "rows": size, "op_index": self.op_index, "op": self.op_name}), count)

    def torch_alloc(self, func, t: torch.Tensor, uninitialized: bool) -> None:
        st = t.untyped_storage()
        ptr, nbytes = st.data_ptr(), st.nbytes()
        if nbytes == 0:
            return
        if uninitialized and self.auto_track_empty:
            path, line = _caller_line()
            self._register(t, f"torch.empty@{source_location(path, line)}", initialized=False, auto=True)
        else:
            for a in self.memory.overlapping(ptr, nbytes):  # freed memory reused by a fresh tensor
                self.memory.remove(a)

    # -- Triton side --------------------------------------------------------------------
    def _launch(self, launch):
        added = []
        for name, t in launch.args.items():
            st = t.untyped_storage()
            self._purge()
            if st.nbytes() and not self.memory.overlapping(st.data_ptr(), st.nbytes()):
                added.append(self._register(t, f"{launch.name}:{name}", auto=True))
        self._pause += 1  # the interpreter's own copy-back of arguments is not a write
        return added

    def _launch_end(self, added) -> None:
        self._pause -= 1
        for a in added:
            self.memory.remove(a)

    def _kernel_read(self, addrs: np.ndarray, itemsize: int) -> np.ndarray:
        self._purge()
        bad, oob = self.memory.check_read(addrs, itemsize)
        if bad:
            self._report_kernel(bad, "read")
        return oob

    def _kernel_write(self, addrs: np.ndarray, itemsize: int) -> np.ndarray:
        self._purge()
        oob = self.memory.mark_write(addrs, itemsize)
        if oob.any():
            lane = int(np.flatnonzero(oob)[0])
            near, dist = self.memory.nearest(int(addrs[lane]))
            self._report_kernel([BadAccess("out-of-bounds", near, int(addrs[lane]), dist, lane,
                                           int(oob.sum()))], "write")
        return oob

    def _report_kernel(self, bad: list[BadAccess], access: str) -> None:
        path, line = kernel_source_line()
        kernel = self._hook.launch.name if self._hook and self._hook.launch else "?"
        for b in bad:
            self._report(b, kernel, source_location(path, line),
                         {"program_id": list(grid_idx()), "access": access})

    def _report(self, b: BadAccess, kernel: str, location: str, extra: dict) -> None:
        name = b.allocation.name if b.allocation else "<untracked>"
        details = {"address": hex(b.address), "op_index": self.op_index, "op": self.op_name, **extra}
        if b.kind == "out-of-bounds":
            where = (f"{b.byte_offset} byte(s) outside {name}" if b.allocation else "outside every tracked allocation")
            msg = f"{kernel} accessed {hex(b.address)}, {where}; the lane was masked off"
            details["distance_bytes"] = b.byte_offset
        else:
            element = b.allocation.element(b.byte_offset)
            details.update(element=list(element), byte_offset=b.byte_offset)
            if b.kind == "stale-read":
                details["written_in_op"] = b.written_epoch - 1
                when = f"op {b.written_epoch - 1}" if b.written_epoch > 0 else "set-up, before op 0"
                why = f"last written in {when}, not in this op {self.op_index}"
            else:
                why = "never written"
            pid = f" (program {tuple(extra['program_id'])})" if "program_id" in extra else ""
            msg = (f"{kernel}{pid} read {name}[{', '.join(map(str, element))}] "
                   f"(byte {b.byte_offset}): {why}")
        self.log.add(Violation("shadow", b.kind, kernel, location, name, msg, details), b.count)
