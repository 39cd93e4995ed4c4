"""fuzzrunner: fuzz GPU model runners for reads of uninitialized or stale LoRA metadata.

The front door only re-exports; everything else is private to the package.
"""

from . import _env

_env.configure()  # before anything imports Triton: TRITON_INTERPRET=1 when there is no GPU

from .api import fuzz, replay  # noqa: E402
from .case import Case  # noqa: E402
from .settings import Settings  # noqa: E402
from .target import Target  # noqa: E402
from .tracking import carry_over, track  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Case", "Settings", "Target", "carry_over", "fuzz", "replay", "track"]
