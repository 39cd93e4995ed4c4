"""Instrument a ``@triton.jit`` kernel for the GPU shadow: a source rewrite into a twin kernel.

The twin is an ordinary Triton kernel (so it compiles, autotunes and runs in the interpreter like
its original) with five more parameters: the launch's region table, the shadow arena, the
violation ring, the epoch cell, and a constexpr (``_SH_CAP``, the ring's entries).
Every ``tl.load`` / ``tl.store`` / ``tl.atomic_*`` becomes a call of the matching check in
``device_checks.py`` (which performs the original op with the checked mask), tagged with the
original ``file`` line; every call of another ``@triton.jit`` function that touches memory calls
its own instrumented twin with the same extra arguments.

Pointers are mapped to shadow elements by *address* (``ptr.to(tl.int64)`` against the region
table), so any pointer arithmetic, helper call, tuple argument or pointer array is followed
without a data-flow analysis. What has no address per lane is refused, by name
(``NotInstrumentable``): block pointers (``tl.make_block_ptr``/``tl.advance``, loads with
``boundary_check``) and tensor descriptors (``make_tensor_descriptor``, ``desc.load``).
"""

from __future__ import annotations

import ast
import atexit
import inspect
import os
import shutil
import tempfile
import textwrap
import threading

import triton
import triton.language as tl

from . import device_checks

EXTRA = ("_sh_table", "_sh_arena", "_sh_ring", "_sh_cell")
CONSTS = ("_SH_CAP",)
_MEMORY_OPS = {"load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_and",
               "atomic_or", "atomic_xor", "atomic_cas"}
_REFUSED = {"make_block_ptr": "a block pointer (tl.make_block_ptr)", "advance": "a block pointer (tl.advance)",
            "make_tensor_descriptor": "a tensor descriptor (tl.make_tensor_descriptor)",
            "load_tensor_descriptor": "a tensor descriptor", "store_tensor_descriptor": "a tensor descriptor"}


class NotInstrumentable(Exception):
    """A kernel the GPU shadow cannot check, with the reason (its accesses have no per-lane address)."""


def _jit_types() -> tuple:
    from triton.runtime.jit import JITFunction
    types: list = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction
        types.append(InterpretedFunction)
    except ImportError:  # pragma: no cover  (every supported Triton has it)
        pass
    return tuple(types)


def python_function(kernel):
    """The Python function under a ``JITFunction``/``InterpretedFunction`` (and under autotune wrappers)."""
    fn = kernel
    while not inspect.isfunction(fn):
        fn = getattr(fn, "fn", None)
        if fn is None:
            raise NotInstrumentable(f"{kernel!r} wraps no Python function")
    return fn


class _Scope:
    """What names in a kernel's source refer to: the ``triton.language`` module, jit functions."""

    def __init__(self, fn):
        self.ns = dict(fn.__globals__)
        if fn.__closure__:
            self.ns.update({n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__)})

    def value(self, node):
        if isinstance(node, ast.Name):
            return self.ns.get(node.id, _MISSING)
        if isinstance(node, ast.Attribute):
            base = self.value(node.value)
            return getattr(base, node.attr, _MISSING) if base is not _MISSING else _MISSING
        return _MISSING

    def is_language(self, node) -> bool:
        return self.value(node) is tl


_MISSING = object()


class _Rewriter(ast.NodeTransformer):
    def __init__(self, scope: _Scope, first_line: int, instrumenter: Instrumenter, name: str):
        self.scope, self.first_line, self.inst, self.name = scope, first_line, instrumenter, name
        self.helpers: dict[str, object] = {}  # injected name -> instrumented helper
        self.touched = False

    def _line(self, node) -> int:
        return self.first_line + node.lineno - 1

    def _refuse(self, node, what: str):
        raise NotInstrumentable(f"{self.name} uses {what} at line {self._line(node)}: its accesses have no "
                                f"per-lane address to check")

    def visit_Call(self, node: ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _REFUSED and self.scope.is_language(func.value):
            self._refuse(node, _REFUSED[func.attr])
        method = isinstance(func, ast.Attribute) and func.attr in ("load", "store")
        if method and self.scope.value(func.value) is _MISSING:  # type: ignore[attr-defined]
            self._refuse(node, "a tensor descriptor's load/store")  # desc.load([0, 0]): a descriptor method
        self.generic_visit(node)
        if isinstance(func, ast.Attribute) and func.attr in _MEMORY_OPS and self.scope.is_language(func.value):
            self.touched = True
            return self._memory_op(func.attr, node)
        target = self.scope.value(func)
        if isinstance(target, _jit_types()):
            twin = self.inst.helper(target)
            if twin is not None:
                self.touched = True
                injected = f"_sh_fn_{len(self.helpers)}_{python_function(target).__name__}"
                self.helpers[injected] = twin
                node.func = ast.Name(injected, ast.Load())
                node.keywords += [ast.keyword(n, ast.Name(n, ast.Load())) for n in EXTRA + CONSTS]
        return node

    def _memory_op(self, op: str, node: ast.Call):
        names = {"load": ("pointer", "mask", "other", "boundary_check", "padding_option", "cache_modifier",
                          "eviction_policy", "volatile"),
                 "store": ("pointer", "value", "mask", "boundary_check", "cache_modifier", "eviction_policy"),
                 "atomic_cas": ("pointer", "cmp", "val", "sem", "scope")}.get(
                     op, ("pointer", "val", "mask", "sem", "scope"))
        args = dict(zip(names, node.args))
        args.update({k.arg: k.value for k in node.keywords if k.arg})
        if "boundary_check" in args or "padding_option" in args:
            self._refuse(node, "a block pointer (boundary_check)")
        line = ast.Constant(self._line(node))
        none = ast.Constant(None)

        def const(name, default):
            v = args.get(name)
            return v if v is not None else ast.Constant(default)

        extra = [ast.Name(n, ast.Load()) for n in EXTRA + CONSTS]
        mask, has_mask = args.get("mask", none), ast.Constant("mask" in args)
        if op == "load":
            call_args = [args["pointer"], mask, args.get("other", none), has_mask, ast.Constant("other" in args),
                         const("cache_modifier", ""), const("eviction_policy", ""), const("volatile", False), line]
            helper = "_sh_load"
        elif op == "store":
            call_args = [args["pointer"], args["value"], mask, has_mask, const("cache_modifier", ""),
                         const("eviction_policy", ""), line]
            helper = "_sh_store"
        elif op == "atomic_cas":
            call_args = [args["pointer"], args["cmp"], args["val"], const("sem", None), const("scope", None), line]
            helper = "_sh_atomic_cas"
        else:
            call_args = [ast.Constant(op.removeprefix("atomic_")), args["pointer"], args["val"], mask, has_mask,
                         const("sem", None), const("scope", None), line]
            helper = "_sh_atomic"
        return ast.copy_location(ast.Call(ast.Name(helper, ast.Load()), call_args + extra, []), node)


class Instrumenter:
    """Instrumented twins of jit functions, made once each (per process)."""

    def __init__(self):
        self._twins: dict = {}
        self._refused: dict = {}
        self._lock = threading.RLock()
        self._dir: str | None = None

    def kernel(self, kernel):
        """The instrumented twin of a kernel; raises ``NotInstrumentable`` with the reason."""
        return self._twin(kernel, top=True)

    def helper(self, fn):
        """The twin of a called jit function, or None when it touches no memory (called as is)."""
        return self._twin(fn, top=False)

    def _twin(self, kernel, top: bool):
        key = (id(kernel), top)
        with self._lock:
            if key in self._refused:
                raise NotInstrumentable(self._refused[key])
            if key not in self._twins:
                try:
                    self._twins[key] = (kernel, self._make(kernel, top))
                except NotInstrumentable as e:
                    self._refused[key] = str(e)
                    raise
            return self._twins[key][1]

    def _make(self, kernel, top: bool):
        fn = python_function(kernel)
        lines, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        fdef = tree.body[0]
        if not isinstance(fdef, ast.FunctionDef):
            raise NotInstrumentable(f"{fn.__name__}: not a plain function definition")
        first_line = start  # line 1 of the parsed text is the file's line ``start`` (decorators included)
        scope = _Scope(fn)
        rw = _Rewriter(scope, first_line, self, fn.__name__)
        fdef.body = [rw.visit(s) for s in fdef.body]
        if not rw.touched and not top:
            return None
        fdef.decorator_list = []
        fdef.name = f"{fn.__name__}__shadow"
        has_defaults = bool(fdef.args.defaults)
        for n in EXTRA:
            fdef.args.args.append(ast.arg(n))
        for n in CONSTS:
            fdef.args.args.append(ast.arg(n, ast.Attribute(ast.Name("_sh_tl", ast.Load()), "constexpr", ast.Load())))
        if has_defaults:
            fdef.args.defaults += [ast.Constant(None)] * (len(EXTRA) + len(CONSTS))
        src = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
        ns = scope.ns
        ns.update(rw.helpers)
        ns.update(_sh_tl=tl, _sh_load=device_checks.sh_load, _sh_store=device_checks.sh_store,
                  _sh_atomic=device_checks.sh_atomic, _sh_atomic_cas=device_checks.sh_atomic_cas)
        path = self._write(fn, src)
        exec(compile(src, path, "exec"), ns)  # noqa: S102  (our own rewrite of the kernel's source)
        new = ns[fdef.name]
        new.__module__ = fn.__module__
        opts = {k: getattr(kernel, k) for k in ("debug", "noinline") if getattr(kernel, k, None) is not None}
        twin = triton.jit(new, **opts)
        twin.shadow_of = kernel  # type: ignore[attr-defined]
        return twin

    def _write(self, fn, src: str) -> str:
        """The twin's source goes to a real file: Triton reads a kernel's source back with ``inspect``."""
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="fuzzrunner-gpu-shadow-")
            atexit.register(shutil.rmtree, self._dir, True)
        path = os.path.join(self._dir, f"{fn.__module__.replace('.', '_')}__{fn.__name__}__{len(self._twins)}.py")
        with open(path, "w") as f:
            f.write(src)
        return path


INSTRUMENTER = Instrumenter()
