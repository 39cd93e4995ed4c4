"""The reference model runner: the system under test."""

from .config import RunnerConfig
from .faults import Faults
from .model_runner import DUMMY_KINDS, ModelRunner, Request, StepOutput
from .reference_model import ReferenceModel

__all__ = ["DUMMY_KINDS", "Faults", "ModelRunner", "ReferenceModel", "Request", "RunnerConfig", "StepOutput"]
