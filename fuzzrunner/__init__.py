"""fuzzrunner: fuzz GPU model runners for reads of uninitialized or stale LoRA metadata.

The front door only re-exports; everything else is private to the package.

The names below load on first use (PEP 562), so that ``import fuzzrunner.pytest_plugin``
(which Python starts by running this file) imports neither torch nor Triton: pytest loads
the plugin in every session. Device set-up (``_env.configure``: TRITON_INTERPRET=1 when
there is no GPU) still runs before anything of the package can reach Triton: on the first
name taken from here (``from fuzzrunner import track`` included), at the top of
``fuzzrunner.kernels``, and at once when the device is already named (``_env.decided``: workers
have it from the hub), since that costs no torch import.
"""

from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING

from . import _checkout, _env

_checkout.install()  # fuzzrunner.targets from a checkout's top-level targets/ folder
if _env.decided():
    _env.configure()  # the device is decided: no GPU probe, no torch import

from ._version import __version__  # noqa: E402

__all__ = ["__version__", "Case", "Settings", "Target", "carry_over", "fuzz", "kernel_launch", "replay", "track"]

_HOME = {"Case": ".case", "Settings": ".settings", "Target": ".target", "carry_over": ".tracking",
         "fuzz": ".api", "kernel_launch": ".tracking", "replay": ".api", "track": ".tracking"}

if _TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from .api import fuzz, replay
    from .case import Case
    from .settings import Settings
    from .target import Target
    from .tracking import carry_over, kernel_launch, track


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'fuzzrunner' has no attribute {name!r}")
    _env.configure()  # before the import below can reach Triton
    value = getattr(_import_module(_HOME[name], __name__), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
