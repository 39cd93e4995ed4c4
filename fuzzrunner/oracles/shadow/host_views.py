"""Host memory: numpy views and Python lists of tracked CPU tensors.

vLLM's ``CpuGpuBuffer`` / ``InputBatch`` fill ``buf.np[:n]`` (a numpy view of a pinned
CPU tensor) and then copy ``buf.cpu[:n]`` to the device. Numpy writes never reach the
dispatch mode, so without this module the copy reads bytes the shadow thinks unwritten.

While the oracle runs, ``Tensor.numpy()`` of a *tracked* CPU tensor returns a ``ShadowArray``: a
plain ndarray subclass over the same memory that
reports its accesses. Which elements an access touches is found as for torch ops: by
applying the same index to an array of element addresses. Writes: ``a[key] = v``,
``fill``, ``put``, ufuncs' and numpy functions' ``out=``, ``np.copyto``. Reads: ufuncs (``a.sum()``, ``a + 1``) and
numpy functions on it, scalar indexing, ``tolist``, ``item``, ``int(a)``. A read is
reported only for tracked bytes; memory numpy allocated itself is not checked.
``Tensor.tolist()`` is a read of the view (``item()`` already is an aten op).
``np.asarray(t)`` goes through ``Tensor.__array__``, whose result numpy turns into a plain
ndarray: its writes cannot be seen, so its bytes are taken as written (see ``_exported``) --
unless numpy asks for a copy (``np.array(t)``) or converts the value of a subscript store
(``h[k] = t``): those are reads of ``t``.
The same holds for ``Tensor.__dlpack__`` called from outside torch (``np.from_dlpack(t)``, another
framework): ``torch.from_dlpack(t)`` makes a torch tensor whose accesses are seen, anything else not.
"""

from __future__ import annotations

import dis
import sys

import numpy as np
import torch

from .torch_effects import leaves

_WRITES_FIRST = {"copyto", "put", "putmask", "place", "fill_diagonal"}  # first argument is written


def _plain(value):
    if isinstance(value, ShadowArray):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _shadows(value):
    if isinstance(value, ShadowArray):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _shadows(v)


def _addrs(x):
    return x.addresses() if isinstance(x, ShadowArray) and x._host is not None else None


def _take_reads(a, indices, axis=None, out=None, mode="raise"):
    """``np.take`` reads only the taken elements of ``a`` (vLLM gathers token ids this way)."""
    addrs = _addrs(a)
    if addrs is None:
        return {}
    return {id(a): np.take(addrs, _plain(indices), axis=axis, mode=mode)}


def _where_reads(cond, *xy):
    """``np.where(c, x, y)`` reads each side only where ``c`` picks it, as ``torch.where`` does."""
    if len(xy) != 2:
        return {}
    c = np.asarray(_plain(cond), dtype=bool)
    shape = np.broadcast_shapes(c.shape, np.shape(_plain(xy[0])), np.shape(_plain(xy[1])))
    c = np.broadcast_to(c, shape)
    out = {}
    for x, pick in ((xy[0], c), (xy[1], ~c)):
        addrs = _addrs(x)
        if addrs is not None:
            out[id(x)] = np.broadcast_to(addrs, shape)[pick]
    return out


# numpy functions that read part of an argument: name -> (args, kwargs) -> {id(array): addresses read}
_EXACT_READS = {"take": _take_reads, "where": _where_reads}


def _tensors_read(arr, value):
    """Torch tensors given to numpy beside a shadow array are read: check them, and hand numpy a
    view made without the export rule of ``np.asarray(t)`` (which would count them as written)."""
    host = arr._host
    if host is None or not host._saved:
        return value
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or value.requires_grad:
            return value
        host._tensor_read(value, "numpy read")
        return host._saved["numpy"](value)
    if isinstance(value, (list, tuple)) and any(isinstance(v, (torch.Tensor, list, tuple)) for v in value):
        return type(value)(_tensors_read(arr, v) for v in value)
    return value




def _aliased(result, reads) -> dict:
    """id -> shadow argument, for the shadow arguments some array of ``result`` is a view of."""
    out = {}
    for s in _shadows(reads):
        plain = s.view(np.ndarray)
        if any(np.may_share_memory(r.view(np.ndarray), plain) for r in leaves(result, np.ndarray)):
            out[id(s)] = s
    return out


def _rewrap(result, aliased: dict):
    """Views (in ``result``) of watched arrays, watched too."""
    if isinstance(result, np.ndarray):
        for s in aliased.values():
            if np.may_share_memory(result.view(np.ndarray), s.view(np.ndarray)):
                out = result.view(ShadowArray)
                out._host = s._host
                return out
        return result
    if isinstance(result, (list, tuple)):
        return type(result)(_rewrap(r, aliased) for r in result)
    return result


class _Flat:
    """``ShadowArray.flat``: numpy's flat iterator, with its element accesses seen."""

    def __init__(self, arr):
        self._arr, self._it = arr, arr.view(np.ndarray).flat

    def __getitem__(self, key):
        out = self._it[key]
        self._arr._read(self._arr.addresses().flat[key])
        return out

    def __setitem__(self, key, value):
        self._it[key] = _plain(value)
        self._arr._wrote(self._arr.addresses().flat[key])

    def __iter__(self):
        self._arr._read()
        return iter(self._it)

    def __len__(self):
        return len(self._it)

    def __array__(self, *args, **kwargs):
        self._arr._read()
        return self._it.__array__(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._it, name)


class ShadowArray(np.ndarray):
    _host: HostViews | None = None

    def __array_finalize__(self, obj):
        self._host = getattr(obj, "_host", None)

    def addresses(self) -> np.ndarray:
        """An int64 array shaped like this one holding each element's address (cached: fixed per view)."""
        cached = self.__dict__.get("_addrs")
        if cached is None:
            cached = self.__dict__["_addrs"] = self._compute_addresses()
        return cached

    def _compute_addresses(self) -> np.ndarray:
        base = self.__array_interface__["data"][0]
        offs = np.zeros(self.shape, dtype=np.int64)
        for dim, (n, stride) in enumerate(zip(self.shape, self.strides)):
            shape = [1] * self.ndim
            shape[dim] = n
            offs = offs + (np.arange(n, dtype=np.int64) * stride).reshape(shape)
        return offs + base

    def _read(self, addrs=None, what="numpy read"):
        if self._host is not None:
            a = self.addresses() if addrs is None else addrs
            self._host.read(np.asarray(a).ravel().astype(np.uint64), self.itemsize, what)

    def _wrote(self, addrs=None):
        if self._host is not None:
            a = self.addresses() if addrs is None else addrs
            self._host.write(np.asarray(a).ravel().astype(np.uint64), self.itemsize)

    def __setitem__(self, key, value):
        value = _tensors_read(self, value)
        for s in _shadows(value):
            s._read()
        addrs = self.addresses()[key] if self._host is not None else None
        self.view(np.ndarray)[key] = _plain(value)
        self._wrote(addrs)

    def __getitem__(self, key):
        out = super().__getitem__(key)
        if not isinstance(out, np.ndarray):  # a scalar: its element was read
            self._read(self.addresses()[key])
        elif self._host is not None and out.size and not np.may_share_memory(out.view(np.ndarray),
                                                                             self.view(np.ndarray)):
            # advanced indexing (``a[idx]``, ``a[mask]``) copies: the picked elements are read now
            for s in _shadows(key if isinstance(key, tuple) else (key,)):
                s._read()
            self._read(self.addresses()[_plain(key)])
            return out.view(np.ndarray)
        return out

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        inputs = _tensors_read(self, inputs)
        for s in _shadows(inputs):
            s._read()
        if out is not None:
            kwargs["out"] = _plain(out)
        result = getattr(ufunc, method)(*_plain(inputs), **kwargs)
        for s in _shadows(out or ()):
            s._wrote()
        return out[0] if out is not None and len(out) == 1 else result

    def __array_function__(self, func, types, args, kwargs):
        args, kwargs = _tensors_read(self, args), {k: _tensors_read(self, v) for k, v in kwargs.items()}
        written = [args[0]] if func.__name__ in _WRITES_FIRST and args else []
        written += [v for k, v in kwargs.items() if k == "out"]
        reads = list(args[1:] if func.__name__ in _WRITES_FIRST else args)
        exact = _EXACT_READS.get(func.__name__)
        try:
            picked = exact(*args, **kwargs) if exact is not None else {}
        except (TypeError, ValueError, IndexError):
            picked = {}  # a malformed call: numpy raises the program's own error below
        result = func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        # A function whose result is a view of an argument (ravel, split, squeeze...) reads nothing
        # of it, and the view keeps being watched; with out=, the result is the written out.
        aliased = {} if "out" in kwargs else _aliased(result, reads)
        for s in _shadows(reads + [v for k, v in kwargs.items() if k != "out"]):
            if id(s) not in aliased:
                s._read(picked.get(id(s)))
        for s in _shadows(written):
            s._wrote()
        return _rewrap(result, aliased) if aliased else result

    @property
    def flat(self):
        """``a.flat[k] = v`` writes (and ``a.flat[k]`` reads) the elements ``k`` names."""
        return _Flat(self) if self._host is not None else self.view(np.ndarray).flat

    def __repr__(self):  # looks like the array it stands for; printing is not a checked read
        return repr(self.view(np.ndarray))

    def __reduce__(self):  # pickles (and copies between processes) as a plain array
        return self.view(np.ndarray).__reduce__()

    def fill(self, value):
        self.view(np.ndarray).fill(value)
        self._wrote()

    def put(self, indices, values, mode="raise"):
        addrs = self.addresses().flat[np.asarray(indices)] if self._host is not None else None
        self.view(np.ndarray).put(indices, _plain(values), mode)
        self._wrote(addrs)

    def tolist(self):
        self._read(what="numpy tolist")
        return self.view(np.ndarray).tolist()

    def item(self, *args):
        self._read(self.addresses().flat[args[0]] if args else None)
        return self.view(np.ndarray).item(*args)

    def __int__(self):
        self._read()
        return int(self.view(np.ndarray))

    def __float__(self):
        self._read()
        return float(self.view(np.ndarray))

    def __index__(self):
        self._read()
        return self.view(np.ndarray).__index__()

    def __bool__(self):
        self._read()
        return bool(self.view(np.ndarray))


# numpy functions that return a base-class view of an ndarray subclass (numpy strips it; no hook sees it)
_KEEPS_VIEWS = ("asarray", "ascontiguousarray", "asfortranarray")


def _keep_watching(fn):
    """``np.asarray(a)`` of a watched array: the view it returns is watched too (else writes through
    it are unseen and a later read of them is a false report)."""
    def wrapper(a, *args, **kwargs):
        out = fn(a, *args, **kwargs)
        if (isinstance(a, ShadowArray) and a._host is not None and type(out) is np.ndarray
                and np.may_share_memory(out, a.view(np.ndarray))):
            out = out.view(ShadowArray)
            out._host = a._host
        return out
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


# A subscript store's opcodes: ``h[k] = v``, and from Python 3.12 on ``h[a:b] = v`` (its own opcode: missing it
# took such a store's value as exported, and its reads of never-written elements went unreported there).
STORE_OPS = frozenset({"STORE_SUBSCR", "STORE_SLICE"})


def _storing(frame) -> bool:
    """Whether ``frame`` is executing a subscript store (``h[k] = t``: numpy converts the value)."""
    try:
        return dis.opname[frame.f_code.co_code[frame.f_lasti]] in STORE_OPS
    except (AttributeError, IndexError, TypeError):
        return False


def _from_torch(frame) -> bool:
    """Whether ``__dlpack__`` was called by torch itself (``torch.from_dlpack``: the alias is seen)."""
    path = frame.f_code.co_filename.replace("\\", "/") if frame is not None else ""
    return "/torch/" in path


class HostViews:
    """Patches ``Tensor.numpy`` / ``__array__`` / ``tolist`` while an oracle runs."""

    def __init__(self, oracle):
        self.oracle = oracle
        self._saved: dict = {}
        self._numpy_saved: dict = {}

    def install(self) -> None:
        self._saved = {n: getattr(torch.Tensor, n) for n in ("numpy", "__array__", "tolist", "__dlpack__")}
        saved, host = self._saved, self

        def numpy(t, *a, **k):
            return host._wrap(t, saved["numpy"](t, *a, **k))

        def array(t, *a, **k):
            if k.get("copy") is True or (a and _storing(sys._getframe(1))):
                host._tensor_read(t, "numpy read")  # a copy (np.array(t)), or the value of h[k] = t: a read
                return saved["__array__"](t, *a, **k)
            return host._exported(t, saved["__array__"](t, *a, **k))

        def tolist(t):
            host._tensor_read(t)
            return saved["tolist"](t)

        def dlpack(t, *a, **k):
            capsule = saved["__dlpack__"](t, *a, **k)
            if not _from_torch(sys._getframe(1)):
                host._exported(t, None)
            return capsule

        torch.Tensor.numpy, torch.Tensor.__array__, torch.Tensor.tolist = numpy, array, tolist  # type: ignore[assignment,method-assign]
        torch.Tensor.__dlpack__ = dlpack  # type: ignore[assignment,method-assign]

        self._numpy_saved = {n: getattr(np, n) for n in _KEEPS_VIEWS if hasattr(np, n)}
        for name, fn in self._numpy_saved.items():
            setattr(np, name, _keep_watching(fn))

    def uninstall(self) -> None:
        for name, fn in self._saved.items():
            setattr(torch.Tensor, name, fn)
        self._saved = {}
        for name, fn in self._numpy_saved.items():
            setattr(np, name, fn)
        self._numpy_saved = {}

    def _wrap(self, t, arr):
        if self.oracle.paused() or t.device.type != "cpu" or not isinstance(arr, np.ndarray):
            return arr
        if arr.__array_interface__["data"][0] != t.data_ptr() or not self.oracle.is_tracked(t):
            return arr  # a copy (dtype conversion): fresh numpy memory
        out = arr.view(ShadowArray)
        out._host = self
        return out

    def _exported(self, t, arr):
        """``np.asarray(t)``: numpy strips a subclass from what ``__array__`` returns, so writes
        through this view cannot be seen. Its bytes count as written from here on: a missed read
        of them is possible, a false report on a correct program is not. ``arr`` None: the view
        was exported through DLPack (the memory is shared whatever the device)."""
        shared = arr is None or (isinstance(arr, np.ndarray) and t.device.type == "cpu"
                                 and arr.__array_interface__["data"][0] == t.data_ptr())
        if not self.oracle.paused() and shared and t.numel() and self.oracle.is_tracked(t):
            from .torch_effects import addresses
            self.write(addresses(t), t.element_size())
        return arr

    def _tensor_read(self, t, what: str = "Tensor.tolist") -> None:
        if not self.oracle.paused() and t.device.type == "cpu" and self.oracle.is_tracked(t):
            from .torch_effects import addresses
            self.read(addresses(t), t.element_size(), what)

    def read(self, addrs: np.ndarray, itemsize: int, what: str) -> None:
        if not self.oracle.paused() and addrs.size:
            self.oracle.host_read(what, addrs, itemsize)

    def write(self, addrs: np.ndarray, itemsize: int) -> None:
        if not self.oracle.paused() and addrs.size:
            self.oracle.host_write(addrs, itemsize)
