"""fuzzrunner: fuzz GPU model runners for reads of uninitialized or stale LoRA metadata."""

from . import _env

_env.configure()
