"""Target ``lora_kernels``: shrink, expand and bgmv alone, over reused metadata with padded and stale states."""

from fuzzrunner.target import Target

from .cases import cases
from .features import FEATURE_SPACE, features
from .run import run
from .schema import SCHEMA

# what this target drives, as `fuzzrunner targets` says it (catalog.py reads it without importing this)
DRIVES = ("fuzzrunner's Triton lora_shrink, lora_expand and lora_bgmv", "their metadata reused across launches")

TARGET = Target(
    name="lora_kernels",
    description="lora_shrink / lora_expand / lora_bgmv alone, over reused metadata with padded and stale states",
    cases=cases,
    run=run,
    schema=SCHEMA,
    features=features,
    feature_space=FEATURE_SPACE,
)
