"""Dispatch modes that keep Dynamo out of their ``__torch_dispatch__`` themselves, without importing it.

torch wraps a dispatch mode's ``__torch_dispatch__`` in a Dynamo-disabling wrapper
(``torch._disable_dynamo``), so that a compiled region running Python (a graph break) never traces
into the mode. That wrapper imports ``torch._dynamo`` at the mode's first op (seconds: about 4 s of a
worker's 8 s start-up on the H200 host, 2 s on a laptop) and costs about 5 us of every op (an H200
profile). A mode derived from ``DynamoFreeMode`` does without it, where torch's C module has Dynamo's
frame hooks (``HOOKS``): its ``__torch_dispatch__`` frame is one Dynamo always runs as it is
(``skip_dynamo``), and while a Dynamo callback is set (code a compiled region calls) the mode's
``_dispatch`` goes through torch's wrapper after all (``dynamo_active``, ``disabled``). So no oracle
makes a worker import Dynamo; only code under test that uses it does. Without the hooks torch wraps
the mode as it always did.

A subclass defines ``_dispatch(self, func, types, args, kwargs)`` (its work) and either keeps
``DynamoFreeMode.__torch_dispatch__`` or defines its own that begins with ``if dynamo_active(): return
disabled(type(self))(self, ...)``: the frame is marked as one Dynamo skips whatever it does, so one
without that check would let Dynamo trace what it calls.
"""

from __future__ import annotations

import os

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def _hooks():
    """``(get_eval_frame_callback, skip)`` from Dynamo's C module, where this torch has them; else None."""
    try:
        from torch._C._dynamo import eval_frame as ef
        strategy = ef._FrameExecStrategy(ef._FrameAction.SKIP, ef._FrameAction.DEFAULT)
        set_strategy, callback = ef.set_code_exec_strategy, ef.get_eval_frame_callback
    except (ImportError, AttributeError, TypeError):
        return None

    def skip(code) -> None:
        set_strategy(code, strategy)
    return callback, skip


HOOKS = _hooks()
_TORCH = os.path.dirname(torch.__file__) + os.sep  # (not torchvision's, torchao's...)
_DISABLED: dict = {}  # per mode class: torch's Dynamo-disabling wrapper of its _dispatch, made at its first need


def dynamo_active() -> bool:
    """A Dynamo callback is set (this thread runs code a compiled region called): keep Dynamo out."""
    return HOOKS is not None and HOOKS[0]() is not None


def disabled(cls):
    """``cls._dispatch`` in torch's Dynamo-disabling wrapper (made once per class)."""
    fn = _DISABLED.get(cls)
    if fn is None:
        fn = _DISABLED[cls] = torch._disable_dynamo(cls._dispatch, recursive=True)
    return fn


class DynamoFreeMode(TorchDispatchMode):
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.skip_dynamo()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """Whether torch must wrap ``__torch_dispatch__`` to skip Dynamo: only where ``HOOKS`` are missing."""
        return HOOKS is None

    @classmethod
    def skip_dynamo(cls) -> None:
        """Mark the class's ``__torch_dispatch__`` frames as ones Dynamo runs as they are (at the class's
        definition, and again at each start of an oracle using it: cheap, and nothing can leave them
        unmarked for a case)."""
        if HOOKS is None:
            return
        for klass in cls.__mro__:
            code = getattr(klass.__dict__.get("__torch_dispatch__"), "__code__", None)
            if code is not None and not code.co_filename.startswith(_TORCH):  # torch's wrapper, shared: left alone
                HOOKS[1](code)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if dynamo_active():
            return disabled(type(self))(self, func, types, args, kwargs)
        return self._dispatch(func, types, args, kwargs)

    def _dispatch(self, func, types, args=(), kwargs=None):
        raise NotImplementedError


DynamoFreeMode.skip_dynamo()
