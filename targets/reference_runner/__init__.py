"""Target ``reference_runner``: the reference model runner driven by op sequences."""

import os

from fuzzrunner.runner import Faults
from fuzzrunner.target import Target

from .cases import cases
from .features import FEATURE_SPACE, features
from .run import run
from .schema import SCHEMA

# what this target drives, as `fuzzrunner targets` says it (catalog.py reads it without importing this)
DRIVES = ("dummy runs, CUDA-graph capture and replay, adapters loaded and evicted between steps",
          "fuzzrunner's own Triton shrink, expand and bgmv kernels")

TARGET = Target(
    name="reference_runner",
    description="the reference model runner (LoRA shrink/expand/bgmv in Triton) driven by op sequences",
    cases=cases,
    run=run,
    faults=tuple(Faults.names()),
    fault_descriptions=Faults.describe(),
    schema=SCHEMA,
    features=features,
    feature_space=FEATURE_SPACE,
    # the minimal cases of the five planted faults, with the faults off: the paths where vLLM's
    # LoRA dummy-run bugs lived (shipped as package data)
    seeds=os.path.join(os.path.dirname(__file__), "seeds"),
)
