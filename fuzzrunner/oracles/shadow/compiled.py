"""``torch.compile``'d code under the shadow oracle: the compiled graphs run, with their ops seen.

Dynamo compiles nothing while a dispatch mode that does not declare ``ignore_compile_internals``
is active: compiled regions would run eagerly, so the branch of ``torch.compiler.is_compiling()``
code that a compiled run takes (vLLM's custom ops) would never be checked, and every code object
entered under the mode would stay marked "skip" for the rest of the process.

While the oracle is active, the compiler's stance forces the ``eager`` backend: Dynamo traces
each region as it would for any backend (the compiled branch, graph breaks, guards), and the
graph it produces runs as torch ops that the shadow mode, now declaring
``ignore_compile_internals``, sees one by one at run time (Dynamo's tracing itself, on fake
tensors, is not seen). A graph compiled under the oracle is guarded by its backend, so it is
never used outside the case, and graphs the user's backend compiled (inductor's C++ or Triton
code, which no hook could see) are not used inside it. The stance is restored at the end.

Where torch has no ``force_backend`` stance, or the user set a stance of their own, compiled
regions run eagerly (as before) and one warning says so.

Until something imports ``torch._dynamo`` nothing can be compiled, and importing it costs seconds (a
worker's start-up would pay them for nothing): while it is not loaded, ``install`` only watches for
its import (a finder on ``sys.meta_path``) and sets the stance as soon as that import has run, so a
``torch.compile`` first called inside a case is seen as one called before it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
import warnings

_visible = 0  # oracles active with the eager stance: the shadow mode may let Dynamo compile


def visible() -> bool:
    """Whether compiled regions are now compiled with the eager backend (ops visible to the mode)."""
    return _visible > 0


class CompiledRegions:
    def __init__(self):
        self._prior = None
        self._waiting: _AfterImport | None = None  # watching for Dynamo's import (not loaded at install)

    def install(self) -> None:
        if "torch._dynamo" not in sys.modules:
            self._waiting = _AfterImport("torch._dynamo", self._set_stance)
            return
        self._set_stance()

    def _set_stance(self) -> None:
        global _visible
        try:
            from torch._dynamo import eval_frame as ef
            prior = ef._stance
            if prior.stance != "default":
                raise RuntimeError(f"the compiler's stance is {prior.stance!r}")
            self._prior = ef._set_stance(type(prior)("default", prior.skip_guard_eval_unsafe, "eager"))
        except (ImportError, AttributeError, TypeError, RuntimeError) as exc:
            _warn_once(exc)
            return
        _visible += 1

    def uninstall(self) -> None:
        global _visible
        waiting, self._waiting = self._waiting, None
        if waiting is not None:  # no stance set after this (one being set on another thread is waited for)
            waiting.cancel()
        if self._prior is None:
            return
        from torch._dynamo import eval_frame as ef
        ef._set_stance(self._prior)
        self._prior = None
        _visible -= 1


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then()`` once, right after the module ``name`` has been imported (its body run), on
    whichever thread imports it, unless ``cancel`` came first; ``cancel`` returns only once a ``then()``
    under way has ended. Only an import fires it: a ``find_spec`` probe whose spec is never loaded
    does not. ``sys.meta_path`` is rebound, never changed in place (another thread's import may be
    walking it)."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then
        self._lock = threading.Lock()
        self._done = False          # fired or cancelled
        self._inside = threading.local()
        sys.meta_path = [self, *sys.meta_path]

    def cancel(self) -> None:
        with self._lock:
            self._done = True
        self._remove()

    def _remove(self) -> None:
        sys.meta_path = [f for f in sys.meta_path if f is not self]

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            self.then()
        self._remove()

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self._done or getattr(self._inside, "finding", False):
            return None
        self._inside.finding = True  # the search below asks the finders again, this one included
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._inside.finding = False
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenLoader(spec.loader, self._fire)
        return spec


class _ThenLoader(importlib.abc.Loader):
    def __init__(self, loader, then):
        self.loader, self.then = loader, then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # the module keeps its own loader
        self.loader.exec_module(module)
        try:
            self.then()
        except Exception as exc:  # noqa: BLE001 - never the import's failure: compiled regions run eagerly
            _warn_once(exc)


_warned = False


def _warn_once(why: BaseException) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"torch.compile'd code runs eagerly under the shadow oracle ({why}): the branch a "
                      "compiled run takes (torch.compiler.is_compiling()) is not checked", stacklevel=3)
