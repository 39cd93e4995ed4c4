"""Target ``lora_kernels``: shrink, expand and bgmv alone, over reused metadata with padded and stale states."""

from fuzzrunner.target import Target

from .cases import cases
from .features import FEATURE_SPACE, features
from .run import run
from .schema import SCHEMA

TARGET = Target(
    name="lora_kernels",
    description="lora_shrink / lora_expand / lora_bgmv alone, over reused metadata with padded and stale states",
    cases=cases,
    run=run,
    schema=SCHEMA,
    features=features,
    feature_space=FEATURE_SPACE,
)
