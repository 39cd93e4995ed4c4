"""fuzzrunner: fuzz GPU model runners for reads of uninitialized or stale LoRA metadata.

The front door only re-exports; everything else is private to the package.

The names below load on first use (PEP 562), so that ``import fuzzrunner.pytest_plugin``
(which Python starts by running this file) imports neither torch nor Triton: pytest loads
the plugin in every session. Device set-up (``_env.configure``: TRITON_INTERPRET=1 when
there is no GPU) still runs before anything of the package can reach Triton: on the first
name taken from here that can reach it (``from fuzzrunner import track`` included; the
registries' names cannot), at the top of ``fuzzrunner.kernels``, and at once when the device
is already named (``_env.decided``: workers have it from the hub), since that costs no torch
import. Then the plug-ins of the ``fuzzrunner.plugins`` entry-point group register their
oracles, kinds, tools and targets (``plugins.py``): every fuzzrunner process imports this file
first, so they reach the CLI's choices and the workers alike.
"""

from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING

from . import _checkout, _env

_checkout.install()  # fuzzrunner.targets from a checkout's top-level targets/ folder
if _env.decided():
    _env.configure()  # the device is decided: no GPU probe, no torch import

from ._version import __version__  # noqa: E402

__all__ = ["__version__", "Case", "Context", "Kind", "Oracle", "OracleSpec", "Settings", "Target", "Tool",
           "Violation", "carry_over", "fuzz", "kernel_launch", "register_kind", "register_oracle", "register_target",
           "register_tool", "replay", "track"]

_HOME = {"Case": ".case", "Settings": ".settings", "Target": ".target", "carry_over": ".tracking",
         "fuzz": ".api", "kernel_launch": ".tracking", "replay": ".api", "track": ".tracking",
         "Oracle": ".oracles.base", "Context": ".context", "OracleSpec": ".names", "register_oracle": ".names",
         "Kind": ".names", "register_kind": ".names", "Tool": ".names", "register_tool": ".names",
         "register_target": ".target", "Violation": ".violation"}
# torch-free: a plug-in's registration takes them without the device set-up (no torch import in a pytest session)
_LIGHT = {"Context", "OracleSpec", "register_oracle", "Kind", "register_kind", "Tool", "register_tool",
          "register_target", "Violation"}

if _TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from .api import fuzz, replay
    from .case import Case
    from .context import Context
    from .names import Kind, OracleSpec, Tool, register_kind, register_oracle, register_tool
    from .oracles.base import Oracle
    from .settings import Settings
    from .target import Target, register_target
    from .tracking import carry_over, kernel_launch, track
    from .violation import Violation


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'fuzzrunner' has no attribute {name!r}")
    if name not in _LIGHT:
        _env.configure()  # before the import below can reach Triton
    value = getattr(_import_module(_HOME[name], __name__), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))


from . import plugins as _plugins  # noqa: E402

_plugins.load()  # last: a plug-in's registration may take the names above
