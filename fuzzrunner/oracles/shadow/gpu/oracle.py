"""The shadow oracle on the device: the same reports as the CPU oracle, from device-side shadows.

A back end of the shadow core (core/): ``GpuShadowOracle`` keeps a ``DeviceShadow`` (regions.py) fed by
three paths: the tracking API (``fuzzrunner.track``), torch ops (``torch_mode.py``) and Triton launches,
whose kernels are replaced for the launch by their instrumented twins (``instrument.py``). Nothing is read
back during an op; at the end of each op the violation ring and the torch log are copied to the host once
and handed to the core's ``Reporter``, which the CPU mode reports through too (same kinds, tensor names,
messages, details; the thread of a bad access is not known on the device).
A kernel that cannot be instrumented runs unchecked and is named, once per case, as a
``tool-limitation`` (never silently); so is a compiled kernel its caller launches directly, past Triton's
``JITFunction.run`` (returned_kernel.py: what a launch returns is relaunched through the hook, checked).
"""

from __future__ import annotations

import threading

import torch

from .... import _env, tracking
from ..core import Hooks, insert_mode
from ..threads import locked
from . import device_checks as dc
from . import dispatch_filter, torch_mode
from .instrument import INSTRUMENTER, NotInstrumentable, python_function
from .launch_hook import LaunchHook
from .read_back import ReadBack
from .regions import CAP, DeviceShadow, capturing
from .torch_mode import SCRATCH_ROW, DeviceTorchMode


class GpuShadowOracle(ReadBack):
    mode_class = DeviceTorchMode  # the dispatch mode it runs (benchmarks/shadow_dispatch.py swaps it)

    def __init__(self, device: str | torch.device | None = None, *, auto_track_empty: bool = True):
        """``device``: the device whose memory it checks: the run's (``Context.device``, from ``shadow_oracle``: a
        ``--device cpu`` run on a GPU machine checks the CPU, where its tensors are); by default the process's."""
        super().__init__(names_threads=False)
        dev = torch.device(device or _env.device_type())
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        self.device = dev
        self.cuda = dev.type == "cuda"  # else the CPU (Triton's interpreter): read at every op
        self.bounds_kernel = self.cuda  # index bounds by one launch (``index_bounds``); on the CPU by torch ops
        self.auto_track_empty = auto_track_empty
        self.log: torch.Tensor | None = None   # device rows of torch-side checks
        self.shadow: DeviceShadow = None  # type: ignore[assignment]
        self._rows: list = []                 # per log row: what it checked
        self._graph_rows: list = []           # per graph row (captured checks, for the case): what it checks
        self._oob: list = []                  # this op's index bounds checks: (what, out-of-range mask, indices)
        self._launched = False                # an instrumented kernel ran since the last read-back
        self._captured = False                # one was captured in a CUDA graph: its replays write the ring
        self._tls = threading.local()
        self._hook: LaunchHook | None = None
        self._dead: list = []
        self._deaths: dict = {}                # (address, bytes) -> the finalizer that reports its storage freed
        self.unchecked: dict[str, str] = {}   # kernel -> why it runs unchecked (named in the report)
        self._reported: set = set()           # (region id, element, op): one report per bad element per op
        self._filter = None                    # the dispatch filter's module while this oracle uses it
        self._filter_was = False               # whether this thread had its key included before
        self._skipping: list = []              # regions holding this op's left-out writes (``unstamped``)
        self._pauser = _Pause(self._tls)

    @property
    def epoch(self) -> int:
        return self.shadow.epoch

    # -- protocol -------------------------------------------------------------------------
    def start(self) -> None:
        self.shadow = DeviceShadow(self.device)
        self.log = torch.zeros((SCRATCH_ROW + 1, 4), dtype=torch.int64, device=self.device)
        super().start()  # (its own check kernels run through the interpreter off the GPU: triton_compat first)

    def _install_back_end(self, hooks: Hooks) -> None:
        self._hook = hooks.add(LaunchHook(self._launch, self.pause, self._unchecked_launch, dc.INTERNAL,
                                          on_direct=self._direct_launch))

    def _mode_entered(self, hooks: Hooks) -> None:
        if self.mode_class is DeviceTorchMode:  # (a mode of another class may do more with an op than it knows)
            self._start_filter(hooks)

    def _start_filter(self, hooks: Hooks) -> None:
        """Ops that the mode would only run skip it on this thread (dispatch_filter.py), where it can be built
        and no other oracle of the process holds it (one mode, one index: that oracle's)."""
        filt = dispatch_filter.get()
        if filt is None or not dispatch_filter.claim(self):
            return
        self._filter, self._filter_was = filt, filt.included()  # from here on, ``_stop_filter`` undoes it all
        hooks.push(self._stop_filter)
        torch_mode.use_filter(filt)
        filt.take_fresh()  # (an earlier case's)
        self.shadow.mirror_to(filt)
        filt.set_mode(self._mode, str(self.device))
        self._pauser.filter = filt
        filt.set_paused(getattr(self._tls, "pause", 0))
        filt.include(True)

    def _stop_filter(self) -> None:
        filt, self._filter = self._filter, None
        if filt is None:
            return
        self._pauser.filter = None
        filt.set_paused(0)
        filt.include(self._filter_was)
        filt.set_mode(None, str(self.device))  # (inactive: the next oracle to hold it sends its own index)
        self.shadow.mirror_to(None)
        dispatch_filter.release(self)

    def begin_op(self, index: int, op: dict) -> None:
        with self.pause():
            self._collect()
            super().begin_op(index, op)
            self.shadow.set_epoch(index + 1)
            for r in self._skipping:  # the writes kept for the op that ended: let go
                r.skipped = None
            self._skipping.clear()

    def end_op(self) -> None:
        with self.pause():
            self._collect()

    def _read_back(self) -> None:
        with self.pause():
            self._collect()

    # -- tracking.Watcher: a region's reports are read back at its edges (one sync each), so they name it ---
    def region_begin(self, name: str) -> int:
        self._region_edge()  # what ran before: outside the region
        return super().region_begin(name)

    def region_end(self, token: int) -> None:
        try:
            self._region_edge()  # what ran inside: named by it
        finally:
            super().region_end(token)

    def _region_edge(self) -> None:
        """The read-back ``end_op`` makes, at a region's edge; not while a CUDA graph is being captured (its launches
        have not run: they are read back after a replay, outside the region)."""
        if self.cuda and torch.cuda.is_current_stream_capturing():
            return
        self._read_back()

    def _closing_reports(self) -> None:
        for kernel, why in self.unchecked.items():
            self.reporter.add("tool-limitation", kernel, "", "", f"{kernel} ran unchecked on the GPU: {why}",
                              {"op_index": -1}, 1)

    def _uninstall(self) -> None:
        for r in self._skipping:
            r.skipped = None
        self._skipping.clear()
        for watch in self._deaths.values():
            watch.detach()
        self._deaths.clear()
        super()._uninstall()

    def _leave_mode(self) -> None:
        stepped = getattr(self._tls, "stepped_aside", None)
        if stepped is not None:  # finished inside a quiet block: its mode back first, then left in its place
            self._tls.stepped_aside = None
            insert_mode(stepped[0], stepped[1])
        super()._leave_mode()

    # -- pausing (the oracle's own ops) ---------------------------------------------------
    def paused(self) -> bool:
        return getattr(self._tls, "pause", 0) > 0 or tracking.is_quiet()

    def pause(self):
        """A context in which this thread's ops and launches are the oracle's own (reentrant)."""
        return self._pauser

    def quiet_begin(self):
        """``tracking.quiet()`` hides this thread's torch ops: where this oracle's dispatch mode is the
        innermost one, it steps aside for the block, so that those ops (a reference model's, hundreds
        per case) cost nothing rather than a pass through the mode each; else each op passes it quietly
        (``paused``). Kernels launched inside are still checked (``_launch``). The token: (the mode, its
        place on the stack), also kept for this thread, so that ``finish`` inside the block puts it back."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode, _len_torch_dispatch_stack, _pop_mode
        top = _get_current_dispatch_mode()
        if not (isinstance(top, DeviceTorchMode) and top.oracle is self):
            return None
        token = (top, _len_torch_dispatch_stack() - 1)
        _pop_mode()
        self._tls.stepped_aside = token
        return token

    def quiet_end(self, token: tuple | None) -> None:
        """Back in its place (under any mode entered during the block and still on), unless ``finish`` did it."""
        stepped = getattr(self._tls, "stepped_aside", None)
        if token is not None and stepped is token:
            self._tls.stepped_aside = None
            insert_mode(stepped[0], stepped[1])

    # -- Triton launches ------------------------------------------------------------------
    @locked
    def _launch(self, kernel, args: list):
        """(twin, extra launch arguments) for a user kernel; None: run it as it is. Inside
        ``tracking.quiet()`` too, as the CPU oracle checks it: quiet hides the harness's torch ops, not
        kernels (vLLM's registered ops run there, and their kernels' loads are what is checked)."""
        if getattr(self._tls, "pause", 0) > 0 or kernel in dc.INTERNAL:
            return None
        known = _KERNELS.get(id(kernel))
        if known is None or known[0] is not kernel:
            known = _KERNELS[id(kernel)] = (kernel, *_kernel(kernel))
        _, twin, name, path = known
        if twin is None:  # ``path``: why it cannot be instrumented
            self.unchecked.setdefault(name, path)
            return "unchecked"
        device = self.device.type
        for _, t in args:
            d = getattr(t, "device", None)
            if d is None or d.type != device:
                self.unchecked.setdefault(name, "an argument is a tensor descriptor or on another device")
                return "unchecked"
        self._settle()
        in_capture = capturing(self.device)
        table, nreg, _, _ = self.shadow.table(args, name, path, in_capture)
        self._launched = True
        self._captured = self._captured or in_capture
        return twin, dict(_sh_table=table, _sh_arena=self.shadow.arena, _sh_ring=self.shadow.ring,
                          _sh_cell=self.shadow.cell, _SH_CAP=CAP)

    def _direct_launch(self, name: str) -> None:
        """A compiled kernel launched past ``JITFunction.run`` (kept by its caller before this oracle started:
        returned_kernel.py): neither checked nor its writes seen, so named, never silent."""
        if getattr(self._tls, "pause", 0) == 0:  # (inside tracking.quiet() too: kernels there are checked)
            self.unchecked.setdefault(name, DIRECT_LAUNCH)

    @locked
    def _unchecked_launch(self, args: list) -> None:
        """Every tracked element of an unchecked kernel's tensor arguments counts as written by it."""
        from .views import shadow_parts
        with self.pause():
            for _, t in args:
                if getattr(t, "device", None) is not None and t.device.type == self.device.type:
                    for _r, sh, _ in shadow_parts(t, self.regions_of(t), write=True):
                        sh.copy_(self.shadow.epoch_like(sh.shape))


DIRECT_LAUNCH = ("its caller launched a compiled kernel it had kept from a launch before the device shadow started "
                 "(past JITFunction.run, as SGLang's cached_triton_kernel does): its accesses are not checked and its "
                 "writes not seen; run the worker's cases all under the shadow, or empty the caller's kernel cache")

# id(kernel) -> (kernel, *_kernel(kernel)), per process (by id: a JITFunction's hash takes a lock; the kernel
# held, so an id is never another kernel's)
_KERNELS: dict = {}


def _kernel(kernel) -> tuple:
    """(instrumented twin, name, source file) of a kernel; (None, name, why) for one that cannot be."""
    fn = python_function(kernel)
    try:
        return INSTRUMENTER.kernel(kernel), fn.__name__, fn.__code__.co_filename
    except NotInstrumentable as e:
        return None, fn.__name__, str(e)


class _Pause:
    """``GpuShadowOracle.pause()``: one object per oracle, counting per thread (no class made per call). The
    dispatch filter, while the oracle holds it, is told each depth, so that it lets the oracle's own ops run as
    the paused mode would (no result of theirs taken for new memory)."""

    def __init__(self, tls):
        self.tls = tls
        self.filter = None

    def __enter__(self):
        depth = self.tls.pause = getattr(self.tls, "pause", 0) + 1
        if self.filter is not None:
            self.filter.set_paused(depth)

    def __exit__(self, *exc):
        depth = self.tls.pause = self.tls.pause - 1
        if self.filter is not None:
            self.filter.set_paused(depth)
