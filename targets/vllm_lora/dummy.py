"""The dummy-LoRA mapping a capture (and a warm-up dummy run) programs: vLLM's own code where it has it.

vLLM's ``LoRAModelRunnerMixin.maybe_select_dummy_loras(lora_config, num_scheduled_tokens, ...,
num_active_loras=k)`` (0.17 and later; both model runners call it: the V1 runner's ``_dummy_run``
through ``maybe_dummy_run_with_lora``, the V2 runner's capture hook ``create_lora_capture_hook``) builds
the mapping and hands it to ``self._set_active_loras``. It is called here unbound, with a stand-in
``self`` that records the token mapping, so that what the target captures is what the installed (or
patched, ``FUZZRUNNER_VLLM_PATCH``) vLLM would capture. Where the mixin's module cannot be imported (it
pulls in much of the engine) the same function is compiled from the installed source file. Releases
whose function takes no ``num_active_loras`` (before 0.17: one LoRA capture key, grid z fixed) get the
re-statement in ``restated``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import os
from types import SimpleNamespace
from typing import Any

MODULE = "vllm.v1.worker.lora_model_runner_mixin"


def load() -> tuple[Any, str]:
    """(vLLM's ``maybe_select_dummy_loras`` or None, a line for ``doctor``)."""
    try:
        mod = importlib.import_module(MODULE)
        fn, how = mod.LoRAModelRunnerMixin.maybe_select_dummy_loras, "imported"
    except Exception as e:  # noqa: BLE001 - the same function, compiled from its source file
        try:
            fn, how = _compiled(), f"compiled from its source ({type(e).__name__} importing the mixin)"
        except Exception as e2:  # noqa: BLE001 - then the re-statement below
            return None, f"dummy mapping: re-stated (vLLM's maybe_select_dummy_loras: {type(e2).__name__}: {e2})"[:200]
    if "num_active_loras" not in inspect.signature(fn).parameters:
        return None, "dummy mapping: re-stated (this release's maybe_select_dummy_loras takes no num_active_loras)"
    return fn, f"dummy mapping: vLLM's maybe_select_dummy_loras ({how})"


def source_file(module: str) -> str:
    """The file of vLLM module ``module``, found from the imported ``vllm`` package alone: importing
    (or ``find_spec``) a submodule runs its packages' ``__init__``, and on a GPU machine with a carried
    tree ``vllm.lora.layers``' pulls quantization code that asks ``vllm._C`` (absent) at import."""
    import vllm
    base = os.path.join(os.path.dirname(os.path.abspath(vllm.__file__)), *module.split(".")[1:])
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    raise ImportError(f"no {module} in {os.path.dirname(vllm.__file__)}")


def _parsed(module: str) -> tuple[str, ast.Module]:
    path = source_file(module)
    with open(path, encoding="utf-8") as f:
        return path, ast.parse(f.read())


def _class_from_source(module: str, name: str) -> Any:
    """Class ``name`` (an enum of names and values) compiled from ``module``'s source file alone."""
    import enum
    path, tree = _parsed(module)
    cls = next(c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == name)
    ns: dict = {"Enum": enum.Enum, "IntEnum": enum.IntEnum, "auto": enum.auto}
    exec(compile(ast.Module([cls], []), path, "exec"), ns)  # noqa: S102 - vLLM's own class
    return ns[name]


def _compiled():
    path, tree = _parsed(MODULE)
    fn = next(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body
              if isinstance(n, ast.FunctionDef) and n.name == "maybe_select_dummy_loras")
    for a in fn.args.args + fn.args.kwonlyargs:
        a.annotation = None  # annotations name engine types that are not imported here
    fn.returns = None
    import numpy as np
    from vllm.lora.request import LoRARequest
    ns: dict = {"np": np, "contextmanager": contextlib.contextmanager, "LoRARequest": LoRARequest}
    try:  # a default value (mapping_type=LoRAMappingType.LANGUAGE, 0.33): the enum, imported or compiled
        ns["LoRAMappingType"] = importlib.import_module("vllm.lora.layers").LoRAMappingType
    except Exception:  # noqa: BLE001 - vllm.lora.layers does not import here (a carried tree on a GPU)
        with contextlib.suppress(ImportError, StopIteration):
            ns["LoRAMappingType"] = _class_from_source("vllm.lora.layers.utils", "LoRAMappingType")
    exec(compile(ast.Module([fn], []), path, "exec"), ns)  # noqa: S102 - vLLM's own function
    return ns["maybe_select_dummy_loras"]


class _Recorder:
    """The model runner, as far as ``maybe_select_dummy_loras`` uses it."""

    def __init__(self):
        self.lora_manager = object()
        self.token_mapping: list[int] = []

    def _set_active_loras(self, *args, **kwargs):
        self.token_mapping = [int(i) for i in (args[1] if len(args) > 1 else kwargs["token_lora_mapping"])]


def from_vllm(fn, max_loras: int, per_request: list[int], k: int) -> list[int]:
    """The token mapping as slots: vLLM's adapter ids 1..max_loras sit in slots 0..max_loras-1 (the dummy
    adapters fill the free slots), id 0 (no LoRA) is -1, as ``convert_mapping`` gives them."""
    import numpy as np
    rec = _Recorder()
    cfg = SimpleNamespace(max_loras=max_loras, specialize_active_lora=True)
    with fn(rec, cfg, np.array(per_request, dtype=np.int32), num_active_loras=k):
        pass
    return [i - 1 if i > 0 else -1 for i in rec.token_mapping]


def restated(max_loras: int, per_request: list[int], k: int) -> list[int]:
    """vLLM 0.33's rule, re-stated: adapter ids 1..k cycled over the requests (k > max_loras caps at
    max_loras and, despite its comment, adds no no-LoRA request); id i in slot i-1."""
    k = min(k, max_loras)
    out: list[int] = []
    for r, n in enumerate(per_request):
        out += [(r % k) if k else -1] * n
    return out
