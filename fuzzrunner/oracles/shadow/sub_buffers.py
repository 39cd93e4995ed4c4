"""Bounds of registered sub-buffers: a view given to ``track(view, name)`` that does not span its
storage (one slot of stacked weights, a piece of a carved ``torch.empty`` arena) is a buffer of
its own for the kernels given it.

A kernel that runs past such a view into its neighbour stays inside one allocation, so the
storage's bounds cannot see it, and the spans of the launch's arguments cannot either when the
neighbour is an argument too. So the pointers are followed: while a kernel given a registered
view runs, the interpreter's pointer handle made for that argument carries the view's span, and
every pointer computed from it (``ptr + offs``, splats, broadcasts, reshapes, ``tl.where``,
pointer casts) carries it on. A load or store through such a pointer outside the span is
reported as out-of-bounds of the view, naming the allocation it ran into. A pointer made from an
integer, or from two different bases, carries nothing: no check, so no false report.

Only registered views get bounds of their own: an ordinary slice, or the whole stacked tensor, may be
indexed anywhere in its storage (vLLM's LoRA kernels reach adapter ``id`` from adapter 0's base). Every
other tensor argument carries its whole storage's span (``OWN_STORAGE``): a lane of its pointer that
lands inside another allocation is out of bounds of the argument, whatever that neighbour is (the
oracle's ``_escaped``; before, only the address was checked, so the verdict depended on the allocator's
layout).
"""

from __future__ import annotations

from collections.abc import Callable

from .launch_views import span

TAG = "fuzzrunner.view"
OWN_STORAGE = "own storage"  # a tag's 4th field: the argument's whole storage, not a registered view
# Interpreter builder methods that make a pointer from a pointer (create_int_to_ptr is
# create_bitcast; a pointer from an integer carries no base).
_CARRY = ("create_addptr", "create_splat", "create_broadcast", "create_expand_dims", "create_reshape",
          "create_trans", "create_select", "create_bitcast", "create_cat", "create_join", "create_split",
          "create_unsplat")


class SubBuffers:
    """Registered views that do not span their storage: storage address -> [(lo, hi, name)]."""

    def __init__(self):
        self._views: dict[int, list] = {}

    def add(self, t, name: str) -> None:
        st = t.untyped_storage()
        lo, hi = span(t)
        base = st.data_ptr()
        if lo <= base and hi >= base + st.nbytes():
            return  # the whole storage: its bounds are the allocation's
        views = [v for v in self._views.get(base, []) if v[:2] != (lo, hi)]
        self._views[base] = views + [(lo, hi, name)]

    def drop_storage(self, base: int) -> None:
        self._views.pop(base, None)

    def bases(self, args: dict) -> dict:
        """(storage, lo, hi) of each launch argument inside a registered view -> (view lo, hi, name):
        the smallest registered view holding the argument's span."""
        out = {}
        for t in args.values():
            if t.numel() == 0:
                continue
            base = t.untyped_storage().data_ptr()
            lo, hi = span(t)
            holding = [v for v in self._views.get(base, ()) if v[0] <= lo and hi <= v[1]]
            if holding:
                out[(base, lo, hi)] = min(holding, key=lambda v: v[1] - v[0])
        return out


def tag_of(handle):
    attr = getattr(handle, "attr", None)
    return attr.get(TAG) if attr else None


def _is_ptr(handle) -> bool:
    is_ptr = getattr(getattr(handle, "dtype", None), "is_ptr", None)
    return bool(is_ptr()) if callable(is_ptr) else False


def _carry(orig: Callable) -> Callable:
    def run(*args, **kwargs):
        out = orig(*args, **kwargs)
        tags = {tag_of(a) for a in args if _is_ptr(a)}
        if len(tags) == 1 and None not in tags:
            tag = tags.pop()
            for o in out if isinstance(out, tuple) else (out,):
                if _is_ptr(o):
                    o.attr[TAG] = tag
        return out
    return run


class Provenance:
    """Installed for one launch: the argument handles carry their span (a registered view's, else the
    argument's whole storage)."""

    def __init__(self, bases: dict):
        self.bases = bases
        self._saved: dict = {}

    def install(self) -> None:
        from triton.runtime import interpreter as itp
        b = itp.interpreter_builder
        self._saved = {name: b.__dict__.get(name) for name in _CARRY if hasattr(b, name)}
        for name in self._saved:
            setattr(b, name, _carry(getattr(b, name)))
        cvt = self._saved["_implicit_cvt"] = itp._implicit_cvt
        bases = self.bases

        def implicit_cvt(arg):
            out = cvt(arg)
            if hasattr(arg, "untyped_storage") and hasattr(out, "handle") and arg.numel():
                view = bases.get((arg.untyped_storage().data_ptr(), *span(arg)))
                if view is not None:
                    out.handle.attr[TAG] = view
            return out

        itp._implicit_cvt = implicit_cvt

    def uninstall(self) -> None:
        from triton.runtime import interpreter as itp
        b = itp.interpreter_builder
        itp._implicit_cvt = self._saved.pop("_implicit_cvt")
        for name, own in self._saved.items():
            if own is None:
                delattr(b, name)
            else:
                setattr(b, name, own)
        self._saved = {}
