"""What both modes of the shadow oracle are: the protocol, the hooks they install in one order, the op
being run and the reporter. A mode is a back end: where the shadow lives (host arrays or device tensors),
how its checks run (in Triton's interpreter and a torch dispatch mode, or in instrumented kernels and
device checks read back once per op), and the hooks only it needs (``_install_back_end``).
"""

from __future__ import annotations

import threading

from .... import tracking, triton_compat
from ....violation import Violation
from ...base import FinishFailed, Oracle
from ...dynamo_free import DynamoFreeMode
from ..compiled import CompiledRegions
from ..storage_hook import StorageHook
from ..threads import ThreadCoverage
from .hooks import Hooks, exit_mode
from .reporter import Reporter


class ShadowCore(Oracle, tracking.Watcher):
    name = "shadow"
    mode_class: type[DynamoFreeMode]  # the back end's torch dispatch mode (``mode_class(oracle)``), on each thread

    def __init__(self, *, names_threads: bool):
        self.reporter = Reporter(threads=names_threads)
        self.hooks = Hooks()
        self.lock = threading.RLock()  # ops on the case's other threads share the shadow (threads.py)
        self._mode: DynamoFreeMode | None = None  # the dispatch mode on the case's thread, once entered
        self._compiled = CompiledRegions()
        self._threads = ThreadCoverage(lambda: self.mode_class(self))

    # -- the op being run (the reporter's) ---------------------------------------------------
    @property
    def op_index(self) -> int:
        return self.reporter.op_index

    @property
    def op_name(self) -> str:
        return self.reporter.op_name

    def seen(self) -> int:
        return len(self.reporter)

    # -- protocol ----------------------------------------------------------------------------
    def start(self) -> None:
        """The hooks, in this order: the tracking API's watch, the back end's (kernel launches), new and
        resized storages, ``torch.compile``'d regions, the dispatch mode (then what the back end hangs on
        it), and the case's other threads. Each is on ``hooks`` from the moment it is installed."""
        triton_compat.apply()  # the interpreter repaired where this installation needs it, before a kernel runs
        hooks = self.hooks
        hooks.enter(tracking.watch(self))
        self._install_back_end(hooks)
        hooks.add(StorageHook(self.new_storage, self.storage_resized))
        hooks.add(self._compiled)  # before the mode enters: it reads whether Dynamo may compile
        self.mode_class.skip_dynamo()
        mode = self.mode_class(self)
        mode.__enter__()
        self._mode = mode  # (once entered: ``finish`` after a start that raised exits only what was entered)
        hooks.push(self._leave_mode)
        self._mode_entered(hooks)
        hooks.add(self._threads)  # pool work and threads started during the case: a mode of their own

    def begin_op(self, index: int, op: dict) -> None:
        self.reporter.begin_op(index, op)

    # -- tracking.Watcher: the runner's regions (reports made inside name the innermost) -------------
    def region_begin(self, name: str) -> int:
        self.reporter.regions.append(name)
        return len(self.reporter.regions) - 1

    def region_end(self, token: int) -> None:
        del self.reporter.regions[token:]

    def finish(self) -> list[Violation]:
        """The last read-back (the back end's), the hooks undone whatever it raised, then the reports: what
        earlier ops found is kept when the read-back fails (``FinishFailed``)."""
        failed = None
        try:
            self._read_back()
        except Exception as e:  # noqa: BLE001  (the hooks undone, what earlier ops found kept: FinishFailed)
            failed = e
        finally:
            self._uninstall()
        self._closing_reports()
        if failed is not None:
            raise FinishFailed(failed, self.reporter.violations()) from failed
        return self.reporter.violations()

    # -- the back end's part -----------------------------------------------------------------
    def _install_back_end(self, hooks: Hooks) -> None:
        """Install (on ``hooks``) what sees the back end's kernel launches, before the storage hook."""

    def _mode_entered(self, hooks: Hooks) -> None:
        """The dispatch mode is on this thread: what the back end hangs on it (on ``hooks``)."""

    def _read_back(self) -> None:
        """The checks still on their way, reported (``finish``, before the hooks are undone)."""

    def _closing_reports(self) -> None:
        """Reports of the whole case (``finish``, after the hooks are undone)."""

    def _uninstall(self) -> None:
        """Everything ``start`` installed, undone (after a ``start`` that raised halfway, what it had)."""
        self.hooks.undo()

    def _leave_mode(self) -> None:
        mode, self._mode = self._mode, None
        if mode is not None:
            exit_mode(mode)

    def new_storage(self, st) -> None:
        """``torch.UntypedStorage(n)`` (no aten op sees it): n bytes never written."""
        raise NotImplementedError

    def storage_resized(self, st, before: tuple) -> None:
        """``UntypedStorage.resize_`` (no aten op sees it): ``before`` its (address, bytes)."""
        raise NotImplementedError
